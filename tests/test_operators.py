"""DataStream operators end to end on Spark: stateless transformations, key_by variants, rolling
aggregations with Flink's semantics, union, rebalancing, sources, and the job client.

Most operators share one job (``ops`` fixture, several sinks) to keep the number of Spark jobs
small; each test checks its own sink."""

from __future__ import annotations

import time
from collections import defaultdict

import pytest
from conftest import build_env

from flowpoint import (
    ClickEventGenerator,
    CollectSink,
    DataGeneratorSource,
    JobStatus,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    ReduceFunction,
    ReducingStateDescriptor,
    Row,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
)
from flowpoint.api.types import arrow_to_rows
from flowpoint.errors import ConfigurationError, JobCancelledError

TUPLES = [("a", 3, "x1"), ("b", 1, "y1"), ("a", 1, "x2"), ("a", 5, "x3"), ("b", 7, "y2"), ("b", 1, "y3"), ("a", 1, "x4")]
FIELDS = ("name", "value", "tag")

# Flink's rolling aggregations, written out by hand for TUPLES (per key, in input order):
# sum/min/max change only the aggregated field (the other fields stay those of the key's first
# record); min_by/max_by emit the whole record holding the extreme (the first one on ties).
EXPECTED_ROLLING = {
    "sum": {"a": [("a", 3, "x1"), ("a", 4, "x1"), ("a", 9, "x1"), ("a", 10, "x1")],
            "b": [("b", 1, "y1"), ("b", 8, "y1"), ("b", 9, "y1")]},
    "min": {"a": [("a", 3, "x1"), ("a", 1, "x1"), ("a", 1, "x1"), ("a", 1, "x1")],
            "b": [("b", 1, "y1"), ("b", 1, "y1"), ("b", 1, "y1")]},
    "max": {"a": [("a", 3, "x1"), ("a", 3, "x1"), ("a", 5, "x1"), ("a", 5, "x1")],
            "b": [("b", 1, "y1"), ("b", 7, "y1"), ("b", 7, "y1")]},
    "min_by": {"a": [("a", 3, "x1"), ("a", 1, "x2"), ("a", 1, "x2"), ("a", 1, "x2")],
               "b": [("b", 1, "y1"), ("b", 1, "y1"), ("b", 1, "y1")]},
    "max_by": {"a": [("a", 3, "x1"), ("a", 3, "x1"), ("a", 5, "x3"), ("a", 5, "x3")],
               "b": [("b", 1, "y1"), ("b", 7, "y2"), ("b", 7, "y2")]},
}
EXPECTED_REDUCE = {
    "a": [("a", 3, "x1"), ("a", 4, "x1x2"), ("a", 9, "x1x2x3"), ("a", 10, "x1x2x3x4")],
    "b": [("b", 1, "y1"), ("b", 8, "y1y2"), ("b", 9, "y1y2y3")],
}
CLICKS = ClickEventGenerator(num_users=50)
NUM_CLICKS = 20


def to_row(t):
    return Row(name=t[0], value=t[1], tag=t[2])


def per_key(records, key=lambda r: r[0]):
    """Records grouped by key, in the order the sink received them (per-key order is kept)."""
    out = defaultdict(list)
    for r in records:
        out[key(r)].append(r)
    return dict(out)


class EmitOddTwice(ProcessFunction):
    def process_element(self, value, ctx):
        assert ctx.timestamp() is None
        if value[1] % 2:
            yield value[0]
            yield value[2]


class ConcatReduce(ReduceFunction):
    def reduce(self, value1, value2):
        return (value1[0], value1[1] + value2[1], value1[2] + value2[2])


class TagSubtask(MapFunction):
    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()
        self.parallelism = runtime_context.get_number_of_parallel_subtasks()
        self.max_parallelism = runtime_context.get_max_number_of_parallel_subtasks()
        self.task_name = runtime_context.get_task_name()

    def map(self, value):
        return (value, self.index, self.parallelism, self.task_name, self.max_parallelism)


@pytest.fixture(scope="module")
def module_env(spark, tmp_path_factory):
    def factory(parallelism: int = 2, max_records: int | None = None) -> StreamExecutionEnvironment:
        return build_env(spark, tmp_path_factory.mktemp("working"), parallelism, max_records)

    return factory


class Ops:
    """The shared job: ``sinks[name].results`` after it ran, its graph and its result."""

    def __init__(self, env):
        self.sinks: dict[str, CollectSink] = {}
        self.env = env

    def sink(self, stream, name):
        s = self.sinks[name] = CollectSink()
        stream.sink_to(s).name(f"collect-{name}")
        return stream

    def results(self, name):
        return self.sinks[name].results


