"""Errors users get for invalid jobs: early (when building the graph, before Spark runs anything)
where possible, and clear (naming the operator, the function and its file:line) always."""

from __future__ import annotations

import inspect
import os
import re
import threading
import time

import pytest

import flowpoint.launcher as job_module
from flowpoint import (
    CollectSink,
    KeyedProcessFunction,
    MapFunction,
    ProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flowpoint.errors import (
    ConfigurationError,
    FlowpointError,
    InvalidKeyError,
    JobExecutionError,
    JobGraphError,
    SerializationError,
    StateAccessError,
)

HERE = os.path.abspath(__file__)


def line_of(marker: str) -> int:
    """The line of this file that contains ``marker`` (in a comment)."""
    with open(HERE) as f:
        for n, text in enumerate(f, 1):
            if marker in text and "line_of(" not in text:
                return n
    raise AssertionError(marker)


@pytest.fixture
def offline_env(monkeypatch):
    """An environment whose jobs must be rejected before anything is submitted to Spark."""
    submitted = []

    def no_submit(description, spark_session=None):
        submitted.append(description.graph)
        raise AssertionError("the job was submitted; it should have been rejected while building it")

    monkeypatch.setattr(job_module, "submit", no_submit)
    env = StreamExecutionEnvironment.get_execution_environment({"execution.progress.interval": -1})
    env.set_parallelism(2)
    env.submitted = submitted
    return env


def test_every_error_class_is_a_flowpoint_error():
    import flowpoint.errors as errors

    classes = [c for c in vars(errors).values() if inspect.isclass(c) and issubclass(c, Exception)]
    assert len(classes) >= 8
    for c in classes:
        assert issubclass(c, FlowpointError), c


# -- uids ------------------------------------------------------------------------------------


def test_duplicate_uids_are_rejected_naming_both_operators(offline_env):
    env = offline_env
    s = env.from_collection([1, 2, 3])
    s.map(lambda x: x + 1).name("first-mapper").uid("same-uid").sink_to(CollectSink())
    s.filter(lambda x: x > 1).name("second-filter").uid("same-uid").sink_to(CollectSink())
    with pytest.raises(JobGraphError) as info:
        env.execute("dups")
    msg = str(info.value)
    assert "same-uid" in msg
    assert "first-mapper" in msg and "second-filter" in msg
    assert env.submitted == []


def test_distinct_uids_are_kept(offline_env):
    env = offline_env
    s = env.from_collection([1, 2, 3]).uid("src")
    s.map(lambda x: x).uid("m-1").name("M1").sink_to(CollectSink()).uid("sink-1")
    graph = env.get_stream_graph()
    assert graph.node_by_uid("m-1").name == "M1"
    assert graph.node_by_uid("src").kind == "source"
    assert graph.node_by_uid("sink-1").kind == "sink"
    with pytest.raises(JobGraphError):
        graph.node_by_uid("missing")


def test_generated_uids_are_unique_and_stable(offline_env):
    def build():
        env = StreamExecutionEnvironment.get_execution_environment()
        env.set_parallelism(2)
        s = env.from_collection([1])
        s.map(lambda x: x).sink_to(CollectSink())
        s.map(lambda x: x).sink_to(CollectSink())
        return sorted(n.uid for n in env.get_stream_graph().nodes.values())

    first = build()
    assert len(set(first)) == len(first)
    assert build() == first  # the same program gives the same uids (state is matched by uid)


@pytest.mark.parametrize("bad", ["has space", "slash/uid", "", "dot.uid", "é", None, 12])
def test_invalid_uid_characters_are_rejected(offline_env, bad):
    s = offline_env.from_collection([1]).map(lambda x: x).name("the-map")
    with pytest.raises(JobGraphError) as info:
        s.uid(bad)
    assert "the-map" in str(info.value)


@pytest.mark.parametrize("good", ["a", "A-b_c:1", "count-per-key", "x" * 200])
def test_valid_uids_are_accepted(offline_env, good):
    s = offline_env.from_collection([1]).map(lambda x: x)
    s.uid(good)
    s.sink_to(CollectSink())
    assert offline_env.get_stream_graph().node_by_uid(good).kind == "map"


# -- keyed state outside a keyed stream --------------------------------------------------------


class StateOnNonKeyedStream(MapFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen"))  # <- get_state call

    def map(self, value):
        return value


def test_keyed_state_on_non_keyed_stream_is_rejected_before_running(offline_env):
    env = offline_env
    env.from_collection([1, 2]).map(StateOnNonKeyedStream()).name("stateful-map").sink_to(CollectSink())
    with pytest.raises(StateAccessError) as info:
        env.execute("state on non-keyed")
    msg = str(info.value)
    assert "stateful-map" in msg
    assert f"{HERE}:{line_of('<- get_state call')}" in msg
    assert "get_state" in msg and "key_by" in msg
    assert env.submitted == []


class ListStateInHelper(ProcessFunction):
    def open(self, runtime_context):
        self._declare(runtime_context)

    def _declare(self, ctx):
        self.items = ctx.get_list_state(None)  # <- get_list_state in a helper

    def process_element(self, value, ctx):
        yield value


def test_keyed_state_call_in_a_helper_method_is_found(offline_env):
    env = offline_env
    env.from_collection([1]).process(ListStateInHelper()).name("helper-process").sink_to(CollectSink())
    with pytest.raises(StateAccessError) as info:
        env.execute()
    assert "helper-process" in str(info.value)
    assert f"{HERE}:{line_of('<- get_list_state in a helper')}" in str(info.value)


def test_keyed_state_on_keyed_stream_is_accepted(offline_env):
    env = offline_env
    env.from_collection([1, 2]).key_by(lambda x: x).map(StateOnNonKeyedStream()).sink_to(CollectSink())
    env.get_stream_graph()  # no error


class HiddenStateCall(MapFunction):
    """Reaches get_state in a way no static check sees: the task must still refuse it."""

    def open(self, runtime_context):
        self.state = getattr(runtime_context, "get_" + "state")(ValueStateDescriptor("s"))

    def map(self, value):
        return value


# -- key selectors -----------------------------------------------------------------------------


class NoKey:
    """A value without canonical bytes (a list is a key, as in PyFlink; this is not)."""


def test_key_selector_returning_a_non_key_fails_at_once_naming_selector_and_operator(make_env, tmp_path):
    calls = str(tmp_path / "calls")

    def list_key(x):
        with open(calls, "a") as f:  # one character per call: counts the task attempts
            f.write("x")
        return NoKey()  # <- not a key

    env = make_env(parallelism=2)
    env.from_collection([1, 2, 3]).key_by(list_key).map(lambda x: x).name("after-bad-key").sink_to(CollectSink())
    started = time.monotonic()
    with pytest.raises(InvalidKeyError) as info:
        env.execute("invalid key")
    msg = str(info.value)
    assert "after-bad-key" in msg
    assert f"list_key at {HERE}:{line_of('def list_key')}" in msg
    assert "NoKey" in msg
    # the task failed once: Spark did not retry a failure that cannot go away
    with open(calls) as f:
        assert len(f.read()) == 3
    assert time.monotonic() - started < 120


def test_state_access_error_in_a_task_fails_at_once(make_env):
    env = make_env(parallelism=1)
    env.from_collection([1, 2]).map(HiddenStateCall()).name("hidden-state").sink_to(CollectSink())
    with pytest.raises(StateAccessError) as info:
        env.execute("hidden state")
    assert "hidden-state" in str(info.value)


# -- serialization -----------------------------------------------------------------------------


def test_non_serializable_function_is_rejected_naming_operator_and_function(offline_env):
    lock = threading.Lock()

    def with_lock(x):
        with lock:
            return x

    env = offline_env
    env.from_collection([1]).map(with_lock).name("locked-map").sink_to(CollectSink())
    with pytest.raises(SerializationError) as info:
        env.execute()
    msg = str(info.value)
    assert isinstance(info.value, JobGraphError)
    assert "locked-map" in msg
    assert f"with_lock at {HERE}:{line_of('def with_lock')}" in msg
    assert "lock" in msg
    assert env.submitted == []


def test_non_serializable_lambda_is_rejected(offline_env):
    lock = threading.Lock()
    env = offline_env
    env.from_collection([1]).filter(lambda x: lock is not None).name("lambda-filter").sink_to(CollectSink())  # <- lock lambda
    with pytest.raises(SerializationError) as info:
        env.execute()
    assert "lambda-filter" in str(info.value)
    assert f"<lambda> at {HERE}:{line_of('<- lock lambda')}" in str(info.value)


def test_non_serializable_key_selector_is_rejected(offline_env):
    lock = threading.Lock()
    env = offline_env
    env.from_collection([1]).key_by(lambda x: (x, lock is None)).map(lambda x: x).name("keyed-map").sink_to(CollectSink())  # <- lock key
    with pytest.raises(SerializationError) as info:
        env.execute()
    msg = str(info.value)
    assert "keyed-map" in msg
    assert f"{HERE}:{line_of('<- lock key')}" in msg
    assert env.submitted == []


class LockInInit(MapFunction):
    def __init__(self):
        self.lock = threading.Lock()

    def map(self, value):
        return value


def test_non_serializable_function_object_is_rejected(offline_env):
    env = offline_env
    env.from_collection([1]).map(LockInInit()).name("init-lock").sink_to(CollectSink())
    with pytest.raises(SerializationError) as info:
        env.execute()
    assert "init-lock" in str(info.value) and "LockInInit" in str(info.value)
    assert "open()" in str(info.value)  # tells the user where to create such resources


# -- user functions that raise --------------------------------------------------------------------


def test_user_function_exception_fails_the_job_naming_operator_and_message(make_env):
    def explode(x):
        if x == 3:
            raise ValueError(f"cannot handle record {x}: boom-1234")
        return x

    env = make_env(parallelism=1)
    env.from_collection([1, 2, 3, 4]).map(explode).name("exploding-map").sink_to(CollectSink())
    with pytest.raises(JobExecutionError) as info:
        env.execute("user error")
    msg = str(info.value)
    assert isinstance(info.value, FlowpointError)
    assert "exploding-map" in msg
    assert "cannot handle record 3: boom-1234" in msg
    assert "ValueError" in msg


# -- graph shape and parallelism ------------------------------------------------------------------


class CountPerKey(KeyedProcessFunction):
    def process_element(self, value, ctx):
        yield value


def test_keyed_process_function_on_non_keyed_stream_is_rejected(offline_env):
    s = offline_env.from_collection([1])
    with pytest.raises(JobGraphError) as info:
        s.process(CountPerKey())
    assert "key_by" in str(info.value)
    with pytest.raises(JobGraphError):
        s.process(lambda x, ctx: [x])  # not a ProcessFunction
    with pytest.raises(JobGraphError):
        s.key_by(lambda x: x).process(lambda x, ctx: [x])


def test_empty_job_is_rejected(offline_env):
    with pytest.raises(JobGraphError):
        offline_env.execute()


def test_parallelism_above_max_parallelism_is_rejected(offline_env):
    env = offline_env
    env.set_max_parallelism(4)
    env.set_parallelism(8)
    env.from_sequence(1, 10).map(lambda x: x).name("too-wide").sink_to(CollectSink())
    with pytest.raises(ConfigurationError) as info:
        env.execute()
    assert "max parallelism" in str(info.value)
    assert env.submitted == []


def test_operator_parallelism_above_its_max_parallelism_is_rejected(offline_env):
    env = offline_env
    s = env.from_collection([1]).key_by(lambda x: x).map(lambda x: x).name("narrow-keyed")
    s.set_max_parallelism(2).set_parallelism(3)
    s.sink_to(CollectSink())
    with pytest.raises(ConfigurationError) as info:
        env.get_stream_graph()
    assert "narrow-keyed" in str(info.value)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None])
