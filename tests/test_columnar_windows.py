"""Built-in window aggregations over columnar batches agree with the per-record path: same
results, same late records, same state, for tumbling and sliding windows."""

from __future__ import annotations

from collections import Counter

import pytest

from flowpoint import (
    Aggregates,
    ClickEventGenerator,
    CollectSink,
    DataGeneratorSource,
    Duration,
    OutputTag,
    ProcessWindowFunction,
    SlidingEventTimeWindows,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)

EVENTS = 20_000


class Label(ProcessWindowFunction):
    def process(self, key, context, results):
        (r,) = results
        w = context.window()
        yield tuple(key) if isinstance(key, tuple) else key, w.start, w.end, r


def run(make_env, columnar: bool, assigner, aggregate) -> tuple[Counter, Counter, dict]:
    gen = ClickEventGenerator(num_users=500, interval_ms=5, max_lateness_ms=4_000)
    env = make_env(parallelism=2, max_records=3_000)
    late = OutputTag("late")
    stream = env.from_source(
        DataGeneratorSource(gen, count=EVENTS),
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(1_500)).with_timestamp_assigner("ts"),
        "clicks",
    )
    keyed = stream.key_by(["channel", "behavior"]) if columnar else stream.key_by(lambda e: (e.channel, e.behavior))
    windows = keyed.window(assigner).allowed_lateness(Duration.of_millis(500)).side_output_late_data(late).aggregate(aggregate, Label())
    out, late_out = CollectSink(), CollectSink()
    windows.sink_to(out)
    windows.get_side_output(late).map(lambda e: (e.ts, e.id)).sink_to(late_out)
    result = env.execute("columnar" if columnar else "per record")
    return Counter(out.results), Counter(late_out.results), result.get_metrics()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("assigner", "aggregate"),
    [
        (TumblingEventTimeWindows.of(Duration.of_seconds(2)), Aggregates.count()),
        (SlidingEventTimeWindows.of(Duration.of_seconds(3), Duration.of_seconds(1)), Aggregates.sum("ts")),
        (TumblingEventTimeWindows.of(Duration.of_seconds(2), Duration.of_millis(300)), Aggregates.avg("ts")),
        (TumblingEventTimeWindows.of(Duration.of_seconds(2)), Aggregates.max("ts")),
    ],
    ids=["tumbling-count", "sliding-sum", "offset-avg", "tumbling-max"],
)
def test_columnar_window_aggregation_equals_the_per_record_path(make_env, assigner, aggregate):
    per_record = run(make_env, False, assigner, aggregate)
    columnar = run(make_env, True, assigner, aggregate)
    assert columnar[0] == per_record[0]
    assert columnar[1] == per_record[1]
    if isinstance(assigner, TumblingEventTimeWindows):  # a sliding element is late only in all 3 windows
        assert sum(columnar[1].values()) > 0, "the data should have late records"
    assert sum(per_record[0].values()) > 50
