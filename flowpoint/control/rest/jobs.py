"""``/config``, ``/overview``, ``/jobs``, ``/jobs/overview`` and ``/jobs/:jid``, in Flink's
shapes (``DashboardConfiguration``, ``ClusterOverviewWithVersion``, ``JobIdsWithStatusOverview``,
``MultipleJobsDetails``, ``JobDetailsInfo``; docs/rest.md).

flowpoint has no task managers or slots (Spark's executors run the tasks): those counts are 0.
A job vertex is a stage (a chain of operators run in one task); its task counts are its
subtasks, all in the state the job's state implies. Bytes are not counted (``read-bytes`` 0,
``read-bytes-complete`` false); records are.
"""

from __future__ import annotations

import time
from datetime import datetime
from typing import Any

from flowpoint.control.rest.snapshot import JobSnapshot
from flowpoint.metrics.system import combine_rocksdb
from flowpoint.version import __version__

REFRESH_INTERVAL_MS = 3000
JOB_STATES = ("INITIALIZING", "CREATED", "RUNNING", "FAILING", "FAILED", "CANCELLING", "CANCELED", "FINISHED", "RESTARTING", "SUSPENDED", "RECONCILING")
EXECUTION_STATES = ("CREATED", "SCHEDULED", "DEPLOYING", "RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILED", "RECONCILING", "INITIALIZING")
# the state of a job's subtasks while the job is in a state (flowpoint runs them all or none)
TASK_STATE = {
    "CREATED": "CREATED", "RUNNING": "RUNNING", "FINISHED": "FINISHED", "FAILING": "CANCELING", "FAILED": "FAILED",
    "CANCELLING": "CANCELING", "CANCELED": "CANCELED", "RESTARTING": "CREATED", "LOST": "FAILED",
}
# how Flink's web UI tells a data exchange that runs as it is produced from one that is materialized
EXCHANGES = {"epoch": "blocking", "continuous": "pipelined_bounded"}


def dashboard_config() -> dict:
    """``GET /config``; ``flink-version`` is flowpoint's own version."""
    now = datetime.now().astimezone()
    offset = now.utcoffset()
    return {
        "refresh-interval": REFRESH_INTERVAL_MS,
        "timezone-name": _timezone_name(now),
        "timezone-offset": int(offset.total_seconds() * 1000) if offset is not None else 0,
        "flink-version": __version__,
        "flink-revision": f"flowpoint {__version__}",
        "features": {"web-submit": False, "web-cancel": True, "web-rescale": False, "web-history": False},
        "flowpoint-version": __version__,
    }


def _timezone_name(now: datetime) -> str:
    import os

    zone = os.environ.get("TZ", "").lstrip(":")
    if zone:
        return zone
    try:
        link = os.readlink("/etc/localtime")
        if "zoneinfo/" in link:
            return link.split("zoneinfo/", 1)[1]
    except OSError:
        pass
    return now.tzname() or time.tzname[0]


def cluster_overview(entries: list[dict]) -> dict:
    """``GET /overview`` over the jobs' ``/jobs/overview`` entries."""
    def count(*states: str) -> int:
        return sum(1 for e in entries if e["state"] in states)

    return {
        "taskmanagers": 0, "slots-total": 0, "slots-available": 0, "taskmanagers-blocked": 0, "slots-free-and-blocked": 0,
        "jobs-running": count("CREATED", "RUNNING", "FAILING", "CANCELLING", "RESTARTING", "INITIALIZING", "RECONCILING"),
        "jobs-finished": count("FINISHED"),
        "jobs-cancelled": count("CANCELED"),
        "jobs-failed": count("FAILED"),
        "flink-version": __version__,
        "flink-commit": "",
        "flowpoint": {"jobs-lost": count("LOST"), "version": __version__},
    }


def task_counts(state: str, subtasks: int) -> dict[str, int]:
    counts = dict.fromkeys(EXECUTION_STATES, 0)
    counts[TASK_STATE.get(state, "CREATED")] = subtasks
    return counts


