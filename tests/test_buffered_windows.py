"""Window contents buffered as Arrow slices (``tasks/window_buffer.py``): a ProcessWindowFunction
or WindowFunction over columnar input gets exactly the elements the per-record path gives it,
in the same order and of the same types, with allowed lateness and late-data side outputs, and
through savepoints restored at another parallelism, on both backends and both runtimes, from
and into the per-record path (the stored form is the list of elements either way), and through
a failure restored from a checkpoint; BATCH keeps its time-ordered input."""

from __future__ import annotations

import copy
import json
import os
import pickle
import time
from collections import Counter

import pytest

from flowpoint import (
    ClickEventGenerator,
    CollectSink,
    DataGeneratorSource,
    Duration,
    OutputTag,
    ProcessWindowFunction,
    RestartStrategies,
    RuntimeExecutionMode,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from flowpoint.api.functions import WindowFunction
from flowpoint.api.types import arrow_to_rows
from flowpoint.connectors.clicks import CLICK_EVENT_TYPE
from flowpoint.errors import JobCancelledError
from flowpoint.state.chunked_list import ChunkedList
from flowpoint.state.kinds import immutable

EVENTS = 6_000


class Elements(ProcessWindowFunction):
    """The window's elements in the order given, with their types and field names."""

    def process(self, key, context, elements):
        w = context.window()
        seen = tuple((type(e).__name__, getattr(e, "_fields", None), tuple(e)) for e in elements)
        yield tuple(key), w.start, w.end, seen


class ElementsApply(WindowFunction):
    def apply(self, key, window, inputs):
        yield tuple(key), window.start, window.end, tuple((type(e).__name__, tuple(e)) for e in inputs)


def clicks(env, count: int, lateness_ms: int, rate: float | None = None):
    # one source subtask: every window meets its elements in the source's order, whatever the
    # epochs or frames, so runs can be compared element by element
    gen = ClickEventGenerator(num_users=50, interval_ms=5, max_lateness_ms=lateness_ms)
    return env.from_source(
        DataGeneratorSource(gen, count=count, rate_limit_per_second=rate),
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(1_000)).with_timestamp_assigner("ts"),
        "clicks",
    ).set_parallelism(1).uid("clicks")


def keyed(stream, columnar: bool):
    return stream.key_by(["channel", "behavior"]) if columnar else stream.key_by(lambda e: (e.channel, e.behavior))


def run(make_env, columnar: bool, assigner, function, runtime: str) -> tuple[Counter, Counter]:
    env = make_env(parallelism=2, max_records=700, execution_runtime=runtime)
    late = OutputTag("late")
    windows = (
        keyed(clicks(env, EVENTS, 3_000), columnar)
        .window(assigner)
        .allowed_lateness(Duration.of_millis(800))
        .side_output_late_data(late)
    )
    out = windows.process(function) if isinstance(function, ProcessWindowFunction) else windows.apply(function)
    sink, late_sink = CollectSink(), CollectSink()
    out.sink_to(sink)
    out.get_side_output(late).map(lambda e: (type(e).__name__, tuple(e))).sink_to(late_sink)
    env.execute("buffered" if columnar else "per record")
    return Counter(sink.results), Counter(late_sink.results)


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
@pytest.mark.parametrize(
    ("assigner", "function"),
    [
        (TumblingEventTimeWindows.of(Duration.of_seconds(2)), Elements()),
        (SlidingEventTimeWindows.of(Duration.of_seconds(3), Duration.of_seconds(1)), ElementsApply()),
    ],
    ids=["tumbling-process", "sliding-apply"],
)
def test_buffered_windows_equal_the_per_record_path(make_env, assigner, function, runtime):
    per_record = run(make_env, False, assigner, function, runtime)
    buffered = run(make_env, True, assigner, function, runtime)
    assert buffered == per_record
    assert sum(per_record[0].values()) > 20
    if isinstance(assigner, TumblingEventTimeWindows):
        assert sum(per_record[1].values()) > 0, "the data should have late records"
    refired = Counter((k, s) for k, s, _e, _ in per_record[0])
    assert any(n > 1 for n in refired.values()), "late elements within the lateness should fire windows again"
    types = {t for *_, elements in per_record[0] for t, *_ in elements}
    assert types == {"Row"}


