"""PyFlink API surface beyond the compatibility programs: what fails, and how it says so.

The happy paths run in tests/pyflink_compat/ against PyFlink's recorded output; here are the
errors a PyFlink user meets (named operators, clear next steps) and the small pieces that need
no Spark (Java's number printing, the values a type makes, the execution plan).
"""

from __future__ import annotations

import json

import pytest

from flowpoint import (
    CoMapFunction,
    CoProcessFunction,
    DataGeneratorSource,
    KeyedCoProcessFunction,
    Row,
    RuntimeExecutionMode,
    StreamExecutionEnvironment,
    Types,
)
from flowpoint.api.typed_values import converter, java_double_string, java_float_string, printer
from flowpoint.errors import ConfigurationError, FlowpointError, JobGraphError


@pytest.fixture
def env():
    e = StreamExecutionEnvironment.get_execution_environment({"execution.progress.interval": -1})
    e.set_parallelism(2)
    return e


class Tag(CoMapFunction):
    def map1(self, value):
        return value

    def map2(self, value):
        return value


class KeyedJoin(KeyedCoProcessFunction):
    def process_element1(self, value, ctx):
        yield value

    def process_element2(self, value, ctx):
        yield value


def test_batch_mode_refuses_an_unbounded_source_naming_it(env):
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    env.from_source(DataGeneratorSource(lambda i: i, None), source_name="forever").print()
    with pytest.raises(JobGraphError, match="BATCH.*forever"):
        env.get_stream_graph()


def test_automatic_mode_is_batch_only_when_every_source_is_bounded(env):
    env.set_runtime_mode(RuntimeExecutionMode.AUTOMATIC)
    env.from_collection([1, 2]).print()
    assert env.get_stream_graph().batch
    env.from_source(DataGeneratorSource(lambda i: i, None)).print()
    assert not env.get_stream_graph().batch


def test_set_runtime_mode_takes_the_enum(env):
    with pytest.raises(ConfigurationError, match="RuntimeExecutionMode"):
        env.set_runtime_mode("BATCH")


def test_keyed_stream_is_not_an_operator(env):
    keyed = env.from_collection([1]).key_by(lambda x: x)
    for call in (lambda: keyed.name("x"), lambda: keyed.uid("x"), keyed.get_name, lambda: keyed.set_parallelism(2)):
        with pytest.raises(JobGraphError, match="KeyedStream is not supported.*operator that follows"):
            call()


@pytest.mark.parametrize("method", ["shuffle", "rescale", "rebalance", "forward", "broadcast", "partition_custom"])
def test_a_keyed_stream_refuses_another_partitioning_as_pyflink_does(env, method):
    keyed = env.from_collection([1]).key_by(lambda x: x)
    args = (lambda key, n: 0, lambda x: x) if method == "partition_custom" else ()
    with pytest.raises(JobGraphError) as raised:
        getattr(keyed, method)(*args)
    assert str(raised.value) == "Cannot override partitioning for KeyedStream."  # PyFlink's message exactly
    assert isinstance(raised.value, FlowpointError)  # and PyFlink's `except Exception` still catches it
    assert raised.value.__notes__ == [
        f"{method}() on the KeyedStream of key_by(...) after 'Collection Source': apply the keyed operation first "
        f"(process, reduce, window, ...) and partition its output, or call {method}() before key_by(...)"
    ]
    # the keyed operation's output partitions as any stream does
    assert type(getattr(keyed.map(lambda x: x), method)(*args)).__name__ in ("DataStream", "BroadcastStream")


def test_disabled_auto_generated_uids_name_every_operator_without_one(env):
    env.get_config().disable_auto_generated_uids()
    env.from_collection([1]).uid("src").map(lambda x: x).name("doubler").print().uid("out")
    with pytest.raises(JobGraphError, match="doubler"):
        env.get_stream_graph()


def test_connect_needs_matching_functions_and_keying(env):
    a = env.from_collection([1])
    b = env.from_collection([2])
    with pytest.raises(JobGraphError, match="CoMapFunction"):
        a.connect(b).map(lambda x: x)
    with pytest.raises(JobGraphError, match="needs keyed streams"):
        a.connect(b).process(KeyedJoin())
    with pytest.raises(JobGraphError, match="both streams must be keyed"):
        a.key_by(lambda x: x).connect(b).map(Tag())
    with pytest.raises(JobGraphError, match="KeyedCoProcessFunction"):
        a.connect(b).key_by(lambda x: x, lambda x: x).process(CoProcessFunctionImpl())
    with pytest.raises(JobGraphError, match="DataStream or a broadcast stream"):
        a.connect([1, 2])


class CoProcessFunctionImpl(CoProcessFunction):
    def process_element1(self, value, ctx):
        yield value

    def process_element2(self, value, ctx):
        yield value


def test_a_union_feeding_one_side_keeps_its_side(env):
    a = env.from_collection([1]).union(env.from_collection([2]))
    b = env.from_collection(["x"])
    a.connect(b).map(Tag()).print()
    graph = env.get_stream_graph()
    node = next(n for n in graph.nodes.values() if n.kind == "co_map")
    assert node.t.options["input_sides"] == [0, 0, 1]


