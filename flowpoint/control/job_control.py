"""A job known to its process's control endpoint: its client, its registry entry and the thread
that keeps the entry current, when it reached each status, and the savepoints and stops asked
for through the REST API.

When the job ends, the watcher writes the job's archive (its final REST answers,
:mod:`flowpoint.control.archive`) before the registry entry says the job ended, so that
``flowpoint ui`` finds one when it sees the other.
"""

from __future__ import annotations

import logging
import os
import socket
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from flowpoint.clock import now_ms
from flowpoint.control.rest.operations import Operations
from flowpoint.control.rest.snapshot import JobSnapshot
from flowpoint.control.rest.state import StateSamples
from flowpoint.control.rest_server import ApiError
from flowpoint.driver.registry import JobEntry, JobRegistry
from flowpoint.errors import FlowpointError

if TYPE_CHECKING:
    from collections.abc import Callable

    from flowpoint.driver.job import JobClient

log = logging.getLogger("flowpoint")

POLL_S = 1.0  # how often a job's registry entry is refreshed
OPERATIONS_WAIT_S = 30.0  # at the job's end, how long savepoints in flight may still take
CLAIM_WAIT_S = 15.0  # ... and how long the endpoint keeps answering about their results


class JobControl:
    def __init__(self, client: JobClient, registry: JobRegistry, endpoint: str, config: Any,
                 archive: Callable[[JobControl], Any]):
        self.client = client
        self.archive = archive  # writes the job's archive when it ends (control/archive.py's write_archive)
        self.config = config  # the job's configuration
        self.registry = registry
        progress = client.progress()
        self.entry = JobEntry(
            job_id=client.get_job_id(),
            job_name=progress.job_name,
            status=client.get_job_status().value,
            start_time_ms=now_ms(),
            pid=os.getpid(),
            host=socket.gethostname(),
            endpoint=endpoint,
            fingerprint=progress.fingerprint,  # the job's identity for --resume
        )
        self.timestamps: dict[str, int] = {"CREATED": self.entry.start_time_ms}  # status -> first reached
        self.operations = Operations()
        self.state_samples = StateSamples()  # GET /jobs/:jid/vertices/:vid/state's reads, per checkpoint
        self.spark_ui: str | None = client.get_spark_ui_url()  # asked once: the JVM is not asked at exit
        self.registered = False
        self._warned = False
        self.thread: Any = None

    @property
    def job_id(self) -> str:
        return self.entry.job_id

    def snapshot(self) -> JobSnapshot:
        return JobSnapshot.of(self)

    def last_completed_checkpoint(self) -> Any:
        completed = [s for s in self.client.get_checkpoint_stats() if s.status == "COMPLETED"]
        return completed[-1] if completed else None

    def refresh(self) -> bool:
        """Bring the entry up to date; True when it changed."""
        e = self.entry
        status = self.client.get_job_status().value
        self.timestamps.setdefault(status, now_ms())
        latest = self.last_completed_checkpoint()
        cp_id = latest.checkpoint_id if latest is not None else None
        resumed = self.client.progress().resumed_from  # (job id, checkpoint id) it restored
        if resumed is not None and e.resumed_from is None:
            e.resumed_from, e.resumed_checkpoint_id = resumed
        elif status == e.status and cp_id == e.last_checkpoint_id:
            return False
        e.status = status
        if latest is not None:
            e.last_checkpoint_id = cp_id
            e.last_checkpoint_time_ms = int(latest.trigger_time_ms + latest.duration_ms)
            e.last_checkpoint_path = latest.path
        return True

    def write(self) -> None:
        try:
            self.registry.write(self.entry)
            self.registered = True
        except FlowpointError as err:
            if not self._warned:
                log.warning("%s; the flowpoint CLI will not see job %s", err, self.entry.job_id)
                self._warned = True
            self.registered = False

    def watch(self, on_end: Callable[[JobControl], None]) -> None:
        try:
            while not self.client.wait_until_done(POLL_S):
                if self.refresh():
                    self.write()
            self.finish()
            if self.registered:
                self.registry.prune()
            self.operations.wait_claimed(CLAIM_WAIT_S)
        except Exception:  # noqa: BLE001 - the job goes on without its entry
            log.exception("job registry entry of job %s could not be kept up to date", self.entry.job_id)
        finally:
            on_end(self)

    def finish(self) -> None:
        """The job ended: its archive, then its entry's final status and end time."""
        self.refresh()
        self.entry.end_time_ms = self.entry.end_time_ms or self.client.get_end_time_ms() or now_ms()
        self.timestamps.setdefault(self.entry.status, self.entry.end_time_ms)
        self.operations.wait_done(OPERATIONS_WAIT_S)  # a stop's savepoint: its result goes into the archive
        try:
            self.archive(self)
        except (OSError, FlowpointError) as e:
            log.warning("the archive of job %s could not be written (%s); flowpoint ui shows it without details", self.job_id, e)
        self.write()

    def require_running(self, action: str) -> None:
        status = self.client.get_job_status()
        if status.is_globally_terminal_state() or self.client.is_done():
            msg = f"cannot {action} job {self.entry.job_id} ({self.entry.job_name!r}): it has ended ({status.value})"
            raise ApiError(HTTPStatus.CONFLICT, msg)
