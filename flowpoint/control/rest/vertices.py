"""``/jobs/:jid/vertices/:vid``: one job vertex (a chain of operators) with its subtasks, in the
shape of Flink's ``JobVertexDetailsInfo``. flowpoint does not know which Spark executor ran a
subtask: ``host`` and ``taskmanager-id`` are empty. A subtask's ``attempt`` is the number of
restarts (every restart runs every subtask again). Each subtask's ``flowpoint`` object has its
operators' metrics."""

from __future__ import annotations

from typing import Any

from flowpoint.control.rest.jobs import TASK_STATE, vertex_io
from flowpoint.control.rest.snapshot import JobSnapshot
from flowpoint.control.rest.stats import aggregate

AGGREGATED = (
    "read-bytes", "write-bytes", "read-records", "write-records",
    "accumulated-backpressured-time", "accumulated-idle-time", "accumulated-busy-time",
)
STATUS_DURATIONS = ("CREATED", "SCHEDULED", "DEPLOYING", "INITIALIZING", "RUNNING")


def _subtask_operators(s: JobSnapshot, vertex: Any, index: int) -> dict:
    out = {}
    for op in vertex.operators:
        m = s.metrics.get(op.uid)
        sub = m.subtasks[index] if m is not None and index < len(m.subtasks) else None
        if sub is None:
            out[op.uid] = {}
            continue
        out[op.uid] = {
            "numRecordsIn": int(sub.counters.get("numRecordsIn", 0)),
            "numRecordsOut": int(sub.counters.get("numRecordsOut", 0)),
            "numRecordsInPerSecond": round(sub.rates.get("numRecordsInPerSecond", 0.0), 3),
            "numRecordsOutPerSecond": round(sub.rates.get("numRecordsOutPerSecond", 0.0), 3),
            "currentInputWatermark": int(sub.gauges["currentInputWatermark"]) if "currentInputWatermark" in sub.gauges else None,
            "numLateRecordsDropped": int(sub.counters.get("numLateRecordsDropped", 0)),
            "busyTimeMsPerSecond": round(sub.busy_ms_per_s, 1),
            "backPressuredTimeMsPerSecond": round(sub.backpressured_ms_per_s, 1),
            "idleTimeMsPerSecond": round(sub.idle_ms_per_s, 1),
        }
    return out


def _subtask(s: JobSnapshot, vertex: Any, index: int) -> dict:
    status = TASK_STATE.get(s.state, "CREATED")
    running = s.duration if status in ("RUNNING", "FINISHED", "CANCELING", "CANCELED", "FAILED") else 0
    return {
        "subtask": index, "status": status, "attempt": s.restarts, "host": "", "start-time": s.start_ms,
        "end-time": s.end_ms if s.end_ms is not None else -1, "duration": s.duration, "metrics": vertex_io(s, vertex, index),
        "taskmanager-id": "", "other-concurrent-attempts": [], "status-duration": {k: (running if k == "RUNNING" else 0) for k in STATUS_DURATIONS},
        "flowpoint": {"operators": _subtask_operators(s, vertex, index)},
    }


def vertex_details(s: JobSnapshot, vertex: Any) -> dict:
    subtasks = [_subtask(s, vertex, i) for i in range(vertex.parallelism)]
    return {
        "id": vertex.id, "name": vertex.name, "parallelism": vertex.parallelism, "maxParallelism": vertex.max_parallelism,
        "now": s.now_ms, "subtasks": subtasks,
        "aggregated": {
            "metrics": {k: aggregate([t["metrics"][k] for t in subtasks]) for k in AGGREGATED},
            "status-duration": {k: aggregate([t["status-duration"][k] for t in subtasks]) for k in STATUS_DURATIONS},
        },
        "flowpoint": {"stage": vertex.stage_id, "operators": [op.uid for op in vertex.operators]},
    }
