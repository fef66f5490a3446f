"""What a task reports of its operators, in one shape on both runtimes.

Every parallel instance of a stage (an epoch's task, or a continuous subtask) keeps cumulative
counts in its operators: records in and out (:class:`~flowpoint.tasks.operators.Operator`
``num_in``/``num_out``), the operator's own counts (late records dropped, ...), and the user's
metrics registered through ``get_metrics_group()``. A :class:`ChainMeter` turns them into a
:class:`MetricReport` of *increases since its last report*, plus gauges (current watermark,
user gauges) and the task's busy, backpressured and idle time over the same span:

* the epoch runtime sends one report in each task's acknowledgement (the epoch's increases);
* the continuous runtime's slots send one per subtask every second through the control
  channel, and each barrier's acknowledgement carries the rest up to the barrier.

The driver adds the reports up in a :class:`~flowpoint.metrics.store.MetricStore`. Increases add
up whatever the order they arrive in; a report of a failed attempt that never arrives is lost,
as Flink's metrics of a failed task are.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any

from flowpoint.metrics.group import Counter, Distribution, Meter, _Gauge

log = logging.getLogger("flowpoint")

MIN_WATERMARK = -(2**63)

Key = tuple[str, str]  # (operator uid, metric name)


@dataclass
class MetricReport:
    stage_id: int
    partition: int
    counters: dict[Key, float] = field(default_factory=dict)  # increases since the last report
    gauges: dict[Key, float] = field(default_factory=dict)  # values now
    distributions: dict[Key, tuple[int, float, float | None, float | None]] = field(default_factory=dict)  # count, sum increases; min, max
    user: dict[Key, str] = field(default_factory=dict)  # the user's metrics: key -> counter | meter | gauge | distribution
    busy_ms: float = 0.0
    backpressured_ms: float = 0.0
    idle_ms: float = 0.0
    worker: str = ""  # host:pid of the process the task runs in (continuous runtime)
    status: dict[str, float] = field(default_factory=dict)  # that process's figures now: Status.Python.Memory.RSS


def _items(d: dict) -> list:
    """A dict's items while another thread may add to it (the continuous runtime reports from
    the slot's thread)."""
    for _ in range(10):
        try:
            return list(d.items())
        except RuntimeError:  # changed size during iteration
            continue
    return []


class ChainMeter:
    """The reports of one chain runtime (one parallel instance of a stage)."""

    def __init__(self, ops: dict[int, Any], user_metrics: dict[str, dict[str, Any]]) -> None:
        self.ops = ops
        self.user_metrics = user_metrics  # operator uid -> metric id -> metric
        self._last: dict[Key, float] = {}
        self._last_dist: dict[Key, tuple[int, float]] = {}
        self._lock = threading.Lock()
        self._bad_gauges: set[Key] = set()

    def report(self, stage_id: int, partition: int, busy_ms: float = 0.0, backpressured_ms: float = 0.0, idle_ms: float = 0.0) -> MetricReport:
        r = MetricReport(stage_id, partition, busy_ms=busy_ms, backpressured_ms=backpressured_ms, idle_ms=idle_ms)
        with self._lock:
            for op in self.ops.values():
                uid = op.spec.uid
                self._count(r, (uid, "numRecordsIn"), op.num_in)
                self._count(r, (uid, "numRecordsOut"), op.num_out)
                for name, n in _items(op.totals):
                    self._count(r, (uid, name), n)
                if op.watermark > MIN_WATERMARK:
                    r.gauges[(uid, "currentInputWatermark")] = op.watermark
                for name, metric in _items(self.user_metrics.get(uid, {})):
                    self._user(r, (uid, name), metric)
        return r

    def _count(self, r: MetricReport, key: Key, total: float) -> None:
        increase = total - self._last.get(key, 0)
        if increase:
            r.counters[key] = increase
            self._last[key] = total

    def _user(self, r: MetricReport, key: Key, metric: Any) -> None:
        if isinstance(metric, (Counter, Meter)):
            r.user[key] = "counter" if isinstance(metric, Counter) else "meter"
            self._count(r, key, metric.get_count())
        elif isinstance(metric, Distribution):
            r.user[key] = "distribution"
            count, total = self._last_dist.get(key, (0, 0.0))
            if metric.count != count:
                r.distributions[key] = (metric.count - count, metric.sum - total, metric.min, metric.max)
                self._last_dist[key] = (metric.count, metric.sum)
        elif isinstance(metric, _Gauge):
            try:
                value = float(metric.fn())
            except Exception as e:  # noqa: BLE001 - a gauge must not fail the task
                if key not in self._bad_gauges:
                    self._bad_gauges.add(key)
                    log.warning("gauge %s of operator %s raised %s: %s; it is not reported", key[1], key[0], type(e).__name__, e)
                return
            r.user[key] = "gauge"
            r.gauges[key] = value
