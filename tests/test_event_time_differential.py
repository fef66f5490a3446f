"""Differential tests: flowpoint's event-time windows on Spark vs ``event_time_reference``.

Every test builds one job over records ``(key, timestamp, value)`` (values unique, so late
records are identified exactly) read from a source with several splits, runs it with window
parallelism 1, 2 or 4 and compares the multiset of window results ``(key, start, end, result)``
-- late firings included -- and the late side output with the reference model, which simulates
the same epochs, source batches and per-split watermarks record by record. Lateness is decided
record by record in most tests: a punctuated generator on one split, several splits in one epoch
with small source batches, several splits over many epochs.
"""

from __future__ import annotations

import contextlib
import os
import random
import time
from collections import Counter
from typing import Any

import event_time_reference as ref
import pytest

from flowpoint import (
    AggregateFunction,
    CollectSink,
    Duration,
    OutputTag,
    ProcessWindowFunction,
    WatermarkStrategy,
)
from flowpoint.api.functions import WindowFunction
from flowpoint.api.watermarks import Watermark, WatermarkGenerator
from flowpoint.api.windows import (
    EventTimeSessionWindows,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
)
from flowpoint.connectors.source import Source, SourceReader, SourceSplit, SplitPlan
from flowpoint.errors import JobCancelledError

# -- the source: one list of records per split -------------------------------------------------


class _ListReader(SourceReader):
    def __init__(self, batch_size: int):
        self.batch_size = batch_size

    def read(self, split: SourceSplit, spec: Any):
        for i in range(0, len(spec), self.batch_size):
            yield spec[i : i + self.batch_size]


class SplitsSource(Source):
    """Split ``i`` yields ``splits[i]`` in source batches of ``batch_size``; ``None`` is a split
    that never produces a record (and makes the source unbounded)."""

    def __init__(self, splits: list[list | None], batch_size: int = 8192):
        self.splits = splits
        self.batch_size = batch_size

    def is_bounded(self) -> bool:
        return all(s is not None for s in self.splits)

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [SourceSplit(f"split-{i}", i, 0) for i in range(len(self.splits))]

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        records = self.splits[split.payload]
        if records is None:
            return SplitPlan(position, 0, False)
        end = min(len(records), position + budget)
        return SplitPlan(end, end - position, end >= len(records))

    def read_spec(self, split: SourceSplit, start: int, end: int) -> Any:
        return self.splits[split.payload][start:end]

    def create_reader(self) -> SourceReader:
        return _ListReader(self.batch_size)


# -- functions shared by flowpoint and the reference -----------------------------------------


def key_of(r):
    return r[0]


def ts_of(r):
    return r[1]


def count(elements):
    return len(elements)


def values(elements):
    return tuple(sorted(e[2] for e in elements))


class Emit(ProcessWindowFunction):
    def __init__(self, summary):
        self.summary = summary

    def process(self, key, context, elements):
        w = context.window()
        yield key, w.start, w.end, self.summary(list(elements))


class PunctuatedBehind(WatermarkGenerator):
    """After each record: watermark = its timestamp - ``lag``."""

    def __init__(self, lag: int):
        self.lag = lag

    def on_event(self, event, event_timestamp, output):
        output.emit_watermark(Watermark(event_timestamp - self.lag))

    def on_periodic_emit(self, output):
        pass


class PunctuatedFactory:
    def __init__(self, lag: int):
        self.lag = lag

    def __call__(self, ctx):
        return PunctuatedBehind(self.lag)


def strategies(kind: str, amount: int):
    """(flowpoint WatermarkStrategy, reference generator factory)."""
    if kind == "bounded":
        fp = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(amount))
        model = lambda: ref.BoundedOutOfOrderness(amount)  # noqa: E731
    else:
        fp = WatermarkStrategy.for_generator(PunctuatedFactory(amount))
        model = lambda: ref.Punctuated(lambda r, ts: ts - amount)  # noqa: E731
    return fp.with_timestamp_assigner(lambda v, record_ts: v[1]), model


def assigner_of(spec):
    if isinstance(spec, ref.Tumbling):
        return TumblingEventTimeWindows.of(Duration.of_millis(spec.size), Duration.of_millis(spec.offset))
    if isinstance(spec, ref.Sliding):
        return SlidingEventTimeWindows.of(Duration.of_millis(spec.size), Duration.of_millis(spec.slide), Duration.of_millis(spec.offset))
    return EventTimeSessionWindows.with_gap(Duration.of_millis(spec.gap))