def test_execute_runs_only_what_was_defined_since_the_last_one(env, monkeypatch):
    from flowpoint import launcher as job_module

    graphs = []

    class Done:
        def wait(self):
            return None

    monkeypatch.setattr(job_module, "submit", lambda description, spark=None: graphs.append(description.graph) or Done())
    env.from_collection([1]).map(lambda x: x).name("first").print()
    env.execute()
    env.from_collection([2]).map(lambda x: x).name("second").print()
    env.execute()
    names = [sorted(n.name for n in g.nodes.values()) for g in graphs]
    assert "first" in names[0] and "second" not in names[0]
    assert "second" in names[1] and "first" not in names[1]
    with pytest.raises(JobGraphError, match="no operators"):
        env.execute()


def test_execution_plan_is_flinks_json_and_clears_nothing(env):
    env.from_collection([1]).key_by(lambda x: x).map(lambda x: x).print()
    plan = json.loads(env.get_execution_plan())
    kinds = [n["pact"] for n in plan["nodes"]]
    assert kinds == ["Data Source", "Operator", "Data Sink"]
    assert plan["nodes"][1]["predecessors"][0]["ship_strategy"] == "HASH"
    assert json.loads(env.get_execution_plan()) == plan


def test_execution_config_setters_write_the_configuration(env):
    config = env.get_config()
    assert config.get_auto_watermark_interval() == 200
    config.set_auto_watermark_interval(0).enable_object_reuse().set_latency_tracking_interval(5)
    conf = env.get_configuration()
    assert conf.get("pipeline.auto-watermark-interval") == 0
    assert conf.get("pipeline.object-reuse") is True
    assert config.get_latency_tracking_interval() == 5
    with pytest.raises(ConfigurationError):
        config.set_auto_watermark_interval(-1)


@pytest.mark.parametrize(
    ("value", "double", "single"),
    [(0.1, "0.1", "0.1"), (1.0, "1.0", "1.0"), (1e7, "1.0E7", "1.0E7"), (12345678.9, "1.23456789E7", "1.2345679E7"),
     (0.0005, "5.0E-4", "5.0E-4"), (-2.5, "-2.5", "-2.5"), (float("nan"), "NaN", "NaN"), (float("-inf"), "-Infinity", "-Infinity")],
)
def test_numbers_print_as_java_prints_them(value, double, single):
    assert java_double_string(value) == double
    assert java_float_string(value) == single


def test_types_shape_values_and_their_printing():
    row = converter(Types.ROW_NAMED(["id", "score"], [Types.INT(), Types.FLOAT()]))
    r = row((1, 0.1))
    assert isinstance(r, Row) and r.id == 1 and r.score == pytest.approx(0.1) and r.score != 0.1
    assert converter(Types.TUPLE([Types.STRING(), Types.INT()]))(Row("a", 1)) == ("a", 1)
    by_name = row({"score": 2.5, "id": 7})  # a dict becomes a Row by field name, never by key order
    assert by_name.id == 7 and by_name.score == 2.5
    assert row("not a row") == "not a row"
    with pytest.raises(ValueError, match="1 fields"):  # never a Row with fewer values than names
        row((1,))
    with pytest.raises(ValueError, match="3 fields"):
        converter(Types.TUPLE([Types.STRING(), Types.INT()]))(("a", 1, 2))
    assert converter(Types.INT()) is None
    assert printer(Types.TUPLE([Types.STRING(), Types.INT(), Types.BOOLEAN()]))(("hi", 0, True)) == "(hi,0,true)"
    assert printer(Types.ROW([Types.INT(), Types.STRING()]))(Row(1, "a")) == "+I[1,a]"
    assert printer(Types.LIST(Types.INT()))([1, 2]) == "[1, 2]"
    assert printer(None)(("a", 1)) == "('a', 1)"


def test_errors_share_the_root():
    assert issubclass(JobGraphError, FlowpointError)


def test_an_event_time_window_refuses_flinks_no_timestamp_marker():
    from flowpoint.api.time import MIN_WATERMARK, event_timestamp

    with pytest.raises(ConfigurationError, match="without a timestamp.*Long.MIN_VALUE.*timestamp assigner"):
        event_timestamp(MIN_WATERMARK)
    assert event_timestamp(0) == 0


def test_add_python_file_ships_a_module_the_functions_import(spark, tmp_path):
    import importlib
    import sys

    from flowpoint import CollectSink

    module = tmp_path / "shipped" / "fp_shipped_helper.py"
    module.parent.mkdir()
    module.write_text("def triple(x):\n    return 3 * x\n")
    sys.path.insert(0, str(module.parent))  # the driver imports it; the executors get it shipped
    try:
        helper = importlib.import_module("fp_shipped_helper")
        env = StreamExecutionEnvironment.get_execution_environment(
            {"execution.progress.interval": -1, "state.working.dir": str(tmp_path / "w")}, spark_session=spark)
        env.set_parallelism(2)
        env.add_python_file(str(module))
        sink = CollectSink()
        env.from_collection([1, 2, 3]).rebalance().map(lambda x: helper.triple(x)).sink_to(sink)
        env.execute()
        assert sorted(sink.results) == [3, 6, 9]
    finally:
        sys.path.remove(str(module.parent))
    with pytest.raises(ConfigurationError, match="no such file"):
        env.add_python_file(str(tmp_path / "missing.py"))