@pytest.fixture(scope="module")
def ops(module_env):
    env = module_env(parallelism=2, max_records=40)  # 5 records per split: two epochs
    o = Ops(env)
    src = env.from_collection(TUPLES).name("tuples").uid("tuples-src")
    rows = src.map(to_row).name("to-row")

    o.sink(src.map(lambda t: (t[0], t[1] * 10)).name("times-ten").uid("times-ten"), "map")
    o.sink(src.flat_map(lambda t: [t[0]] * t[1]), "flat_map")
    o.sink(src.filter(lambda t: t[1] > 2), "filter")
    o.sink(src.process(EmitOddTwice()), "process")
    o.sink(src.map(lambda t: (t[0], t[1]), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).name("typed"), "typed")

    o.sink(src.key_by(lambda t: t[0]).reduce(ConcatReduce()).name("concat").uid("reduce-by-fn"), "reduce")
    o.sink(rows.key_by(lambda r: r.name).reduce(lambda a, b: Row(name=a.name, value=a.value + b.value, tag=a.tag + b.tag)), "reduce_rows")
    for agg in ("sum", "min", "max", "min_by", "max_by"):
        o.sink(getattr(src.key_by(0), agg)(1), f"{agg}_index")
        o.sink(getattr(rows.key_by("name"), agg)("value"), f"{agg}_name")

    seq = env.from_sequence(1, 20).name("seq")
    o.sink(seq, "sequence")
    o.sink(src.map(lambda t: t[2]).union(seq.filter(lambda x: x <= 3).map(str), env.from_collection(["z"])), "union")
    o.sink(seq.map(TagSubtask()).name("tagger").set_parallelism(3), "rebalanced")

    gen = env.from_source(DataGeneratorSource(lambda i: (i % 3, i * i), count=12), source_name="squares")
    o.sink(gen, "datagen")
    o.sink(gen.key_by(0).sum(1), "datagen_sum")

    clicks = env.from_source(DataGeneratorSource(CLICKS, count=NUM_CLICKS), source_name="clicks")
    o.sink(clicks, "clicks")
    o.sink(clicks.key_by("behavior").max_by("ts"), "clicks_latest")

    o.graph = env.get_stream_graph("operators")
    o.result = env.execute("operators")
    return o


@pytest.mark.slow
def test_map_flat_map_filter_process(ops):
    assert sorted(ops.results("map")) == sorted((t[0], t[1] * 10) for t in TUPLES)
    assert sorted(ops.results("flat_map")) == sorted(x for t in TUPLES for x in [t[0]] * t[1])
    assert sorted(ops.results("filter")) == sorted(t for t in TUPLES if t[1] > 2)
    assert sorted(ops.results("process")) == sorted(x for t in TUPLES if t[1] % 2 for x in (t[0], t[2]))


def test_output_type_is_accepted(ops):
    assert sorted(ops.results("typed")) == sorted((t[0], t[1]) for t in TUPLES)
    typed = [n for n in ops.graph.nodes.values() if n.name == "typed"]
    assert typed[0].t.output_type == Types.TUPLE([Types.STRING(), Types.INT()])


def test_reduce_by_key_selector_function(ops):
    assert per_key(ops.results("reduce")) == EXPECTED_REDUCE
    assert ops.result.get_keyed_state("reduce-by-fn") == {"_reduce": {k: v[-1] for k, v in EXPECTED_REDUCE.items()}}


def test_reduce_on_rows_keyed_by_attribute(ops):
    got = per_key(ops.results("reduce_rows"))
    assert got == EXPECTED_REDUCE
    assert all(r._fields == FIELDS for rs in got.values() for r in rs)


@pytest.mark.parametrize("agg", ["sum", "min", "max", "min_by", "max_by"])
def test_rolling_aggregation_by_tuple_index(ops, agg):
    got = per_key(ops.results(f"{agg}_index"))
    assert got == EXPECTED_ROLLING[agg]
    assert all(type(r) is tuple for rs in got.values() for r in rs)


@pytest.mark.parametrize("agg", ["sum", "min", "max", "min_by", "max_by"])
def test_rolling_aggregation_by_row_field_name(ops, agg):
    got = per_key(ops.results(f"{agg}_name"))
    assert got == EXPECTED_ROLLING[agg]
    for rs in got.values():
        for r in rs:
            assert isinstance(r, Row) and r._fields == FIELDS
    assert got["a"][-1].value == EXPECTED_ROLLING[agg]["a"][-1][1]


def test_union_of_streams(ops):
    assert sorted(ops.results("union")) == sorted([t[2] for t in TUPLES] + ["1", "2", "3", "z"])


def test_from_sequence_reads_every_number_once(ops):
    assert sorted(ops.results("sequence")) == list(range(1, 21))


