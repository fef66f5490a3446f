# connect() of two non-broadcast streams: CoMapFunction, CoFlatMapFunction, and keyed connect
# with a KeyedCoProcessFunction sharing state and timers between both inputs of a key.
# compat: sorted
from pyflink.common import Types
from pyflink.datastream import (CoFlatMapFunction, CoMapFunction, KeyedCoProcessFunction,
                                StreamExecutionEnvironment)
from pyflink.datastream.state import ListStateDescriptor


class Tag(CoMapFunction):
    def map1(self, value):
        return "left:" + str(value)

    def map2(self, value):
        return "right:" + value


class Explode(CoFlatMapFunction):
    def flat_map1(self, value):
        for _ in range(value):
            yield value

    def flat_map2(self, value):
        yield len(value)


class Join(KeyedCoProcessFunction):
    """Both inputs of a key share its state and its timer (PyFlink does not order the two inputs,
    so the output does not depend on their order)."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen", Types.STRING()))

    def process_element1(self, value, ctx):
        self.seen.add("L" + value[1])
        ctx.timer_service().register_event_time_timer(100)
        yield "1:" + ctx.get_current_key() + ":" + value[1]

    def process_element2(self, value, ctx):
        self.seen.add("R" + value[1])
        yield "2:" + ctx.get_current_key() + ":" + value[1]

    def on_timer(self, timestamp, ctx):
        yield "timer:" + ctx.get_current_key() + ":" + ",".join(sorted(self.seen.get()))


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
nums = env.from_collection([1, 2, 3], type_info=Types.INT())
words = env.from_collection(["ab", "cde"], type_info=Types.STRING())
nums.connect(words).map(Tag(), output_type=Types.STRING()).print("map")
nums.connect(words).flat_map(Explode(), output_type=Types.INT()).print("flat")
t = Types.TUPLE([Types.STRING(), Types.STRING()])
left = env.from_collection([("k1", "a"), ("k2", "b"), ("k1", "c")], type_info=t)
right = env.from_collection([("k1", "x"), ("k2", "y")], type_info=t)
left.connect(right).key_by(lambda x: x[0], lambda x: x[0]).process(Join(), output_type=Types.STRING()).print("join")
env.execute("connect")
