"""One consistent reading of a job for the REST answers of one request: its status and times,
its plan, every operator's metrics, the sizes of its state. Built from the job's client (read-only
accessors) and what the control endpoint keeps about it (its registry entry, status times)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from flowpoint.clock import now_ms

TERMINAL = ("FINISHED", "FAILED", "CANCELED")


@dataclass
class JobSnapshot:
    job_id: str
    name: str
    state: str
    start_ms: int
    end_ms: int | None
    now_ms: int
    pid: int
    timestamps: dict[str, int]  # job status -> when the job first reached it
    plan: Any  # flowpoint.driver.plan_view.PlanView
    metrics: dict[str, Any]  # uid -> flowpoint.metrics.store.OperatorMetrics
    accumulated: dict[int, list[tuple[float, float, float]]]  # stage -> per subtask busy, backpressured, idle ms
    runtime: str
    epoch: int
    records_read: int
    restarts: int
    watermark: int | None
    spark_ui: str | None
    operator_sizes: dict[str, int] | None  # uid -> bytes in the latest completed checkpoint or savepoint
    last_checkpoint: dict | None  # {"id", "time", "path"} of the latest completed checkpoint
    workers: list[dict] = field(default_factory=list)  # the driver and the workers: MetricStore.workers()

    @property
    def unit(self) -> str:
        """What the job commits in: epochs, or segments (up to a barrier) on the continuous runtime."""
        return "segment" if self.runtime == "continuous" else "epoch"

    @property
    def ended(self) -> bool:
        return self.state in TERMINAL

    @property
    def duration(self) -> int:
        return max(0, (self.end_ms if self.end_ms is not None else self.now_ms) - self.start_ms)

    def total(self, uid: str, name: str) -> float:
        m = self.metrics.get(uid)
        return m.total(name) if m is not None else 0

    @classmethod
    def of(cls, job: Any) -> JobSnapshot:
        """``job``: a :class:`~flowpoint.control.job_control.JobControl`."""
        client = job.client
        state = client.get_job_status().value
        progress = client.progress()
        plan = client.get_plan()
        store = client.metric_store()
        metrics = {m.info.uid: m for m in store.operator_metrics()}
        accumulated = {v.stage_id: store.accumulated_ms(v.stage_id, v.parallelism) for v in plan.vertices}
        end = (client.get_end_time_ms() or job.entry.end_time_ms or now_ms()) if state in TERMINAL else None
        return cls(
            job_id=job.entry.job_id, name=job.entry.job_name, state=state, start_ms=job.entry.start_time_ms, end_ms=end,
            now_ms=now_ms(), pid=job.entry.pid or os.getpid(), timestamps=dict(job.timestamps), plan=plan,
            metrics=metrics, accumulated=accumulated, runtime=client.get_runtime(), epoch=progress.epoch,
            records_read=progress.records_read, restarts=progress.restarts, watermark=client.get_current_watermark(),
            spark_ui=job.spark_ui, operator_sizes=latest_sizes(client),
            last_checkpoint=last_checkpoint(client),
            workers=store.workers() if hasattr(store, "workers") else [],
        )


def latest_sizes(client: Any) -> dict[str, int] | None:
    """Each operator's state size in the job's latest completed checkpoint or savepoint."""
    done = [s for s in [*client.get_checkpoint_stats(), *client.get_savepoint_stats()] if s.status == "COMPLETED"]
    if not done:
        return None
    return dict(max(done, key=lambda s: s.checkpoint_id).operator_sizes)


def last_checkpoint(client: Any) -> dict | None:
    done = [s for s in client.get_checkpoint_stats() if s.status == "COMPLETED"]
    if not done:
        return None
    s = done[-1]
    return {"id": s.checkpoint_id, "time": int(s.trigger_time_ms + s.end_to_end_ms), "path": s.path}