def test_operator_parallelism_different_from_source_rebalances(ops):
    got = ops.results("rebalanced")
    assert sorted(v for v, *_ in got) == list(range(1, 21))
    assert {(p, name, maxp) for _, _, p, name, maxp in got} == {(3, "tagger", 128)}
    # every subtask gets work, although each upstream task emits one batch per epoch
    per_subtask = defaultdict(int)
    for _, i, *_ in got:
        per_subtask[i] += 1
    assert sorted(per_subtask) == [0, 1, 2]
    assert max(per_subtask.values()) - min(per_subtask.values()) <= 4
    tagger = next(n for n in ops.graph.nodes.values() if n.name == "tagger")
    assert tagger.parallelism == 3
    stage = ops.graph.stages[tagger.stage_id]
    assert stage.parallelism == 3
    assert [e.partitioning for e in stage.inputs] == ["rebalance"]


def test_data_generator_source_with_plain_function(ops):
    expected = [(i % 3, i * i) for i in range(12)]
    assert sorted(ops.results("datagen")) == sorted(expected)
    finals = {k: rs[-1] for k, rs in per_key(ops.results("datagen_sum")).items()}
    assert finals == {k: (k, sum(v for kk, v in expected if kk == k)) for k in range(3)}


def test_click_event_source_records_equal_the_generator(ops):
    got = ops.results("clicks")
    assert len(got) == NUM_CLICKS
    assert sorted(got) == sorted(CLICKS(i) for i in range(NUM_CLICKS))
    assert all(isinstance(r, Row) and r._fields == ("ts", "channel", "id", "behavior") for r in got)


def test_key_by_field_name_on_columnar_records(ops):
    latest = {k: rs[-1] for k, rs in per_key(ops.results("clicks_latest"), key=lambda r: r.behavior).items()}
    expected = {}
    for i in range(NUM_CLICKS):
        e = CLICKS(i)
        if e.behavior not in expected or e.ts > expected[e.behavior].ts:
            expected[e.behavior] = e
    assert latest == expected


def test_uid_and_name(ops):
    node = ops.graph.node_by_uid("times-ten")
    assert node.name == "times-ten" and node.kind == "map"
    assert ops.graph.node_by_uid("tuples-src").name == "tuples"
    assert ops.graph.node_by_uid("reduce-by-fn").name == "concat"
    assert {n.name for n in ops.graph.sinks()} >= {"collect-map", "collect-union"}
    assert ops.result.epochs == 2  # the keyed operators kept their state across epochs
    assert len(ops.result.get_job_id()) == 32


def test_stream_names_and_types_without_running(module_env):
    env = module_env()
    s = env.from_collection([1]).map(lambda x: x, output_type=Types.LONG()).name("n1")
    assert s.get_name() == "n1"
    assert s.get_type() == Types.LONG()
    assert s.filter(lambda x: True).get_type() == Types.LONG()
    assert s.set_parallelism(3).get_parallelism() == 3
    assert env.from_collection([1]).get_parallelism() == 1


def test_click_generator_batches_equal_single_records():
    for gen in (ClickEventGenerator(), ClickEventGenerator(num_users=None, seed=7, max_lateness_ms=250)):
        batch = gen.batch(1000, 1300)
        assert arrow_to_rows(batch, gen.output_type) == [gen(i) for i in range(1000, 1300)]
        assert gen(5) == gen(5)  # a pure function of the index


@pytest.mark.parametrize("receivers", [1, 2, 3, 8])
@pytest.mark.parametrize("columnar", [False, True])
def test_rebalance_spreads_each_batch_over_all_receivers(receivers, columnar):
    import pyarrow as pa

    from flowpoint.tasks.batches import decode
    from flowpoint.tasks.operators import RebalanceWriter
    from flowpoint.tasks.plan import EdgeSpec

    writer = RebalanceWriter(EdgeSpec(1, 0, "rebalance", None, receivers, 128, None, "next"), partition=1)
    batches = [list(range(start, start + size)) for start, size in ((0, 100), (100, 7), (107, 1))]
    for seq, batch in enumerate(batches):
        writer.process((5, 0, seq), pa.record_batch([pa.array(batch)], names=["value"]) if columnar else batch)
    received = defaultdict(list)
    by_origin = []
    for dest, (edge_index, origin, blob) in writer.out:
        assert 0 <= dest < receivers and edge_index == 0
        data, ts = decode(blob)
        assert ts is None
        records = data if isinstance(data, list) else data.column(0).to_pylist()
        received[dest].extend(records)
        by_origin.append((origin, records))
    assert sorted(x for xs in received.values() for x in xs) == list(range(108))
    counts = [len(received[d]) for d in range(receivers)]
    assert max(counts) - min(counts) <= 3
    # receivers order their input by origin: the slices of a batch, if they meet again
    # downstream, come back in the batch's order
    origins = [o for o, _ in by_origin]
    assert len(set(origins)) == len(origins)
    assert [x for _, xs in sorted(by_origin) for x in xs] == list(range(108))