def overview_entry(s: JobSnapshot) -> dict:
    """One job of ``GET /jobs/overview`` (Flink's ``JobDetails``)."""
    subtasks = sum(v.parallelism for v in s.plan.vertices)
    tasks = {k.lower(): n for k, n in task_counts(s.state, subtasks).items()}
    sources = [op.uid for v in s.plan.vertices for op in v.operators if op.kind == "source"]
    sinks = [op.uid for v in s.plan.vertices for op in v.operators if op.kind == "sink"]
    return {
        "jid": s.job_id, "name": s.name, "start-time": s.start_ms, "end-time": s.end_ms if s.end_ms is not None else -1,
        "duration": s.duration, "state": s.state, "last-modification": max(s.timestamps.values(), default=s.start_ms),
        "tasks": {"total": subtasks, **tasks, "pending": 0},
        "flowpoint": {
            "runtime": s.runtime,
            "records-in": int(sum(s.total(u, "numRecordsOut") for u in sources)),
            "records-out": int(sum(s.total(u, "numRecordsIn") for u in sinks)),
            "restarts": s.restarts,
            "last-checkpoint": s.last_checkpoint,
            "pid": s.pid,
        },
    }


def io_metrics(read: float, write: float, busy: float, backpressured: float, idle: float) -> dict:
    """Flink's ``IOMetricsInfo`` (records counted, bytes not)."""
    return {
        "read-bytes": 0, "read-bytes-complete": False, "write-bytes": 0, "write-bytes-complete": False,
        "read-records": int(read), "read-records-complete": True, "write-records": int(write), "write-records-complete": True,
        "accumulated-backpressured-time": int(backpressured), "accumulated-idle-time": int(idle), "accumulated-busy-time": float(busy),
    }


def vertex_io(s: JobSnapshot, vertex: Any, subtask: int | None = None) -> dict:
    """The IO metrics of a vertex, or of one of its subtasks: records into its head (none for a
    source, as in Flink), records its operators send to other vertices, busy/backpressured/idle ms."""
    def count(uid: str, name: str) -> float:
        m = s.metrics.get(uid)
        if m is None:
            return 0
        if subtask is None:
            return m.total(name)
        return m.subtasks[subtask].counters.get(name, 0) if subtask < len(m.subtasks) else 0

    read = 0 if vertex.is_source else count(vertex.operators[0].uid, "numRecordsIn")
    write = sum(count(uid, "numRecordsOut") for uid in s.plan.emitting(vertex))
    times = s.accumulated.get(vertex.stage_id, [])
    if subtask is not None:
        times = times[subtask:subtask + 1]
    busy, bp, idle = (sum(t[i] for t in times) for i in range(3))
    return io_metrics(read, write, busy, bp, idle)


def vertex_entry(s: JobSnapshot, vertex: Any) -> dict:
    """One vertex of ``JobDetailsInfo`` (Flink's ``JobDetailsVertexInfo``)."""
    return {
        "id": vertex.id, "name": vertex.name, "maxParallelism": vertex.max_parallelism, "parallelism": vertex.parallelism,
        "status": TASK_STATE.get(s.state, "CREATED"), "start-time": s.start_ms,
        "end-time": s.end_ms if s.end_ms is not None else -1, "duration": s.duration,
        "tasks": task_counts(s.state, vertex.parallelism), "metrics": vertex_io(s, vertex),
    }


def plan(s: JobSnapshot) -> dict:
    """``JobDetailsInfo.plan`` (Flink's JSON plan: vertices with their inputs)."""
    exchange = EXCHANGES.get(s.runtime, "pipelined_bounded")
    nodes = []
    for v in s.plan.vertices:
        node: dict[str, Any] = {
            "id": v.id, "parallelism": v.parallelism, "operator": "", "operator_strategy": "",
            "description": v.name, "optimizer_properties": {},
            "inputs": [
                {"num": i, "id": inp.vertex_id, "ship_strategy": inp.ship_strategy, "exchange": exchange}
                for i, inp in enumerate(v.inputs)
            ],
        }
        nodes.append(node)
    return {"jid": s.job_id, "name": s.name, "type": "BATCH" if s.plan.batch else "STREAMING", "nodes": nodes}


