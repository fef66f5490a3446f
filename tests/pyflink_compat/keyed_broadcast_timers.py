# KeyedBroadcastProcessFunction: the clocks on both contexts, timers registered in
# process_element (ReadOnlyContext) firing on_timer (OnTimerContext) with the key, the domain
# and the broadcast state; the clocks of a non-keyed BroadcastProcessFunction's contexts.
# compat: sorted
from pyflink.common import Types
from pyflink.common.watermark_strategy import TimestampAssigner, WatermarkStrategy
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from pyflink.datastream.state import MapStateDescriptor, ValueStateDescriptor

RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())


class Stamp(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class Remind(KeyedBroadcastProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def process_element(self, value, ctx: KeyedBroadcastProcessFunction.ReadOnlyContext):
        self.count.update((self.count.value() or 0) + 1)
        clocks = (type(ctx.current_processing_time()).__name__, type(ctx.current_watermark()).__name__,
                  type(ctx.timer_service().current_processing_time()).__name__,
                  type(ctx.timer_service().current_watermark()).__name__)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)
        yield "element %s at %d, key %s, clocks %s" % (value[0], ctx.timestamp(), ctx.get_current_key(), clocks)

    def process_broadcast_element(self, value, ctx: KeyedBroadcastProcessFunction.Context):
        ctx.get_broadcast_state(RULES).put(value[0], value[1])
        clocks = (type(ctx.current_processing_time()).__name__, type(ctx.current_watermark()).__name__,
                  type(ctx.timer_service().current_processing_time()).__name__,
                  type(ctx.timer_service().current_watermark()).__name__)
        yield "rule %s at %d, clocks %s" % (value[0], ctx.timestamp(), clocks)

    def on_timer(self, timestamp, ctx: KeyedBroadcastProcessFunction.OnTimerContext):
        rules = sorted(ctx.get_broadcast_state(RULES).keys())
        yield "timer %s at %d (%s, ts %d), count %d, rules %s" % (
            ctx.get_current_key(), timestamp, ctx.time_domain(), ctx.timestamp(), self.count.value(), rules)
        if timestamp < 1000:
            ctx.timer_service().register_event_time_timer(timestamp + 1000)


class Clocks(BroadcastProcessFunction):
    def process_element(self, value, ctx: BroadcastProcessFunction.ReadOnlyContext):
        yield "plain element %s at %d, clocks %s" % (value[0], ctx.timestamp(), (
            type(ctx.current_processing_time()).__name__, type(ctx.current_watermark()).__name__,
            type(ctx.timer_service().current_watermark()).__name__))

    def process_broadcast_element(self, value, ctx: BroadcastProcessFunction.Context):
        yield "plain rule %s at %d, clocks %s" % (value[0], ctx.timestamp(), (
            type(ctx.current_processing_time()).__name__, type(ctx.current_watermark()).__name__,
            type(ctx.timer_service().current_watermark()).__name__))


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Stamp())
rules = env.from_collection([("limit", 0)], type_info=Types.TUPLE([Types.STRING(), Types.LONG()])) \
    .assign_timestamps_and_watermarks(strategy).set_parallelism(1).broadcast(RULES)
events = env.from_collection([("a", 1), ("b", 2), ("a", 3)], type_info=Types.TUPLE([Types.STRING(), Types.LONG()])) \
    .assign_timestamps_and_watermarks(strategy).set_parallelism(1)
events.key_by(lambda e: e[0], key_type=Types.STRING()).connect(rules).process(Remind(), output_type=Types.STRING()).print()
events.connect(rules).process(Clocks(), output_type=Types.STRING()).print()
env.execute("keyed broadcast timers")
