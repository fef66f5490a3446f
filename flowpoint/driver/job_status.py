"""A job's id, status and progress, and the result of a finished job: plain types the driver
reports and the job client hands out (job.py)."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from typing import Any


class JobStatus(enum.Enum):
    CREATED = "CREATED"
    RUNNING = "RUNNING"
    FINISHED = "FINISHED"
    FAILING = "FAILING"
    RESTARTING = "RESTARTING"
    FAILED = "FAILED"
    CANCELLING = "CANCELLING"
    CANCELED = "CANCELED"

    def is_globally_terminal_state(self) -> bool:
        return self in (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELED)


def new_job_id() -> str:
    """32 lowercase hex characters, new for every run (as in Flink)."""
    return uuid.uuid4().hex


@dataclass(frozen=True)
class SplitProgress:
    """One source split: where the job's committed work has read it to."""

    source_uid: str
    index: int  # among the source's splits: the order of its records
    split_id: str
    position: Any  # the source's own position value (e.g. a Kafka offset)
    finished: bool


@dataclass(frozen=True)
class JobProgress:
    """Where a job stands, read-only: a copy taken by :meth:`JobClient.progress`."""

    job_id: str
    job_name: str
    status: JobStatus
    epoch: int  # the epoch running, else the last one committed (0: none yet)
    records_read: int  # by the sources, in committed work since the job's start or restore
    restarts: int  # how many times the job restarted after a failure
    splits: tuple[SplitProgress, ...]  # every source split, by source then index
    resumed_from: tuple[str, int] | None  # (job id, checkpoint id) the job restored, if any
    fingerprint: str  # the job's identity for --resume (its state layout)
    # continuous runtime: the run's listening endpoints ("host:port"), the driver's control
    # channel first, then each slot's record channels (docs/deployment.md: ports)
    endpoints: tuple[str, ...] = ()
    runtime: str = "epoch"  # how the job runs: "epoch" or "continuous" (execution.runtime, decided at start)


@dataclass
class JobExecutionResult:
    job_id: str
    job_name: str
    net_runtime_ms: int
    epochs: int
    records_read: int
    _coordinator: Any = field(default=None, repr=False)

    def get_job_id(self) -> str:
        return self.job_id

    def get_net_runtime(self) -> int:
        return self.net_runtime_ms

    def get_checkpoint_stats(self) -> list:
        """Every checkpoint the job triggered: id, epoch, status, durations, sizes, failure reason."""
        return self._coordinator.checkpoint_stats()

    def get_epoch_stats(self) -> list[tuple[int, int, float]]:
        """The last 1,000 epochs: ``(epoch, records read, seconds)``."""
        return list(self._coordinator.epoch_history)

    def get_metrics(self) -> dict[str, Any]:
        """The job's metrics by Flink's names: per operator ``"<name>.numRecordsIn"``,
        ``"<name>.numRecordsOut"``, ``"<name>.numLateRecordsDropped"``, the user's counters and
        meters (``"<name>.<group>.<metric>"``); and the job's ``numRestarts``,
        ``numberOfCompletedCheckpoints``, ``lastCheckpointDuration``, ``lastCheckpointSize``."""
        return dict(self._coordinator.metrics)

    def get_current_watermark(self) -> int | None:
        """The job's watermark when it ended (the minimum over its active channels)."""
        return self._coordinator.current_watermark()

    def get_keyed_state(self, uid: str, state_name: str | None = None) -> dict:
        """Committed keyed state of operator ``uid`` after the job: ``{key: value}`` for one
        state name, or ``{state name: {key: value}}`` for all."""
        return self._coordinator.read_keyed_state(uid, state_name)