def test_project_forward_and_disabled_chaining_in_the_plan(env):
    env.disable_operator_chaining()
    ds = env.from_collection([(1, "a", 2.0)], type_info=Types.TUPLE([Types.INT(), Types.STRING(), Types.DOUBLE()]))
    projected = ds.project(2, 0)
    assert projected.get_type() == Types.TUPLE([Types.DOUBLE(), Types.INT()])
    projected.forward().map(lambda x: x).print()
    graph = env.get_stream_graph()
    assert len(graph.stages) == len(graph.nodes)  # no operator chained to another
    with pytest.raises(ConfigurationError, match="field positions"):
        ds.project("a")


@pytest.mark.slow
def test_a_jobs_standard_output_holds_only_what_it_prints(tmp_path):
    """Spark's, Hadoop's and flowpoint's own log lines go to standard error (a fresh driver JVM)."""
    import subprocess
    import sys

    job = tmp_path / "job.py"
    job.write_text(
        "from flowpoint import StreamExecutionEnvironment, Types\n"
        "env = StreamExecutionEnvironment.get_execution_environment()\n"
        "env.set_parallelism(1)\n"
        "env.from_collection([('a', 1), ('b', 2)], type_info=Types.TUPLE([Types.STRING(), Types.INT()])).print()\n"
        "env.execute('stdout')\n"
    )
    proc = subprocess.run([sys.executable, str(job)], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                          env={**__import__("os").environ, "FLOWPOINT_SPARK_MASTER": "local[1]"})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.splitlines() == ["(a,1)", "(b,2)"]
    assert "[flowpoint]" in proc.stderr


def test_a_value_the_output_type_cannot_hold_fails_naming_the_operator(make_env):
    from flowpoint import CollectSink
    from flowpoint.errors import SerializationError

    env = make_env(parallelism=1)
    env.from_collection(["x"]).map(lambda s: s, output_type=Types.FLOAT()).name("to-float").sink_to(CollectSink())
    with pytest.raises(SerializationError, match="to-float.*Types.FLOAT"):
        env.execute()


class WhereAmI:
    """A map reporting the parallel instance each record reached."""

    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return self.index, value


def test_partition_custom_sends_each_record_where_the_partitioner_says(make_env):
    from flowpoint import CollectSink, MapFunction, Partitioner

    class Where(WhereAmI, MapFunction):
        pass

    class ByParity(Partitioner):
        def partition(self, key, num_partitions):
            return key % 2

    env = make_env(parallelism=3)
    sink = CollectSink()
    env.from_collection(list(range(12))).partition_custom(ByParity(), lambda x: x).map(Where()).sink_to(sink)
    env.execute()
    assert sorted(sink.results) == sorted((v % 2, v) for v in range(12))

    env = make_env(parallelism=2)
    env.from_collection([1, 2]).partition_custom(lambda key, n: 5, lambda x: x).map(lambda x: x).sink_to(CollectSink())
    with pytest.raises(Exception, match=r"custom partitioner .* returned 5 .* from 0 to 1"):
        env.execute()


def test_row_kind_prints_pickles_and_survives_conversion():
    import pickle

    from flowpoint import RowKind

    r = Row(id=1, name="a")
    assert r.get_row_kind() is RowKind.INSERT
    r.set_row_kind(RowKind.UPDATE_AFTER)
    assert pickle.loads(pickle.dumps(r)).get_row_kind() is RowKind.UPDATE_AFTER
    row_type = Types.ROW_NAMED(["id", "name"], [Types.INT(), Types.STRING()])
    assert printer(row_type)(r) == "+U[1,a]"
    assert converter(Types.ROW([Types.INT(), Types.STRING()]))(r).get_row_kind() is RowKind.UPDATE_AFTER
    with pytest.raises(TypeError, match="RowKind"):
        r.set_row_kind("-D")


def test_batch_keeps_each_records_timestamp_when_only_some_inputs_have_them(make_env):
    from flowpoint import CollectSink, KeyedProcessFunction, WatermarkStrategy

    class Stamp(KeyedProcessFunction):
        def process_element(self, value, ctx):
            yield value, ctx.timestamp()

    env = make_env(parallelism=2)
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    timed = env.from_collection([3, 1]).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: v * 1000))
    untimed = env.from_collection([7])
    sink = CollectSink()
    timed.union(untimed).key_by(lambda v: 0).process(Stamp()).sink_to(sink)
    env.execute()
    assert sorted(sink.results) == [(1, 1000), (3, 3000), (7, None)]
