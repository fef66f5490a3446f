"""``DataGeneratorSource(..., rate_limit_per_second)`` is smooth, as Flink's rate limiter: each
split earns its share of the rate per second and keeps unused records for at most a second, so a
slow first epoch (Spark starting) is not followed by a burst."""

from __future__ import annotations

import time

import pytest

from flowpoint import DataGeneratorSource
from flowpoint.connectors.sinks import CollectSink


def plan_every(source, split, gaps, budget=10**9):
    """Plan reads of ``split`` after each gap (seconds); returns the records of each plan."""
    position, now, out = split.start, 0.0, []
    for gap in gaps:
        now += gap
        plan = source.plan(split, position, budget, now)
        out.append(plan.end - position)
        position = plan.end
    return out


def test_after_a_slow_first_epoch_the_next_reads_keep_the_rate():
    source = DataGeneratorSource(lambda i: i, count=10**9, rate_limit_per_second=10_000)
    (split,) = source.create_splits(1)
    got = plan_every(source, split, [14.0] + [0.3] * 20)
    assert got[0] <= 10_000, f"the first read after 14 s took {got[0]} records: a burst"
    for n in got[1:]:
        assert abs(n - 3_000) <= 300, got  # within 10% of 0.3 s at 10,000/s


def test_the_rate_is_shared_by_the_splits_and_fractions_are_kept():
    source = DataGeneratorSource(lambda i: i, count=10**9, rate_limit_per_second=30)
    splits = source.create_splits(3)  # 10 records/s each
    for split in splits:
        got = plan_every(source, split, [0.01] * 500)  # 5 s in steps far below one record
        assert sum(got) in (49, 50), got


def test_a_budget_below_the_earned_records_does_not_lose_them():
    source = DataGeneratorSource(lambda i: i, count=10**9, rate_limit_per_second=1_000)
    (split,) = source.create_splits(1)
    got = plan_every(source, split, [0.5, 0.0, 0.0], budget=200)
    assert got == [200, 200, 100]


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_a_job_reads_at_the_limit(make_env, runtime):
    rate, count = 2_000, 6_000
    env = make_env(parallelism=2, **{"execution.runtime": runtime, "execution.buffer-timeout": 5})
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(lambda i: (i, time.time()), count=count, rate_limit_per_second=rate), source_name="timed").uid("timed")
        .sink_to(sink).uid("out")
    )
    env.execute(f"rate limit on {runtime}")
    stamps = sorted(t for _, t in sink.results)
    assert len(stamps) == count
    # after the first second (Spark starting, the first reads): the rest at the limit, +-10%
    start = stamps[0] + 1.0
    rest = [t for t in stamps if t >= start]
    seconds = rest[-1] - start
    assert abs(len(rest) / seconds - rate) <= rate * 0.1, f"{len(rest)} records in {seconds:.2f} s"
    # and no burst: no half second holds more than its share plus the one-second allowance
    for i, t in enumerate(rest):
        j = i
        while j < len(rest) and rest[j] < t + 0.5:
            j += 1
        assert j - i <= rate * 1.5 * 1.1, f"{j - i} records within 0.5 s from {t - stamps[0]:.2f} s"
