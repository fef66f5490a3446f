"""Checkpointing mode AT_LEAST_ONCE on the continuous runtime: barriers are not aligned (seed 002).

A subtask with two inputs (one behind a slow map, so its barriers queue behind its backlog)
snapshots once a checkpoint's barrier has arrived on both, and keeps
processing the input that delivered it first meanwhile, so a fast input never waits for a slow
one; after a restore, the records that passed the barrier early count again (at-least-once
state). With EXACTLY_ONCE the same job aligns: the fast input waits at every checkpoint until
the slow input's barrier arrives.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

from flowpoint import (
    CheckpointingMode,
    DataGeneratorSource,
    KeyedProcessFunction,
    RestartStrategies,
    ValueStateDescriptor,
)
from flowpoint.connectors.sinks import CollectSink

pytestmark = pytest.mark.slow

FAST, SLOW = 2_000, 320  # the slow input's records each take 25 ms in a map: 80/s at parallelism 2, 100x slower


def fast(i):
    return ("fast", i)


def slow(i):
    return ("slow", i)


def sluggish(v):
    time.sleep(0.025)
    return v


class Count(KeyedProcessFunction):
    """Counts per input; emits ``(input, record, count, time)``; fails once at fast record 1500
    when ``flag`` is set and the file is missing."""

    def __init__(self, flag: str | None = None):
        self.flag = flag

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        if self.flag and value == ("fast", 1_500) and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            msg = "injected failure at fast record 1500"
            raise RuntimeError(msg)
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield value[0], value[1], n, time.monotonic()


def run(make_env, mode: CheckpointingMode, flag: str | None = None):
    env = make_env(2, execution_runtime="continuous", execution_progress_interval=0)
    env.enable_checkpointing(200)
    env.get_checkpoint_config().set_checkpointing_mode(mode)
    if flag:
        env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    sink = CollectSink()
    a = env.from_source(DataGeneratorSource(fast, count=FAST, rate_limit_per_second=2_000), source_name="fast").uid("fast")
    b = env.from_source(DataGeneratorSource(slow, count=SLOW), source_name="slow").uid("slow").map(sluggish).uid("sluggish")
    a.union(b).key_by(lambda v: v[0]).process(Count(flag)).uid("count").sink_to(sink).uid("sink")
    started = time.monotonic()
    result = env.execute(f"two inputs, {mode.name}")
    return started, list(sink.results), result


def done_at(results, started, which):
    """When the last record of input ``which`` was counted, from the first record counted (the
    job's start-up is not the inputs' time)."""
    first = min(t for *_, t in results)
    return max(t for src, _, _, t in results if src == which) - first


def test_without_alignment_the_fast_input_keeps_flowing_past_the_slow_one(make_env, capfd):
    started, results, result = run(make_env, CheckpointingMode.AT_LEAST_ONCE)
    assert Counter(src for src, *_ in results) == {"fast": FAST, "slow": SLOW}  # no failure: each once
    assert dict(result.get_keyed_state("count", "count")) == {"fast": FAST, "slow": SLOW}
    assert any(s.status == "COMPLETED" for s in result.get_checkpoint_stats())
    fast_done, slow_done = done_at(results, started, "fast"), done_at(results, started, "slow")
    # the slow input takes 4 s or more; the fast one's 2,000 records need 1 s and never wait for it
    assert fast_done < slow_done / 2, (fast_done, slow_done)
    assert "AT_LEAST_ONCE: barriers are not aligned" in capfd.readouterr().err
    # aligned (EXACTLY_ONCE), the fast input waits at every checkpoint until the slow input's
    # barrier has passed the frames queued in front of the slow map
    started, aligned, _ = run(make_env, CheckpointingMode.EXACTLY_ONCE)
    assert Counter(src for src, *_ in aligned) == {"fast": FAST, "slow": SLOW}
    fast_aligned, slow_aligned = done_at(aligned, started, "fast"), done_at(aligned, started, "slow")
    assert fast_aligned > slow_aligned / 2, (fast_aligned, slow_aligned)


def test_after_a_failure_every_record_counts_at_least_once(make_env, tmp_path):
    flag = str(tmp_path / "failed")
    _, results, result = run(make_env, CheckpointingMode.AT_LEAST_ONCE, flag)
    assert os.path.exists(flag)
    seen = Counter((src, i) for src, i, _, _ in results)
    assert set(seen) == {("fast", i) for i in range(FAST)} | {("slow", i) for i in range(SLOW)}  # every record, at least once
    state = dict(result.get_keyed_state("count", "count"))
    # the state counts every record the operator processed in the attempts whose work was kept:
    # at least each record once, and exactly the count the last output of each input says
    assert state["fast"] >= FAST and state["slow"] >= SLOW
    last = {src: n for src, _, n, _ in sorted(results, key=lambda r: r[2])}
    assert state == last