def test_invalid_parallelism_values(offline_env, bad):
    with pytest.raises(ConfigurationError):
        offline_env.set_parallelism(bad)
    with pytest.raises(ConfigurationError):
        offline_env.from_collection([1]).map(lambda x: x).set_parallelism(bad)


@pytest.mark.parametrize("bad", [0, 32769, 1.0])
def test_invalid_max_parallelism_values(offline_env, bad):
    with pytest.raises(ConfigurationError):
        offline_env.set_max_parallelism(bad)


def test_non_parallel_source_parallelism(offline_env):
    with pytest.raises(ConfigurationError):
        offline_env.from_collection([1]).set_parallelism(2)
    with pytest.raises(JobGraphError, match="KeyedStream is not supported"):
        offline_env.from_collection([1]).key_by(lambda x: x).set_parallelism(2)  # not an operator


def test_unknown_sink_and_source_types_are_rejected(offline_env):
    with pytest.raises(JobGraphError):
        offline_env.from_source([1, 2, 3])
    with pytest.raises(JobGraphError):
        offline_env.from_collection([1]).sink_to(print)


def test_error_messages_name_the_function_location():
    from flowpoint.graph.transformation import describe_function

    def named(x):
        return x

    desc = describe_function(named)
    assert re.search(rf"named at {re.escape(HERE)}:\d+$", desc)
    assert describe_function(CountPerKey()).startswith(f"CountPerKey at {HERE}:")


