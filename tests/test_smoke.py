from flowpoint import CollectSink, KeyedProcessFunction, Types, ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n


def test_keyed_count_over_several_epochs(make_env):
    env = make_env(parallelism=2, max_records=4)
    sink = CollectSink()
    words = ["a", "b", "a", "c", "a", "b"] * 3
    env.from_collection(words).key_by(lambda w: w).process(Count()).uid("count").sink_to(sink)
    result = env.execute("smoke")
    assert result.epochs == 5
    assert sorted(sink.results) == sorted(
        [("a", i) for i in range(1, 10)] + [("b", i) for i in range(1, 7)] + [("c", i) for i in range(1, 4)]
    )
    assert result.get_keyed_state("count", "count") == {"a": 9, "b": 6, "c": 3}