# -- running both ----------------------------------------------------------------------------

BIG = 10**9


def run_flowpoint(make_env, splits, spec, *, watermarks=("bounded", 0), lateness=0, window_parallelism=2,
                  source_parallelism=2, epoch_max_records=BIG, batch_size=8192, summary=count, assign=False):
    """``assign``: the strategy goes to ``assign_timestamps_and_watermarks`` chained after the
    source instead of ``from_source`` (the same per-split generators)."""
    env = make_env(parallelism=source_parallelism, max_records=epoch_max_records)
    strategy, _ = strategies(*watermarks)
    if assign:
        stream = env.from_source(SplitsSource(splits, batch_size), source_name="splits").assign_timestamps_and_watermarks(strategy)
    else:
        stream = env.from_source(SplitsSource(splits, batch_size), strategy, "splits")
    late = OutputTag("late")
    fired = (
        stream.key_by(key_of)
        .window(assigner_of(spec))
        .allowed_lateness(Duration.of_millis(lateness))
        .side_output_late_data(late)
        .process(Emit(summary))
        .set_parallelism(window_parallelism)
    )
    fired.sink_to(out := CollectSink())
    fired.get_side_output(late).sink_to(late_out := CollectSink())
    env.execute("event-time-differential")
    return Counter(out.results), Counter(late_out.results)


def run_reference(splits, spec, *, watermarks=("bounded", 0), lateness=0, epoch_max_records=BIG,
                  batch_size=8192, summary=count, **_):
    _, model = strategies(*watermarks)
    r = ref.simulate(splits, ts_of, key_of, spec, summary, model, lateness, epoch_max_records, batch_size)
    return r.windows, r.late


def diff(got: Counter, want: Counter) -> str:
    extra, missing = got - want, want - got
    return f"flowpoint only: {sorted(extra.elements())[:12]}\nreference only: {sorted(missing.elements())[:12]}"


def check(make_env, splits, spec, **kw):
    """Run flowpoint and the reference on the same job; the results must be equal."""
    want_windows, want_late = run_reference(splits, spec, **kw)
    got_windows, got_late = run_flowpoint(make_env, splits, spec, **kw)
    assert got_windows == want_windows, f"window results differ ({spec}, {kw}):\n{diff(got_windows, want_windows)}"
    assert got_late == want_late, f"late records differ ({spec}, {kw}):\n{diff(got_late, want_late)}"
    return want_windows, want_late


# -- data ------------------------------------------------------------------------------------