class _Doubler(MapFunction):
    def open(self, ctx):  # first method of _Doubler: line-of-doubler-open
        self.k = 2

    def map(self, value):
        return value * self.k


def test_building_a_job_never_reads_or_parses_source_files(monkeypatch):
    """Describing functions (for messages and the executors' stamps) uses code objects only:
    ``inspect.getsourcelines`` parses the whole file with ``ast``, which CPython 3.11 does not do
    safely while another thread parses (a build failed at random with "AST constructor recursion
    depth mismatch")."""
    import ast
    import functools
    import linecache

    from flowpoint.graph.jobgraph import JobGraph
    from flowpoint.graph.transformation import describe_function

    def forbidden(*args, **kwargs):
        raise AssertionError("a job build read or parsed a source file")

    for module, name in [(ast, "parse"), (inspect, "getsourcelines"), (inspect, "getsource"),
                         (inspect, "findsource"), (linecache, "getlines"), (linecache, "updatecache")]:
        monkeypatch.setattr(module, name, forbidden)

    def plus(x, n):  # line-of-plus
        return x + n

    env = StreamExecutionEnvironment.get_execution_environment({"execution.progress.interval": -1})
    s = env.from_collection([1, 2, 3])
    s = s.map(lambda x: x + 1).name("lam").map(functools.partial(plus, n=1)).name("part").map(_Doubler()).name("cls")
    s.key_by(lambda x: x % 2).process(CountPerKey()).uid("counts").sink_to(CollectSink())
    graph = JobGraph.build(env._pipeline(), env, "no-parsing")
    described = {n.t.name: describe_function(n.t.function) for n in graph.nodes.values() if n.t.function is not None}
    assert re.fullmatch(rf".*<lambda> at {re.escape(HERE)}:\d+", described["lam"])
    assert described["part"].endswith(f"plus at {HERE}:{line_of('line-of-plus')}")
    assert described["cls"] == f"_Doubler at {HERE}:{line_of('line-of-doubler-open')}"
    assert describe_function(CountPerKey()).startswith(f"CountPerKey at {HERE}:")
    assert describe_function(len) == "len"  # a builtin: its name, no file