def operator_entry(s: JobSnapshot, vertex: Any, op: Any) -> dict:
    """One operator of the ``flowpoint`` object of ``JobDetailsInfo``: busy and backpressured
    time are the highest of its subtasks' (ms per second, as Flink's job graph shows them),
    idle time their average; the watermark the lowest."""
    m = s.metrics.get(op.uid)
    metrics: dict[str, Any] = {
        "numRecordsIn": 0, "numRecordsOut": 0, "numRecordsInPerSecond": 0.0, "numRecordsOutPerSecond": 0.0,
        "currentInputWatermark": None, "numLateRecordsDropped": 0, "busyTimeMsPerSecond": 0.0,
        "backPressuredTimeMsPerSecond": 0.0, "idleTimeMsPerSecond": 0.0,
        "stateSize": (s.operator_sizes or {}).get(op.uid) if op.keyed else None,
    }
    if m is not None:
        subtasks = m.subtasks or []
        wm = m.watermark()
        metrics.update({
            "numRecordsIn": int(m.total("numRecordsIn")), "numRecordsOut": int(m.total("numRecordsOut")),
            "numRecordsInPerSecond": round(m.rate("numRecordsInPerSecond"), 3),
            "numRecordsOutPerSecond": round(m.rate("numRecordsOutPerSecond"), 3),
            "currentInputWatermark": int(wm) if wm is not None else None,
            "numLateRecordsDropped": int(m.total("numLateRecordsDropped")),
            "busyTimeMsPerSecond": round(m.max_of("busy_ms_per_s"), 1),
            "backPressuredTimeMsPerSecond": round(m.max_of("backpressured_ms_per_s"), 1),
            "idleTimeMsPerSecond": round(sum(x.idle_ms_per_s for x in subtasks) / len(subtasks), 1) if subtasks else 0.0,
        })
        rocksdb: dict[str, float] = {}  # RocksDB's own figures over the subtasks
        for x in subtasks:
            for name, value in x.gauges.items():
                if name.startswith("rocksdb.") and name not in m.user_kinds:
                    rocksdb[name] = combine_rocksdb(name, rocksdb.get(name), value)
        if rocksdb:
            metrics["rocksdb"] = {k: int(v) for k, v in sorted(rocksdb.items())}
    return {
        "uid": op.uid, "name": op.name, "kind": op.kind, "vertex-id": vertex.id, "parallelism": op.parallelism,
        "chained-to": op.chained_to, "metrics": metrics,
    }


def worker_entry(w: dict) -> dict:
    """The driver or a worker process: its id (``host:pid``), the subtasks it ran (``"stage.p"``)
    and its metrics (``Status.Python.Memory.RSS``, bytes)."""
    return {
        "id": w["id"], "role": w["role"], "subtasks": [f"{stage}.{p}" for stage, p in w["subtasks"]],
        "last-report": int(w["updated"]), "metrics": {k: int(v) for k, v in sorted(w["status"].items())},
    }


def job_details(s: JobSnapshot) -> dict:
    """``GET /jobs/:jid`` (Flink's ``JobDetailsInfo``) with a ``flowpoint`` object."""
    vertices = [vertex_entry(s, v) for v in s.plan.vertices]
    status_counts = dict.fromkeys(EXECUTION_STATES, 0)
    for v in vertices:
        status_counts[v["status"]] += 1
    return {
        "jid": s.job_id, "name": s.name, "isStoppable": not s.ended, "state": s.state, "start-time": s.start_ms,
        "end-time": s.end_ms if s.end_ms is not None else -1, "duration": s.duration, "maxParallelism": s.plan.max_parallelism,
        "now": s.now_ms, "timestamps": {state: s.timestamps.get(state, 0) for state in JOB_STATES},
        "vertices": vertices, "status-counts": status_counts, "plan": plan(s),
        "flowpoint": {
            "runtime": s.runtime, "unit": s.unit, "epoch": s.epoch, **({"segment": s.epoch} if s.unit == "segment" else {}),
            "records-read": s.records_read, "restarts": s.restarts,
            "workers": [worker_entry(w) for w in s.workers],
            "spark-ui": s.spark_ui, "current-watermark": s.watermark, "pid": s.pid,
            "operators": [operator_entry(s, v, op) for v in s.plan.vertices for op in v.operators],
        },
    }