def random_splits(rng: random.Random, n_splits: int, per_split: int, keys: str = "abc", step: int = 10,
                  disorder: int = 40, stragglers: float = 0.1, far: int = 400) -> list[list]:
    """Timestamps advance ``step`` per record and jitter by ``disorder``; a ``stragglers``
    share of records is up to ``far`` behind. Values are unique."""
    splits, value = [], 0
    for _ in range(n_splits):
        records = []
        t = rng.randrange(0, 50)
        for _ in range(rng.randint(per_split // 2, per_split)):
            t += rng.randrange(0, 2 * step)
            ts = t + rng.randint(-disorder, disorder)
            if rng.random() < stragglers:
                ts -= rng.randint(0, far)
            records.append((rng.choice(keys), max(0, ts), value))
            value += 1
        splits.append(records)
    return splits


def interesting(windows: Counter, late: Counter) -> bool:
    return sum(late.values()) > 0 or sum(windows.values()) > len({(k, s, e) for k, s, e, _ in windows})


# -- tests -----------------------------------------------------------------------------------

ASSIGNERS = [ref.Tumbling(100), ref.Sliding(120, 40, offset=7), ref.Session(35)]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seed", "spec", "window_parallelism", "epoch_max_records", "assign"),
    [
        (1, ASSIGNERS[0], 1, BIG, False),
        (2, ASSIGNERS[0], 4, 23, True),
        (3, ASSIGNERS[1], 2, 40, False),
        (4, ASSIGNERS[2], 4, BIG, True),
        (5, ASSIGNERS[2], 1, 31, False),
    ],
)
def test_one_split_punctuated(make_env, seed, spec, window_parallelism, epoch_max_records, assign):
    """One split, watermark = timestamp - 20 after every record: lateness is decided record by
    record, across epochs; allowed lateness gives late firings."""
    rng = random.Random(seed)
    splits = random_splits(rng, 1, 120)
    windows, late = check(make_env, splits, spec, watermarks=("punctuated", 20), lateness=rng.choice([0, 30, 150]),
                          window_parallelism=window_parallelism, epoch_max_records=epoch_max_records,
                          summary=values, assign=assign)
    assert interesting(windows, late)


@pytest.mark.parametrize(("window_parallelism", "assign"), [(1, False), (2, True), (4, False)])
def test_several_splits_one_epoch(make_env, window_parallelism, assign):
    """Four splits in one epoch, source batches of 5, bounded out-of-orderness 30: records of
    split k see the final watermarks of splits < k (+inf: they are done), split k's own
    watermark after its earlier batches, and the start watermarks (MIN) of splits > k."""
    rng = random.Random(10)
    splits = random_splits(rng, 4, 60)
    windows, late = check(make_env, splits, ASSIGNERS[0], watermarks=("bounded", 30), lateness=50,
                          window_parallelism=window_parallelism, batch_size=5, summary=values, assign=assign)
    assert interesting(windows, late)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("seed", "spec", "watermarks", "window_parallelism"),
    [
        pytest.param(20, ASSIGNERS[0], ("bounded", 25), 2, marks=pytest.mark.compat),  # lateness 40
        (21, ASSIGNERS[1], ("punctuated", 10), 4),
        (22, ASSIGNERS[2], ("bounded", 0), 1),
    ],
)
def test_several_splits_many_epochs(make_env, seed, spec, watermarks, window_parallelism):
    """Three splits of different lengths over many epochs (12 records per epoch, split among
    the unfinished splits), so splits finish at different times and the survivors then get a
    larger share of each epoch; source batches of 3."""
    rng = random.Random(seed)
    splits = random_splits(rng, 3, 50)
    splits[1] = splits[1][:12]
    windows, late = check(make_env, splits, spec, watermarks=watermarks, lateness=rng.choice([0, 40]),
                          window_parallelism=window_parallelism, epoch_max_records=12, batch_size=3,
                          summary=values)
    assert interesting(windows, late)


def test_empty_and_short_splits(make_env):
    """An empty split and a one-record split (both +inf once read) do not hold the watermark."""
    rng = random.Random(30)
    splits = random_splits(rng, 3, 50)
    splits.insert(1, [])
    splits.insert(3, [("b", 5, 10_000)])
    check(make_env, splits, ASSIGNERS[0], watermarks=("bounded", 20), lateness=0, window_parallelism=2,
          epoch_max_records=20, batch_size=4)


@pytest.mark.slow
def test_source_parallelism_does_not_matter(make_env):
    """Splits read by 1 or 3 source tasks (split i by task i % p): the same results."""
    rng = random.Random(40)
    splits = random_splits(rng, 3, 50)
    for p in (1, 3):
        check(make_env, splits, ASSIGNERS[1], watermarks=("punctuated", 30), lateness=20, window_parallelism=2,
              source_parallelism=p, epoch_max_records=30, batch_size=4, summary=values)


@pytest.mark.slow
def test_windows_fire_in_later_epochs(make_env):
    """Ten records, one split, one record per epoch, in order: every window fires in a later
    epoch than the one that registered its timer. (Found by the random tests: with Python
    worker reuse, windows whose timers were registered in one epoch sometimes never fired, until
    35a34db reopened cached operator chains that another worker had run since.)"""
    records = [("ab"[i % 2], i * 50, i) for i in range(10)]
    windows, late = check(make_env, [records], ref.Tumbling(100), window_parallelism=1, epoch_max_records=1,
                          summary=values)
    assert len(windows) == 10 and not late


# -- every window function, one job ----------------------------------------------------------


