# RuntimeExecutionMode.BATCH: keyed reduce and sum emit one final record per key, event-time
# windows fire at the end of input (nothing is late), processing-time timers do not fire.
# compat: sorted
from pyflink.common import Duration, Types, WatermarkStrategy
from pyflink.common.watermark_strategy import TimestampAssigner
from pyflink.datastream import KeyedProcessFunction, RuntimeExecutionMode, StreamExecutionEnvironment
from pyflink.datastream.window import TumblingEventTimeWindows
from pyflink.common.time import Time
from pyflink.datastream.state import ValueStateDescriptor


class Ts(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[2]


class Timers(KeyedProcessFunction):
    def open(self, runtime_context):
        self.registered = runtime_context.get_state(ValueStateDescriptor("registered", Types.BOOLEAN()))

    def process_element(self, value, ctx):
        if not self.registered.value():  # once per key (PyFlink registers timers asynchronously)
            self.registered.update(True)
            ctx.timer_service().register_processing_time_timer(1000)
        ctx.timer_service().register_event_time_timer(value[2] + 5000)
        yield "element", value[0], value[1]

    def on_timer(self, timestamp, ctx):
        yield "timer", ctx.get_current_key(), ctx.time_domain() == ctx.time_domain().EVENT_TIME


env = StreamExecutionEnvironment.get_execution_environment()
env.set_runtime_mode(RuntimeExecutionMode.BATCH)
env.set_parallelism(1)  # BATCH: Flink picks the parallelism of small inputs itself (docs/pyflink.md)
t = Types.TUPLE([Types.STRING(), Types.INT(), Types.LONG()])
data = [("a", 1, 1000), ("b", 2, 2000), ("a", 3, 61000), ("a", 5, 3000), ("b", 4, 125000), ("c", 7, 500)]
ds = env.from_collection(data, type_info=t)
ds.key_by(lambda x: x[0]).reduce(lambda a, b: (a[0], a[1] + b[1], max(a[2], b[2]))).print("reduce")
ds.key_by(lambda x: x[0]).sum(1).print("sum")
timed = ds.assign_timestamps_and_watermarks(
    WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_timestamp_assigner(Ts()))
timed.key_by(lambda x: x[0]) \
    .window(TumblingEventTimeWindows.of(Time.seconds(60))) \
    .reduce(lambda a, b: (a[0], a[1] + b[1], a[2])).print("window")
timed.key_by(lambda x: x[0]).process(Timers()).print("timers")
env.execute("batch")
