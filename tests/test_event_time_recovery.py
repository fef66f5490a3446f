"""Event time across failures: window contents, timers, watermarks and watermark generators are
part of every checkpoint, so a job that fails and restores produces what an uninterrupted run
produces, on both state backends."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from flowpoint import (
    Aggregates,
    CollectSink,
    DataGeneratorSource,
    Duration,
    KeyedProcessFunction,
    MapFunction,
    ProcessWindowFunction,
    RestartStrategies,
    TimeDomain,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)

EVENTS = 3_000
KEYS = 5
WINDOW = 1_000
MAX_LAG = 300


def event(i: int) -> tuple[int, int]:
    """(key, timestamp): 10 ms apart, lagging by up to MAX_LAG ms (out of order)."""
    return i % KEYS, i * 10 - (i * 7919) % (MAX_LAG + 1)


class FailOnce(MapFunction):
    """Raises at one event once (then ``flag`` exists): Spark does not retry a user function's
    error, the job restarts from its checkpoint and gets past it."""

    def __init__(self, at: int, flag: str):
        self.at, self.flag = event(at), flag

    def map(self, value):
        if value == self.at and not os.path.exists(self.flag):
            with open(self.flag + ".n", "a") as f:
                f.write("x")
            if os.path.getsize(self.flag + ".n") >= 1:
                open(self.flag, "w").close()
            msg = f"injected failure at {value}"
            raise RuntimeError(msg)
        return value


class WindowCount(ProcessWindowFunction):
    def process(self, key, context, elements):
        (n,) = elements
        yield "window", key, context.window().start, n


class Deadline(KeyedProcessFunction):
    """An event-time timer per key at the end of each 500 ms slot it saw; on_timer reports it."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(value[1] // 500 * 500 + 499)

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        yield "timer", ctx.get_current_key(), timestamp


def build(env, fail_at: int | None, flag: str | None) -> CollectSink:
    sink = CollectSink()
    stream = env.from_source(
        DataGeneratorSource(event, count=EVENTS),
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(MAX_LAG)).with_timestamp_assigner(lambda e, _: e[1]),
        "events",
    ).uid("events")
    if fail_at is not None:
        stream = stream.map(FailOnce(fail_at, flag)).uid("fail-once")
    keyed = stream.key_by(lambda e: e[0])
    windows = keyed.window(TumblingEventTimeWindows.of(Duration.of_millis(WINDOW))).aggregate(Aggregates.count(), WindowCount()).uid("windows")
    timers = keyed.process(Deadline()).uid("deadlines")
    windows.union(timers).sink_to(sink).uid("collect")
    return sink


def expected() -> list:
    events = [event(i) for i in range(EVENTS)]
    counts = Counter((k, ts // WINDOW * WINDOW) for k, ts in events)
    windows = [("window", k, start, n) for (k, start), n in counts.items()]
    timers = sorted({("timer", k, ts // 500 * 500 + 499) for k, ts in events})
    return sorted(windows + timers)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_windows_and_timers_survive_a_failure_and_restore(make_env, tmp_path, backend):
    env = make_env(parallelism=2, max_records=300, state_checkpoints_dir=str(tmp_path / "ck"))
    env.get_configuration().set("state.backend.type", backend)
    env.enable_checkpointing(1)  # at every epoch boundary
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    sink = build(env, fail_at=2_100, flag=flag)
    result = env.execute("event time recovery")
    assert os.path.exists(flag), "the injected failure never happened"
    assert sorted(sink.results) == expected()
    assert result.get_metrics().get("Window.numLateRecordsDropped", 0) == 0
    cps = [s for s in result.get_checkpoint_stats() if s.status == "COMPLETED"]
    assert cps, "no checkpoint completed before the failure"