class CountAgg(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + 1

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


class EmitAggregate(ProcessWindowFunction):
    def process(self, key, context, counts):
        w = context.window()
        (n,) = list(counts)
        yield key, w.start, w.end, n


class ApplyCount(WindowFunction):
    def apply(self, key, window, inputs):
        yield key, window.start, window.end, len(list(inputs))


def max_value(a, b):
    """The element with the largest value, ties broken by timestamp: a total order, so the
    result does not depend on the order merged session windows combine their contents (which
    Flink leaves to the state backend)."""
    return a if (a[2], a[1]) >= (b[2], b[1]) else b


@pytest.mark.slow
@pytest.mark.parametrize("spec", [ASSIGNERS[0], ASSIGNERS[2]], ids=["tumbling", "session"])
def test_window_functions(make_env, spec):
    """process, aggregate(+process), apply and reduce on the same windows agree with the
    reference (reduce emits the reduced element itself)."""
    rng = random.Random(50)
    splits = random_splits(rng, 2, 80)
    lateness = 40
    strategy, model = strategies("punctuated", 15)
    env = make_env(parallelism=2, max_records=40)
    late = OutputTag("late")
    windowed = (
        env.from_source(SplitsSource(splits, 4), strategy, "splits")
        .key_by(key_of)
        .window(assigner_of(spec))
        .allowed_lateness(Duration.of_millis(lateness))
        .side_output_late_data(late)
    )
    sinks = {}
    outputs = {
        "process": windowed.process(Emit(count)),
        "aggregate": windowed.aggregate(CountAgg(), window_function=EmitAggregate()),
        "apply": windowed.apply(ApplyCount()),
        "reduce": windowed.reduce(max_value),
    }
    for name, stream in outputs.items():
        stream.set_parallelism(3).sink_to(sinks.setdefault(name, CollectSink()))
    outputs["process"].get_side_output(late).sink_to(late_sink := CollectSink())
    env.execute("window-functions")
    counted = ref.simulate(splits, ts_of, key_of, spec, count, model, lateness, 40, 4)
    reduced = ref.simulate(splits, ts_of, key_of, spec, ref.reduce_with(max_value), model, lateness, 40, 4)
    for name in ("process", "aggregate", "apply"):
        got = Counter(sinks[name].results)
        assert got == counted.windows, f"{name}:\n{diff(got, counted.windows)}"
    got = Counter(sinks["reduce"].results)
    want = Counter()
    for (_, _, _, r), n in reduced.windows.items():
        want[r] += n
    assert got == want, f"reduce:\n{diff(got, want)}"
    assert Counter(late_sink.results) == counted.late


# -- idleness --------------------------------------------------------------------------------


def run_until(make_env, splits, strategy, expected: Counter, seconds: float) -> Counter:
    """Run an unbounded job until its window output equals ``expected`` (or ``seconds`` pass),
    then cancel it."""
    env = make_env(parallelism=2, max_records=20, execution_epoch_interval=50)
    out = CollectSink()
    (
        env.from_source(SplitsSource(splits, 4), strategy, "splits")
        .key_by(key_of)
        .window(TumblingEventTimeWindows.of(Duration.of_millis(100)))
        .process(Emit(values))
        .sink_to(out)
    )
    client = env.execute_async("idleness")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and not client.is_done():
            if expected and Counter(out.results) == expected:
                time.sleep(0.5)  # nothing more may come
                break
            time.sleep(0.1)
    finally:
        client.cancel()
        with contextlib.suppress(JobCancelledError):
            client.wait(60)
    return Counter(out.results)


def ordered_splits(rng: random.Random, n: int, per_split: int) -> list[list]:
    """Out of order by at most 15 ms, so that with a bound of 20 no record is ever late,
    whenever the watermark moves."""
    return random_splits(rng, n, per_split, disorder=7, stragglers=0.0)


@pytest.mark.slow
def test_idle_split_lets_windows_fire(make_env):
    """Split 2 never produces a record. With ``with_idleness`` it is left out of the minimum once
    idle, so the windows of the other two (finished: +inf) fire although the job never ends.
    No record is ever late, so when the split turns idle does not change the result."""
    rng = random.Random(60)
    splits = [*ordered_splits(rng, 2, 60), None]
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(20)).with_timestamp_assigner(
        lambda v, record_ts: v[1]
    ).with_idleness(Duration.of_millis(1))
    want = ref.simulate(splits, ts_of, key_of, ref.Tumbling(100), values, lambda: ref.BoundedOutOfOrderness(20),
                        epoch_max_records=20, batch_size=4, idle_splits=[2]).windows
    assert want and not ref.simulate(splits, ts_of, key_of, ref.Tumbling(100), values,
                                     lambda: ref.BoundedOutOfOrderness(20), epoch_max_records=20).late
    got = run_until(make_env, splits, strategy, want, seconds=60)
    assert got == want, diff(got, want)


