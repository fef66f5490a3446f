"""The jobs' metrics in Prometheus' terms: a ``prometheus_client`` collector that reads each
job's :class:`~flowpoint.metrics.store.MetricStore` and ``get_metrics()`` when it is scraped
(nothing is copied in between), served by :mod:`flowpoint.metrics.exporter`.

Names are Flink's metric names under ``flowpoint_<scope>_`` (docs/metrics.md lists them all):

* ``flowpoint_operator_*``: one series per operator and parallel instance, labelled ``job_id``,
  ``job_name``, ``task_name`` (the chain it runs in), ``operator_id`` (its uid),
  ``operator_name``, ``subtask_index``;
* ``flowpoint_task_*``: one per chain and parallel instance (busy, backpressured and idle time),
  labelled ``job_id``, ``job_name``, ``task_id``, ``task_name``, ``subtask_index``;
* ``flowpoint_job_*``: one per job, labelled ``job_id``, ``job_name``;
* ``flowpoint_user_<group>_<name>``: the user's metrics (``get_metrics_group()``), with the
  operator labels; the group path's dots (and dashes) become underscores.

What only grows (records in and out, late records dropped, restarts, checkpoints counted, a
meter's count) is a Prometheus counter, exposed with the ``_total`` suffix; everything else is a
gauge, as is a user ``Counter`` (it can go down, so Flink's reporter makes every counter a gauge).
A user meter is a counter ``..._total`` and a gauge ``..._rate`` (events per second); a
distribution a summary (``..._count``, ``..._sum``) with gauges ``..._min`` and ``..._max``.

Two user metrics whose names become the same Prometheus name (``a.b_c`` and ``a_b.c``), or one
that takes a name another kind already has, cannot both be exported: the first one seen is, and
the other is left out with one warning.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, SummaryMetricFamily
from prometheus_client.registry import Collector

log = logging.getLogger("flowpoint")

PREFIX = "flowpoint"
OPERATOR_LABELS = ("job_id", "job_name", "task_name", "operator_id", "operator_name", "subtask_index")
TASK_LABELS = ("job_id", "job_name", "task_id", "task_name", "subtask_index")
JOB_LABELS = ("job_id", "job_name")
WORKER_LABELS = ("job_id", "job_name", "worker")

# Flink's name -> (kind, help): the families every job exports (user metrics aside)
OPERATOR_METRICS = {
    "numRecordsIn": ("counter", "records the operator received"),
    "numRecordsOut": ("counter", "records the operator emitted"),
    "numLateRecordsDropped": ("counter", "records a window operator dropped as late (window operators only)"),
    "numRecordsInPerSecond": ("gauge", "records received per second, over the last 5 s"),
    "numRecordsOutPerSecond": ("gauge", "records emitted per second, over the last 5 s"),
    "currentInputWatermark": ("gauge", "the operator's input watermark, ms since the epoch (once it has one)"),
}
TASK_METRICS = {
    "busyTimeMsPerSecond": ("gauge", "ms per second the task spent processing records, over the last 5 s"),
    "backPressuredTimeMsPerSecond": ("gauge", "ms per second the task waited for room downstream, over the last 5 s"),
    "idleTimeMsPerSecond": ("gauge", "ms per second the task waited for input, over the last 5 s"),
}
JOB_METRICS = {
    "numRestarts": ("counter", "restarts after a failure"),
    "numberOfCompletedCheckpoints": ("counter", "checkpoints completed"),
    "numberOfFailedCheckpoints": ("counter", "checkpoints that failed or expired"),
    "numberOfInProgressCheckpoints": ("gauge", "checkpoints in progress"),
    "lastCheckpointDuration": ("gauge", "ms the last completed checkpoint took (once one completed)"),
    "lastCheckpointSize": ("gauge", "bytes of the last completed checkpoint (once one completed)"),
    "uptime": ("gauge", "ms since the job was submitted; frozen when it ends"),
}
STATUS_METRICS = {
    "Status.Python.Memory.RSS": "bytes of resident memory of the process (the driver: jobmanager; a worker: taskmanager)",
}
WINDOW_KIND = "window"
_UNSAFE = re.compile(r"[^A-Za-z0-9_]")


def user_metric_name(identifier: str) -> str:
    """``"my_group.my_counter"`` -> ``"flowpoint_user_my_group_my_counter"``."""
    return f"{PREFIX}_user_{_UNSAFE.sub('_', identifier)}"


@dataclass
class MonitoredJob:
    """A job on the endpoint: its client, and when it was submitted and (once) ended."""

    client: Any  # flowpoint.driver.job.JobClient
    job_id: str
    job_name: str
    started_ms: float = field(default_factory=lambda: time.time() * 1000)
    ended_ms: float | None = None

    def uptime_ms(self) -> float:
        return (self.ended_ms if self.ended_ms is not None else time.time() * 1000) - self.started_ms


class _Families:
    """The families of one scrape, by name; each name keeps the kind it was first given."""

    def __init__(self, warn: Any) -> None:
        self.by_name: dict[str, Any] = {}
        self.kinds: dict[str, str] = {}
        self.series: set[tuple[str, tuple[str, ...]]] = set()
        self.warn = warn

    def reserve(self, names: list[str], kind: str, labels: tuple[str, ...], values: list[str], what: str) -> bool:
        """Whether ``names`` (one metric's families) are free for ``kind`` and these label values."""
        for name in names:
            taken = self.kinds.get(name)
            if (taken is not None and taken != kind) or (name, tuple(values)) in self.series:
                self.warn(f"{what}: the Prometheus name {name} is taken by another metric; {what} is not exported")
                return False
        for name in names:
            self.kinds[name] = kind
            self.series.add((name, tuple(values)))
        return True

    def _family(self, cls: Any, name: str, doc: str, labels: tuple[str, ...]) -> Any:
        family = self.by_name.get(name)
        if family is None:
            family = self.by_name[name] = cls(name, doc, labels=list(labels))
        return family

    def counter(self, name: str, doc: str, labels: tuple[str, ...], values: list[str], value: float) -> None:
        self._family(CounterMetricFamily, name, doc, labels).add_metric(values, value)

    def gauge(self, name: str, doc: str, labels: tuple[str, ...], values: list[str], value: float) -> None:
        self._family(GaugeMetricFamily, name, doc, labels).add_metric(values, value)

    def summary(self, name: str, doc: str, labels: tuple[str, ...], values: list[str], count: int, total: float) -> None:
        self._family(SummaryMetricFamily, name, doc, labels).add_metric(values, count, total)


class JobsCollector(Collector):
    """The metrics of the jobs on the endpoint, read from their stores when scraped."""

    def __init__(self) -> None:
        self._jobs: dict[str, MonitoredJob] = {}
        self._lock = threading.Lock()
        self._warned: set[str] = set()

    def add(self, job: MonitoredJob) -> None:
        with self._lock:
            self._jobs[job.job_id] = job

    def remove(self, job_id: str) -> None:
        with self._lock:
            self._jobs.pop(job_id, None)

    def jobs(self) -> list[MonitoredJob]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.started_ms)

    def _warn_once(self, message: str) -> None:
        if message not in self._warned:
            self._warned.add(message)
            log.warning("Prometheus endpoint: %s", message)

    def collect(self) -> Iterator[Any]:
        out = _Families(self._warn_once)
        for job in self.jobs():
            try:
                export_job(job, out)
            except Exception:  # noqa: BLE001 - one job's failure must not fail the scrape
                log.exception("Prometheus endpoint: the metrics of job %s could not be read", job.job_id)
        return iter(list(out.by_name.values()))