def wait_for(predicate, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    msg = "timed out"
    raise AssertionError(msg)


def window_job(env, columnar: bool, rate: float | None = None) -> CollectSink:
    sink = CollectSink()
    (
        keyed(clicks(env, EVENTS, 800, rate), columnar)
        .window(TumblingEventTimeWindows.of(Duration.of_seconds(2)))
        .process(Elements()).uid("windows")
        .sink_to(sink).uid("collect")
    )
    return sink


def env_for(make_env, parallelism, backend, runtime, restore=None, max_records=500, **config):
    env = make_env(parallelism=parallelism, max_records=max_records, execution_runtime=runtime, **config)
    env.get_configuration().set("state.backend.type", backend)
    if restore is not None:
        env.get_configuration().set("execution.savepoint.path", str(restore))
    return env


def metadata_sinks(path: str) -> int:
    local = path[len("file://"):] if path.startswith("file://") else path
    with open(os.path.join(local, "_metadata")) as f:
        return json.load(f)["sinks"]["collect"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("runtime", "backend", "first_columnar", "second_columnar"),
    [
        ("epoch", "hashmap", True, True),
        ("epoch", "rocksdb", True, True),
        ("continuous", "hashmap", True, True),
        ("continuous", "rocksdb", True, True),
        ("epoch", "hashmap", False, True),  # a savepoint of the per-record path (the old form)
        ("epoch", "rocksdb", True, False),  # restored into the per-record path
    ],
)
def test_buffered_contents_restore_rescaled_from_a_savepoint(make_env, tmp_path, runtime, backend, first_columnar, second_columnar):
    expected_env = env_for(make_env, 2, backend, runtime, max_records=2_000)
    expected = window_job(expected_env, True)
    expected_env.execute("uninterrupted")
    env = env_for(make_env, 2, backend, runtime)
    first = window_job(env, first_columnar, rate=3_000)
    client = env.execute_async("windows-a")
    wait_for(lambda: len(first.results) >= 5 or client.is_done())
    assert not client.is_done(), "the job ended before the savepoint"
    path = client.trigger_savepoint(str(tmp_path / "sp"))
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    before = list(first.results[: metadata_sinks(path)])
    # rescaled: 2 -> 3 in epochs; 2 -> 1 on the continuous runtime (all its tasks run at once
    # and the tests' Spark offers 2 slots)
    env = env_for(make_env, 3 if runtime == "epoch" else 1, backend, runtime, restore=path)
    second = window_job(env, second_columnar)
    env.execute("windows-b")
    assert sorted(map(repr, before + list(second.results))) == sorted(map(repr, expected.results))
    assert before and second.results  # the savepoint was taken between firings
    # a window that was open at the savepoint: its elements came from both runs
    assert len(second.results) < len(expected.results)


def test_chunked_contents_are_stored_as_the_list_of_elements():
    """A ChunkedList pickles and copies as the plain list the per-record path stores (so
    snapshots, savepoints and the state reader see no new format), and is never changed."""
    batch = ClickEventGenerator(num_users=5).batch(0, 6)

    def convert(b):
        return arrow_to_rows(b, CLICK_EVENT_TYPE)

    first = ChunkedList((batch.slice(0, 3),), convert, 3, True)
    extra = convert(batch.slice(5, 1))[0]
    both = first.with_batch(batch.slice(3, 2)).with_values((extra,), immutable(extra))
    expected = convert(batch)
    for stored in (pickle.loads(pickle.dumps(both)), copy.deepcopy(both), list(both)):
        assert type(stored) is list
        assert stored == expected
        assert [type(e) for e in stored] == [type(e) for e in expected]
        assert [e._fields for e in stored] == [e._fields for e in expected]
    assert len(first) == 3 and len(both) == 6  # adding made a new list
    assert immutable(both)
    assert not immutable(both.with_values(([1],), False))


class ElementsFailingOnce(Elements):
    """Raises once, at the firing of the window starting at ``at``, while others are open."""

    def __init__(self, at: int, flag: str):
        self.at, self.flag = at, flag

    def process(self, key, context, elements):
        if context.window().start == self.at and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            msg = "injected failure"
            raise RuntimeError(msg)
        yield from super().process(key, context, elements)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_buffered_contents_survive_a_failure_and_restore_from_a_checkpoint(make_env, tmp_path, backend):
    expected_env = env_for(make_env, 2, backend, "epoch", max_records=2_000)
    expected = window_job(expected_env, True)
    expected_env.execute("uninterrupted")
    env = env_for(make_env, 2, backend, "epoch", max_records=400, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)  # at every epoch boundary
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    sink = CollectSink()
    first_start = min(s for _k, s, _e, _ in expected.results)
    (
        keyed(clicks(env, EVENTS, 800), True)
        .window(TumblingEventTimeWindows.of(Duration.of_seconds(2)))
        .process(ElementsFailingOnce(first_start + 10_000, flag)).uid("windows")
        .sink_to(sink).uid("collect")
    )
    env.execute("failing once")
    assert os.path.exists(flag), "the injected failure never happened"
    assert sorted(map(repr, sink.results)) == sorted(map(repr, expected.results))


@pytest.mark.slow
def test_batch_mode_sees_window_elements_in_time_order(make_env):
    """BATCH: a keyed operator meets its input in timestamp order (as Flink sorts it), so
    buffered windows take it record by record there, and agree with a key selector."""
    results = []
    for columnar in (True, False):
        env = make_env(parallelism=2)
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
        sink = CollectSink()
        windows = keyed(clicks(env, 2_000, 800), columnar).window(TumblingEventTimeWindows.of(Duration.of_seconds(2)))
        windows.process(Elements()).sink_to(sink)
        env.execute("batch")
        results.append(list(sink.results))
    assert sorted(map(repr, results[0])) == sorted(map(repr, results[1]))
    assert len(results[0]) > 5
    for *_, elements in results[0]:
        stamps = [values[0] for _t, _f, values in elements]
        assert stamps == sorted(stamps)