@pytest.mark.slow
def test_silent_split_without_idleness_holds_the_watermark(make_env):
    """The same job without ``with_idleness``: the silent split keeps the watermark at MIN, so no
    window ever fires (we watch for a few seconds of epochs)."""
    rng = random.Random(61)
    splits = [*ordered_splits(rng, 2, 30), None]
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(20)).with_timestamp_assigner(
        lambda v, record_ts: v[1]
    )
    want = ref.simulate(splits, ts_of, key_of, ref.Tumbling(100), values, lambda: ref.BoundedOutOfOrderness(20),
                        epoch_max_records=20, batch_size=4).windows
    assert want == Counter()
    assert run_until(make_env, splits, strategy, want, seconds=6) == Counter()


# -- more random cases -----------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("seed", range(100, 104))
def test_random_jobs(make_env, seed):
    """Random assigner, watermark policy, lateness, splits, epoch size, batch size and window
    parallelism."""
    rng = random.Random(seed)
    spec = rng.choice([ref.Tumbling(rng.randint(20, 200), rng.randint(0, 19)), ref.Sliding(120, 30), ref.Session(rng.randint(10, 60))])
    splits = random_splits(rng, rng.randint(1, 4), rng.randint(20, 90), keys="abcdef")
    check(make_env, splits, spec, watermarks=(rng.choice(["bounded", "punctuated"]), rng.randint(0, 60)),
          lateness=rng.choice([0, 10, 100]), window_parallelism=rng.choice([1, 2, 4]),
          epoch_max_records=rng.choice([15, 40, BIG]), batch_size=rng.choice([1, 3, 8192]), summary=values)


# -- a failure in the window function, restart from the last checkpoint -----------------------


class FailOnce(ProcessWindowFunction):
    """Like :class:`Emit`, but fails at window ``(key, start)`` until it has failed ``times``
    times (Spark does not retry a user function's error: the job restarts from a checkpoint)."""

    def __init__(self, summary, key, start, marker: str, times: int = 1):
        self.summary, self.key, self.start, self.marker, self.times = summary, key, start, marker, times

    def process(self, key, context, elements):
        w = context.window()
        if (key, w.start) == (self.key, self.start) and not os.path.exists(self.marker + ".done"):
            with open(self.marker, "a") as f:
                f.write("x")
            if os.path.getsize(self.marker) >= self.times:
                open(self.marker + ".done", "w").close()
            msg = f"injected failure in window {key} {w}"
            raise RuntimeError(msg)
        yield key, w.start, w.end, self.summary(list(elements))


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_failure_restores_windows_timers_and_watermarks(make_env, tmp_path, backend):
    """Checkpoints at every epoch; the window function fails (all task attempts) on one window in
    the middle of the job, which restarts from the last checkpoint: window contents, timers,
    split positions, watermark generators and channels come back, and the exactly-once output
    equals the reference's, late firings and late records included."""
    from flowpoint import RestartStrategies

    rng = random.Random(70)
    splits = random_splits(rng, 3, 50)
    kw = dict(watermarks=("bounded", 20), lateness=60, epoch_max_records=15, batch_size=4, summary=values)
    want_windows, want_late = run_reference(splits, ASSIGNERS[0], **kw)
    middle = sorted(want_windows)[len(want_windows) // 2]
    env = make_env(parallelism=2, max_records=15, state_checkpoints_dir=str(tmp_path / "ck"))
    env.get_configuration().set("state.backend.type", backend)
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    strategy, _ = strategies("bounded", 20)
    late = OutputTag("late")
    marker = str(tmp_path / "failures")
    fired = (
        env.from_source(SplitsSource(splits, 4), strategy, "splits")
        .key_by(key_of)
        .window(assigner_of(ASSIGNERS[0]))
        .allowed_lateness(Duration.of_millis(60))
        .side_output_late_data(late)
        .process(FailOnce(values, middle[0], middle[1], marker))
        .set_parallelism(2)
    )
    fired.sink_to(out := CollectSink())
    fired.get_side_output(late).sink_to(late_out := CollectSink())
    env.execute("restore")
    assert os.path.exists(marker + ".done"), "the injected failure never happened"
    got_windows, got_late = Counter(out.results), Counter(late_out.results)
    assert got_windows == want_windows, diff(got_windows, want_windows)
    assert got_late == want_late, diff(got_late, want_late)