def _task_names(operators: list[Any]) -> dict[int, str]:
    """stage id -> its operators' names in chain order (``"numbers -> counted"``, as Flink's)."""
    names: dict[int, list[str]] = {}
    for om in operators:
        names.setdefault(om.info.stage_id, []).append(om.info.name)
    return {stage: " -> ".join(n) for stage, n in names.items()}


def export_job(job: MonitoredJob, out: _Families) -> None:
    """Add one job's series to ``out``."""
    operators = job.client.metric_store().operator_metrics()
    tasks = _task_names(operators)
    jl = [job.job_id, job.job_name]
    seen_tasks: set[tuple[int, int]] = set()
    for om in operators:
        info = om.info
        for s in om.subtasks:
            labels = [*jl, tasks[info.stage_id], info.uid, info.name, str(s.subtask)]
            _operator(out, info, s, labels, om.user_kinds)
            _user(out, om, s, labels)
            if (info.stage_id, s.subtask) not in seen_tasks:  # every operator of a chain has its task's times
                seen_tasks.add((info.stage_id, s.subtask))
                tl = [*jl, str(info.stage_id), tasks[info.stage_id], str(s.subtask)]
                for name, value in (("busyTimeMsPerSecond", s.busy_ms_per_s), ("backPressuredTimeMsPerSecond", s.backpressured_ms_per_s),
                                    ("idleTimeMsPerSecond", s.idle_ms_per_s)):
                    out.gauge(f"{PREFIX}_task_{name}", TASK_METRICS[name][1], TASK_LABELS, tl, value)
    store = job.client.metric_store()
    for w in store.workers() if hasattr(store, "workers") else []:
        scope = "jobmanager" if w["role"] == "driver" else "taskmanager"
        for name, value in sorted(w["status"].items()):
            out.gauge(f"{PREFIX}_{scope}_{_UNSAFE.sub('_', name)}", STATUS_METRICS.get(name, name), WORKER_LABELS, [*jl, w["id"]], float(value))
    metrics = job.client.get_metrics()
    metrics["uptime"] = job.uptime_ms()
    for name, (kind, doc) in JOB_METRICS.items():
        if name in metrics:
            add = out.counter if kind == "counter" else out.gauge
            add(f"{PREFIX}_job_{name}", doc, JOB_LABELS, jl, float(metrics[name]))


