"""The driver's store of the tasks' metric reports (:mod:`flowpoint.metrics.report`).

It adds the reports' increases up per operator and parallel instance (subtask), keeps the
latest gauges, and samples the totals over time, so that rates (records/s, busy and
backpressured ms per second, user meters) and the throughput chart come from the same numbers
as the totals. Readers (the REST API, the dashboard, the Prometheus endpoint,
``get_metrics()``) see copies, taken under a lock: reports arrive in the job's thread.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from flowpoint.metrics.report import MetricReport
from flowpoint.metrics.system import ROCKSDB_PREFIX, RSS, combine_rocksdb, rss_bytes, worker_id

RATE_WINDOW_S = 5.0  # rates are averaged over about this long
SAMPLE_EVERY_S = 0.5
HISTORY_S = 600.0  # the throughput chart's span


@dataclass(frozen=True)
class OperatorInfo:
    uid: str
    name: str
    stage_id: int
    kind: str
    parallelism: int


@dataclass
class SubtaskMetrics:
    """One parallel instance of an operator: totals, rates and gauges."""

    subtask: int
    counters: dict[str, float] = field(default_factory=dict)  # numRecordsIn, numRecordsOut, ..., user counters
    rates: dict[str, float] = field(default_factory=dict)  # numRecordsInPerSecond, ..., user meters' rates
    gauges: dict[str, float] = field(default_factory=dict)  # currentInputWatermark, user gauges
    distributions: dict[str, tuple[int, float, float | None, float | None]] = field(default_factory=dict)
    busy_ms_per_s: float = 0.0
    backpressured_ms_per_s: float = 0.0
    idle_ms_per_s: float = 0.0


@dataclass
class OperatorMetrics:
    info: OperatorInfo
    subtasks: list[SubtaskMetrics]
    user_kinds: dict[str, str]  # the user's metrics: name -> counter | meter | gauge | distribution

    def total(self, name: str) -> float:
        return sum(s.counters.get(name, 0) for s in self.subtasks)

    def rate(self, name: str) -> float:
        return sum(s.rates.get(name, 0.0) for s in self.subtasks)

    def watermark(self) -> float | None:
        """The lowest current input watermark over the instances that have one."""
        marks = [s.gauges["currentInputWatermark"] for s in self.subtasks if "currentInputWatermark" in s.gauges]
        return min(marks) if len(marks) == len(self.subtasks) and marks else None

    def max_of(self, attribute: str) -> float:
        return max((getattr(s, attribute) for s in self.subtasks), default=0.0)


RATED = ("numRecordsIn", "numRecordsOut")


class MetricStore:
    def __init__(self, operators: list[OperatorInfo]) -> None:
        self.operators = {o.uid: o for o in operators}
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, int, str], float] = {}
        self._gauges: dict[tuple[str, int, str], float] = {}
        self._dists: dict[tuple[str, int, str], list] = {}
        self._user: dict[tuple[str, str], str] = {}
        self._task_ms: dict[tuple[int, int], list[float]] = {}  # (stage, subtask) -> busy, backpressured, idle
        self._workers: dict[str, dict[str, Any]] = {}  # host:pid -> {"status": {...}, "subtasks": {(stage, p)}, "updated": wall ms}
        self._samples: deque = deque()  # (monotonic s, wall ms, totals copy, task ms copy)
        self._last_sample = 0.0
        self.reports = 0

    def add(self, r: MetricReport) -> None:
        with self._lock:
            self.reports += 1
            p = r.partition
            for (uid, name), n in r.counters.items():
                k = (uid, p, name)
                self._totals[k] = self._totals.get(k, 0) + n
            for (uid, name), v in r.gauges.items():
                self._gauges[(uid, p, name)] = v
            for (uid, name), (count, total, lo, hi) in r.distributions.items():
                d = self._dists.setdefault((uid, p, name), [0, 0.0, None, None])
                d[0] += count
                d[1] += total
                d[2], d[3] = lo, hi
            self._user.update(r.user)
            worker = getattr(r, "worker", "")
            if worker:
                w = self._workers.setdefault(worker, {"status": {}, "subtasks": set(), "updated": 0.0})
                w["status"].update(getattr(r, "status", {}))
                w["subtasks"].add((r.stage_id, p))
                w["updated"] = time.time() * 1000
            t = self._task_ms.setdefault((r.stage_id, p), [0.0, 0.0, 0.0])
            t[0] += r.busy_ms
            t[1] += r.backpressured_ms
            t[2] += r.idle_ms
            now = time.monotonic()
            if now - self._last_sample >= SAMPLE_EVERY_S:
                self._sample(now)

    def _sample(self, now: float) -> None:
        self._last_sample = now
        self._samples.append((now, time.time() * 1000, dict(self._totals), {k: list(v) for k, v in self._task_ms.items()}))
        while self._samples and now - self._samples[0][0] > HISTORY_S:
            self._samples.popleft()

    def _reference(self, now: float) -> Any:
        """The sample to take rates from: the latest one at least RATE_WINDOW_S old, or the oldest."""
        ref = None
        for s in self._samples:
            if now - s[0] >= RATE_WINDOW_S or ref is None:
                ref = s
            else:
                break
        return ref

    def operator_metrics(self) -> list[OperatorMetrics]:
        with self._lock:
            now = time.monotonic()
            ref = self._reference(now)
            dt = (now - ref[0]) if ref is not None else 0.0
            # one pass over each table, grouped by (operator uid, subtask)
            built: dict[tuple[str, int], SubtaskMetrics] = {}

            def subtask(uid: str, p: int) -> SubtaskMetrics:
                found = built.get((uid, p))
                if found is None:
                    found = built[(uid, p)] = SubtaskMetrics(p)
                return found

            for (uid, q, name), v in self._totals.items():
                subtask(uid, q).counters[name] = v
            for (uid, q, name), v in self._gauges.items():
                subtask(uid, q).gauges[name] = v
            for (uid, q, name), v in self._dists.items():
                subtask(uid, q).distributions[name] = tuple(v)
            out = []
            for info in self.operators.values():
                subtasks = []
                for p in range(info.parallelism):
                    s = subtask(info.uid, p)
                    if dt > 0 and ref is not None:
                        rated = [*RATED, *(n for (u, n), kind in self._user.items() if u == info.uid and kind == "meter")]
                        for name in rated:
                            before = ref[2].get((info.uid, p, name), 0)
                            s.rates[name + "PerSecond"] = max(0.0, (s.counters.get(name, 0) - before) / dt)
                        t_now = self._task_ms.get((info.stage_id, p))
                        t_then = ref[3].get((info.stage_id, p), [0.0, 0.0, 0.0])
                        if t_now is not None:
                            s.busy_ms_per_s = min(1000.0, max(0.0, (t_now[0] - t_then[0]) / dt))
                            s.backpressured_ms_per_s = min(1000.0, max(0.0, (t_now[1] - t_then[1]) / dt))
                            s.idle_ms_per_s = min(1000.0, max(0.0, (t_now[2] - t_then[2]) / dt))
                    subtasks.append(s)
                kinds = {n: k for (u, n), k in self._user.items() if u == info.uid}
                out.append(OperatorMetrics(info, subtasks, kinds))
            return out

    def accumulated_ms(self, stage_id: int, parallelism: int) -> list[tuple[float, float, float]]:
        """Per subtask of a stage: the total busy, backpressured and idle ms reported so far
        (Flink's ``accumulated-busy-time`` and its siblings)."""
        with self._lock:
            return [tuple(self._task_ms.get((stage_id, p), (0.0, 0.0, 0.0))) for p in range(parallelism)]  # type: ignore[misc]

    def workers(self) -> list[dict[str, Any]]:
        """The processes that reported (the continuous runtime's slots: ``host:pid``), each
        with its figures (``Status.Python.Memory.RSS``), the subtasks ``(stage, partition)`` it
        ran and when it last reported (wall ms); the driver's own process first, read now."""
        driver: dict[str, Any] = {"id": worker_id(), "role": "driver", "status": {}, "subtasks": [], "updated": time.time() * 1000}
        rss = rss_bytes()
        if rss is not None:
            driver["status"][RSS] = rss
        with self._lock:
            workers = [
                {"id": wid, "role": "worker", "status": dict(w["status"]), "subtasks": sorted(w["subtasks"]), "updated": w["updated"]}
                for wid, w in self._workers.items()
            ]
        workers.sort(key=lambda w: (min((p for _, p in w["subtasks"]), default=0), w["id"]))  # slot 0 first
        return [driver, *workers]

    def throughput(self) -> list[tuple[float, float, float]]:
        """``(wall ms, records/s read by the sources, records/s written by the sinks)`` between
        consecutive samples: the throughput chart."""
        sources = [o.uid for o in self.operators.values() if o.kind == "source"]
        sinks = [o.uid for o in self.operators.values() if o.kind == "sink"]

        def total(sample: Any, uids: list[str], name: str) -> float:
            return sum(v for (uid, _, n), v in sample[2].items() if uid in uids and n == name)

        with self._lock:
            samples = list(self._samples)
        out = []
        for a, b in zip(samples, samples[1:], strict=False):
            dt = b[0] - a[0]
            if dt > 0:
                out.append((b[1], (total(b, sources, "numRecordsOut") - total(a, sources, "numRecordsOut")) / dt,
                            (total(b, sinks, "numRecordsIn") - total(a, sinks, "numRecordsIn")) / dt))
        return out

    def flat(self) -> dict[str, float]:
        """``"<operator name>.<metric>"`` -> the total over the operator's instances (counters
        and meters' counts), as ``JobExecutionResult.get_metrics()`` reports them."""
        out: dict[str, float] = {}
        with self._lock:
            for (uid, _, name), v in self._totals.items():
                info = self.operators.get(uid)
                key = f"{info.name if info else uid}.{name}"
                out[key] = out.get(key, 0) + v
            for (uid, _, name), v in self._gauges.items():  # RocksDB's figures: the sum over the instances
                if name.startswith(ROCKSDB_PREFIX) and (uid, name) not in self._user:
                    info = self.operators.get(uid)
                    key = f"{info.name if info else uid}.{name}"
                    out[key] = combine_rocksdb(name, out.get(key), v)
        return {k: int(v) if float(v).is_integer() else v for k, v in out.items()}