# -- the job client ----------------------------------------------------------------------------


def test_execute_and_collect_returns_all_records(module_env):
    env = module_env(parallelism=2, max_records=10)
    stream = env.from_sequence(1, 25).map(lambda x: x * 2)
    with stream.execute_and_collect("collect") as it:
        got = list(it)
    assert sorted(got) == [x * 2 for x in range(1, 26)]


def test_execute_and_collect_with_a_limit_returns_that_many_and_ends_the_job(module_env):
    """As PyFlink: a list of the first ``limit`` records (here from batches of 10, so the limit
    falls inside one), the endless job cancelled once they came."""
    env = module_env(parallelism=1, max_records=10)
    source = DataGeneratorSource(lambda i: i, count=None, rate_limit_per_second=200)
    got = env.from_source(source, source_name="endless").map(lambda x: x * 2).execute_and_collect("limited", limit=3)
    assert got == [0, 2, 4]
    with pytest.raises(ConfigurationError, match="limit"):
        env.from_collection([1]).execute_and_collect(limit=-1)


def test_a_keyed_streams_execute_and_collect_gives_rows_of_key_and_value(module_env):
    """As PyFlink's, whose keyed stream carries ``Row(key, value)``."""
    from flowpoint import Row

    env = module_env(parallelism=2)
    with env.from_collection([("a", 1), ("b", 2), ("a", 3)]).key_by(lambda r: r[0]).execute_and_collect("keyed") as it:
        got = list(it)
    assert sorted(got) == [("a", ("a", 1)), ("a", ("a", 3)), ("b", ("b", 2))]
    assert all(isinstance(r, Row) and r.f0 == r.f1[0] for r in got)


def test_execute_async_status_and_cancel_of_unbounded_job(module_env):
    env = module_env(parallelism=2)
    env.get_configuration().set("execution.epoch.interval", 50)
    sink = CollectSink()
    source = DataGeneratorSource(lambda i: i, count=None, rate_limit_per_second=40)
    env.from_source(source, source_name="endless").map(lambda x: x + 1).sink_to(sink)
    client = env.execute_async("unbounded")
    assert len(client.get_job_id()) == 32
    deadline = time.monotonic() + 120
    while len(sink.results) < 3 and time.monotonic() < deadline:
        assert not client.is_done(), client.get_job_status()
        time.sleep(0.2)
    assert client.get_job_status() is JobStatus.RUNNING
    assert len(sink.results) >= 3
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(timeout=120)
    assert client.get_job_status() is JobStatus.CANCELED
    assert client.get_job_status().is_globally_terminal_state()
    got = sink.results
    # the records committed before the cancellation: distinct, each generated from an index
    assert len(set(got)) == len(got)
    assert all(isinstance(x, int) and x >= 1 for x in got)


# -- a stateful job at parallelism 1, 2 and 4 ---------------------------------------------------


class RunningStats(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", lambda a, b: a + b, Types.LONG()))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.total.add(value)
        yield ctx.get_current_key(), n, self.total.get()


VALUES = [(i * 7) % 23 for i in range(30)]
_BY_PARALLELISM: dict[int, tuple] = {}


@pytest.mark.slow
@pytest.mark.parametrize("parallelism", [1, 2, 4])
def test_stateful_job_gives_identical_results_at_any_parallelism(module_env, parallelism):
    env = module_env(parallelism=parallelism, max_records=24)
    stats, maxima = CollectSink(), CollectSink()
    keyed = env.from_collection(VALUES).key_by(lambda v: v % 4)
    keyed.process(RunningStats(), Types.TUPLE([Types.INT(), Types.LONG(), Types.LONG()])).uid("stats").sink_to(stats)
    env.from_collection(VALUES).map(lambda v: (v % 3, v)).key_by(0).max(1).uid("max").sink_to(maxima)
    result = env.execute(f"stats-p{parallelism}")
    assert result.epochs == 3
    expected = []
    counts, totals = defaultdict(int), defaultdict(int)
    for v in VALUES:
        counts[v % 4] += 1
        totals[v % 4] += v
        expected.append((v % 4, counts[v % 4], totals[v % 4]))
    assert sorted(stats.results) == sorted(expected)
    assert per_key(stats.results) == per_key(expected)
    assert result.get_keyed_state("stats", "count") == dict(counts)
    assert result.get_keyed_state("stats", "total") == dict(totals)
    final_max = {k: rs[-1] for k, rs in per_key(maxima.results).items()}
    assert final_max == {k: (k, max(v for v in VALUES if v % 3 == k)) for k in range(3)}
    _BY_PARALLELISM[parallelism] = (sorted(stats.results), sorted(maxima.results))
    assert all(r == _BY_PARALLELISM[parallelism] for r in _BY_PARALLELISM.values())