def _operator(out: _Families, info: Any, s: Any, labels: list[str], user_kinds: dict[str, str]) -> None:
    for name, (kind, doc) in OPERATOR_METRICS.items():
        if kind == "counter":
            if name == "numLateRecordsDropped" and info.kind != WINDOW_KIND and name not in s.counters:
                continue
            out.counter(f"{PREFIX}_operator_{name}", doc, OPERATOR_LABELS, labels, s.counters.get(name, 0))
        elif name in s.rates:
            out.gauge(f"{PREFIX}_operator_{name}", doc, OPERATOR_LABELS, labels, s.rates[name])
        elif name in s.gauges:
            out.gauge(f"{PREFIX}_operator_{name}", doc, OPERATOR_LABELS, labels, s.gauges[name])
        elif name.endswith("PerSecond"):
            out.gauge(f"{PREFIX}_operator_{name}", doc, OPERATOR_LABELS, labels, 0.0)  # no rate yet


    for name in sorted(s.gauges):
        if name.startswith("rocksdb.") and name not in user_kinds:
            out.gauge(f"{PREFIX}_operator_{_UNSAFE.sub('_', name)}", f"RocksDB's {name[8:]} of the operator's DB (Flink's {name})",
                      OPERATOR_LABELS, labels, s.gauges[name])


def _user(out: _Families, om: Any, s: Any, labels: list[str]) -> None:
    for ident, kind in sorted(om.user_kinds.items()):
        name = user_metric_name(ident)
        what = f"{kind} {ident!r} of operator {om.info.name!r}"
        doc = f"the user's {kind} {ident} (get_metrics_group())"
        if kind == "counter" and ident in s.counters:
            if out.reserve([name], "gauge", OPERATOR_LABELS, labels, what):
                out.gauge(name, doc, OPERATOR_LABELS, labels, s.counters[ident])
        elif kind == "gauge" and ident in s.gauges:
            if out.reserve([name], "gauge", OPERATOR_LABELS, labels, what):
                out.gauge(name, doc, OPERATOR_LABELS, labels, s.gauges[ident])
        elif kind == "meter" and ident in s.counters:
            if out.reserve([name, name + "_total", name + "_rate"], "meter", OPERATOR_LABELS, labels, what):
                out.counter(name, doc, OPERATOR_LABELS, labels, s.counters[ident])
                out.gauge(name + "_rate", doc + ": events per second", OPERATOR_LABELS, labels, s.rates.get(ident + "PerSecond", 0.0))
        elif kind == "distribution" and ident in s.distributions:
            count, total, low, high = s.distributions[ident]
            if out.reserve([name, *(name + x for x in ("_count", "_sum", "_min", "_max"))], "distribution", OPERATOR_LABELS, labels, what):
                out.summary(name, doc, OPERATOR_LABELS, labels, int(count), float(total))
                if low is not None and high is not None:
                    out.gauge(name + "_min", doc + ": least value", OPERATOR_LABELS, labels, float(low))
                    out.gauge(name + "_max", doc + ": greatest value", OPERATOR_LABELS, labels, float(high))
