"""Summaries of numbers as Flink's REST API gives them: ``StatsSummaryDto`` (min, max, avg and
percentiles) for checkpoint statistics, and the per-metric aggregates of a vertex's subtasks."""

from __future__ import annotations

from collections.abc import Sequence


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of sorted ``values``, linearly interpolated."""
    if not values:
        return 0.0
    pos = (len(values) - 1) * q
    low = int(pos)
    high = min(low + 1, len(values) - 1)
    return float(values[low] + (values[high] - values[low]) * (pos - low))


def summary(values: Sequence[float]) -> dict:
    """Flink's ``StatsSummaryDto``: min, max, avg (whole numbers) and p50 ... p999; all 0 when
    there are no values."""
    data = sorted(float(v) for v in values)
    if not data:
        return {"min": 0, "max": 0, "avg": 0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0}
    return {
        "min": round(data[0]),
        "max": round(data[-1]),
        "avg": round(sum(data) / len(data)),
        "p50": round(percentile(data, 0.5), 3),
        "p90": round(percentile(data, 0.9), 3),
        "p95": round(percentile(data, 0.95), 3),
        "p99": round(percentile(data, 0.99), 3),
        "p999": round(percentile(data, 0.999), 3),
    }


def aggregate(values: Sequence[float]) -> dict:
    """Flink's aggregate of one metric over a vertex's subtasks (``JobVertexDetailsInfo``'s
    ``aggregated``): min, max, avg, sum, median, p25, p75, p95."""
    data = sorted(float(v) for v in values)
    if not data:
        return {k: 0 for k in ("min", "max", "avg", "sum", "median", "p25", "p75", "p95")}
    return {
        "min": round(data[0]),
        "max": round(data[-1]),
        "avg": round(sum(data) / len(data)),
        "sum": round(sum(data)),
        "median": round(percentile(data, 0.5)),
        "p25": round(percentile(data, 0.25)),
        "p75": round(percentile(data, 0.75)),
        "p95": round(percentile(data, 0.95)),
    }
