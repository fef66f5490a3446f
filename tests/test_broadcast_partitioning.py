"""``DataStream.broadcast()`` without an argument: broadcast partitioning, every record to every
parallel instance of the next operator (PyFlink's ``broadcast()``), on both runtimes. With a
``MapStateDescriptor`` it is the broadcast-state API (tests/test_broadcast_state.py)."""

from __future__ import annotations

from collections import Counter

import pytest

from flowpoint import CollectSink, MapFunction, Types

RUNTIMES = {"epoch": {"execution.runtime": "epoch"}, "continuous": {"execution.runtime": "continuous", "execution.buffer-timeout": 5}}


class TagSubtask(MapFunction):
    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return (value, self.index)


@pytest.mark.parametrize("runtime", sorted(RUNTIMES))
def test_every_record_reaches_every_instance_of_the_next_operator(make_env, runtime):
    env = make_env(parallelism=2, max_records=7, **RUNTIMES[runtime])
    sink = CollectSink()
    records = list(range(40))
    (env.from_collection(records, type_info=Types.INT())
        .map(lambda x: x * 10).set_parallelism(1)
        .broadcast()
        .map(TagSubtask(), output_type=Types.TUPLE([Types.INT(), Types.INT()])).set_parallelism(2)
        .sink_to(sink).set_parallelism(2))
    env.execute(f"broadcast on the {runtime} runtime")
    got = Counter(sink.results)
    assert got == Counter((x * 10, i) for x in records for i in (0, 1))


def test_broadcast_is_an_exchange_of_its_own_in_the_graph(make_env):
    env = make_env(parallelism=3)
    env.from_collection([1, 2]).map(lambda x: x).broadcast().map(lambda x: x).print()
    graph = env.get_stream_graph()
    # from_collection (one instance) -> rebalance -> map -> broadcast -> map + print (chained)
    assert [e.partitioning for e in graph.edges] == ["rebalance", "broadcast"]


def test_key_by_after_broadcast_partitions_by_key(make_env):
    """The last partitioning before an operator decides, as in Flink."""
    env = make_env(parallelism=2)
    env.from_collection([1, 2]).broadcast().key_by(lambda x: x).reduce(lambda a, b: a + b).print()
    assert "keyed" in [e.partitioning for e in env.get_stream_graph().edges]
