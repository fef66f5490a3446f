# PyFlink's own module paths (pyflink.common.typeinfo, pyflink.datastream.functions,
# pyflink.datastream.window, ...): a keyed event-time timer and a tumbling event-time window
# whose functions are annotated with PyFlink's nested context classes.
# compat: sorted
from typing import Iterable

from pyflink.common.time import Time
from pyflink.common.typeinfo import Types
from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from pyflink.datastream.functions import KeyedProcessFunction, ProcessWindowFunction, RuntimeContext
from pyflink.datastream.state import ValueStateDescriptor
from pyflink.datastream.stream_execution_environment import StreamExecutionEnvironment
from pyflink.datastream.window import TimeWindow, TumblingEventTimeWindows


class Stamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[0]


class Remind(KeyedProcessFunction):
    def open(self, runtime_context: RuntimeContext):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.LONG()))

    def process_element(self, value, ctx: KeyedProcessFunction.Context):
        self.seen.update((self.seen.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 2000)

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext):
        yield "timer %s at %d" % (ctx.get_current_key(), timestamp)


class Describe(ProcessWindowFunction):
    def process(self, key, context: ProcessWindowFunction.Context, elements: Iterable[tuple]):
        window: TimeWindow = context.window()
        yield "window %s [%d, %d): %s" % (key, window.start, window.end, sorted(e[2] for e in elements))


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
events = env.from_collection(
    [(1000, "alice", 110), (2000, "bob", 53), (3000, "alice", 20), (4000, "bob", 30),
     (5000, "alice", 13), (6500, "bob", 3), (7000, "bob", 16), (10000, "alice", 20)],
    type_info=Types.TUPLE([Types.LONG(), Types.STRING(), Types.LONG()]))
# one instance, as the source: each key's records keep their order into the keyed operators
stamped = events.assign_timestamps_and_watermarks(
    WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Stamp())).set_parallelism(1)
by_name = stamped.key_by(lambda e: e[1], key_type=Types.STRING())
by_name.process(Remind(), output_type=Types.STRING()).print("timer")
by_name.window(TumblingEventTimeWindows.of(Time.seconds(5))).process(Describe(), output_type=Types.STRING()).print("window")
env.execute("nested paths")