def test_parallelism_error_is_formatted_only_when_raised(offline_env, monkeypatch):
    from flowpoint.graph.transformation import Transformation

    calls = []
    real = Transformation.describe
    monkeypatch.setattr(Transformation, "describe", lambda t: calls.append(t) or real(t))
    offline_env.from_collection([1]).map(lambda x: x).sink_to(CollectSink())
    from flowpoint.graph.jobgraph import JobGraph

    JobGraph.build(offline_env._pipeline(), offline_env, "lazy")
    assert calls == []  # nothing to report: no operator's message was formatted
    offline_env.from_collection([1]).map(lambda x: x).set_parallelism(300).set_max_parallelism(256)
    with pytest.raises(ConfigurationError, match=r"parallelism of operator 'Map'.*<lambda> at .*got 300"):
        JobGraph.build(offline_env._pipeline(), offline_env, "lazy")


@pytest.mark.parametrize("call", ["map", "flat_map", "filter", "key_by", "add_sink"])
def test_non_callable_functions_are_rejected_with_flowpoint_errors(offline_env, call):
    s = offline_env.from_collection([1])
    with pytest.raises(JobGraphError) as info:
        getattr(s, call)(3.5)
    assert call in str(info.value)
    with pytest.raises(FlowpointError):
        s.key_by(lambda x: x).reduce("not a function")
    with pytest.raises(ConfigurationError):
        s.key_by(lambda x: x).sum(1.5)
