"""Time passes without records: processing-time windows and timers fire in idle epochs of an
unbounded job, and window_all runs in one task."""

from __future__ import annotations

import time

from flowpoint import (
    CollectSink,
    KeyedProcessFunction,
    ProcessAllWindowFunction,
    TimeDomain,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    WatermarkStrategy,
)
from flowpoint.api.time import Duration
from flowpoint.connectors.source import Source, SourceReader, SourceSplit, SplitPlan
from flowpoint.errors import JobCancelledError


class BurstThenSilence(Source):
    """Unbounded: ``n`` records at once, then nothing, ever (the job never ends by itself)."""

    def __init__(self, n: int):
        self.n = n

    def is_parallel(self):
        return False

    def is_bounded(self):
        return False

    def create_splits(self, parallelism):
        return [SourceSplit("burst", None, 0)]

    def plan(self, split, position, budget, elapsed_s):
        end = min(self.n, position + budget)
        return SplitPlan(end, end - position, False)

    def read_spec(self, split, start, end):
        return (start, end)

    def create_reader(self):
        return _Reader()


class _Reader(SourceReader):
    def read(self, split, spec):
        yield [(i % 3, i) for i in range(*spec)]


class Reminder(KeyedProcessFunction):
    """A processing-time timer 300 ms after each key's first record."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 300)

    def on_timer(self, timestamp, ctx):
        yield "timer", ctx.get_current_key(), ctx.time_domain() == TimeDomain.PROCESSING_TIME


def run_until(env, sink, predicate, seconds: float = 60.0) -> None:
    client = env.execute_async("processing time")
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline and not predicate(sink.results):
            if client.is_done():
                client.wait()  # raises the job's failure
            time.sleep(0.1)
    finally:
        client.cancel()
        try:
            client.wait(60)
        except JobCancelledError:
            pass


def test_processing_time_windows_and_timers_fire_without_new_records(make_env):
    env = make_env(parallelism=2)
    env.get_configuration().set("execution.epoch.idle-interval", 200)
    sink = CollectSink()
    keyed = env.from_source(BurstThenSilence(30), source_name="burst").key_by(lambda v: v[0])
    counts = keyed.window(TumblingProcessingTimeWindows.of(Duration.of_millis(500))).reduce(lambda a, b: (a[0], a[1] + b[1]))
    timers = keyed.process(Reminder())
    counts.map(lambda v: ("window", v[0], v[1])).union(timers).sink_to(sink)

    def complete(results) -> bool:
        windows = [r for r in results if r[0] == "window"]
        return len([r for r in results if r[0] == "timer"]) == 3 and sum(1 for _ in windows) >= 3

    run_until(env, sink, complete)
    got = list(sink.results)
    assert sorted(r for r in got if r[0] == "timer") == [("timer", k, True) for k in range(3)]
    sums = {}
    for _, k, s in (r for r in got if r[0] == "window"):
        sums[k] = sums.get(k, 0) + s
    assert sums == {k: sum(i for i in range(30) if i % 3 == k) for k in range(3)}


class Everything(ProcessAllWindowFunction):
    def process(self, context, elements):
        yield context.window().start, sorted(elements), context.window().start


def test_window_all_sees_every_record_in_one_task(make_env):
    env = make_env(parallelism=2)
    sink = CollectSink()
    stream = env.from_collection(list(range(20))).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: v * 100)
    )
    windowed = stream.window_all(TumblingEventTimeWindows.of(Duration.of_millis(1000))).process(Everything())
    windowed.sink_to(sink)
    assert env.get_stream_graph().nodes[windowed._t.id].parallelism == 1
    env.execute("window all")
    assert sorted(sink.results) == [(0, list(range(10)), 0), (1000, list(range(10, 20)), 1000)]
