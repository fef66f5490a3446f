# State time-to-live configured on every keyed state kind (a TTL long enough that nothing
# expires while the job runs: the values are the same as without TTL).
# compat: sorted
from pyflink.common import Time, Types
from pyflink.datastream import KeyedProcessFunction, StreamExecutionEnvironment
from pyflink.datastream.state import (ListStateDescriptor, MapStateDescriptor, ReducingStateDescriptor,
                                      StateTtlConfig, ValueStateDescriptor)

ttl = StateTtlConfig.new_builder(Time.hours(1)) \
    .set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite) \
    .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired) \
    .cleanup_full_snapshot() \
    .cleanup_incrementally(10, True) \
    .build()


class Track(KeyedProcessFunction):
    def open(self, runtime_context):
        descriptors = [ValueStateDescriptor("count", Types.INT()), ListStateDescriptor("seen", Types.INT()),
                       MapStateDescriptor("parity", Types.STRING(), Types.INT()),
                       ReducingStateDescriptor("total", lambda a, b: a + b, Types.INT())]
        for d in descriptors:
            d.enable_time_to_live(ttl)
        self.count = runtime_context.get_state(descriptors[0])
        self.seen = runtime_context.get_list_state(descriptors[1])
        self.parity = runtime_context.get_map_state(descriptors[2])
        self.total = runtime_context.get_reducing_state(descriptors[3])

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.seen.add(value[1])
        p = "even" if value[1] % 2 == 0 else "odd"
        self.parity.put(p, (self.parity.get(p) or 0) + 1)
        self.total.add(value[1])
        yield "%s count=%d seen=%s parity=%s total=%d" % (
            value[0], self.count.value(), sorted(self.seen.get()), sorted(self.parity.items()), self.total.get())


print("ttl ms", ttl.get_ttl().to_milliseconds(), ttl.get_update_type().name, ttl.get_state_visibility().name,
      ttl.get_cleanup_strategies().in_full_snapshot(), ttl.get_cleanup_strategies().get_incremental_cleanup_strategy().get_cleanup_size())
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
ds = env.from_collection([("a", 1), ("b", 2), ("a", 3), ("a", 4), ("b", 5)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
ds.key_by(lambda x: x[0]).process(Track(), output_type=Types.STRING()).print()
env.execute("ttl")
