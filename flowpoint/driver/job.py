"""The job client: what ``execute_async`` returns (the plain types it reports are in job_status.py)."""

from __future__ import annotations

import html
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.savepoint import native_savepoint, resolve_target
from flowpoint.driver.job_status import JobExecutionResult, JobProgress, JobStatus
from flowpoint.errors import (
    CheckpointError,
    ConfigurationError,
    FlowpointError,
    JobCancelledError,
    JobExecutionError,
)

if TYPE_CHECKING:
    from flowpoint.driver.coordinator import Coordinator

log = logging.getLogger("flowpoint")


class JobClient:
    """Handle on a running job: ``get_job_id()``, ``get_job_status()``, ``cancel()``, ``wait()``,
    ``trigger_savepoint()``, ``stop_with_savepoint()``."""

    def __init__(self, coordinator: Coordinator):
        self._coordinator = coordinator
        self._start_time_ms = int(time.time() * 1000)
        # set by the control plane that serves the job (control/endpoint.py): the dashboard's URL
        # (signed in or not) and, in a notebook, the job's HTML status (control/notebook.py)
        self._dashboard: Callable[[bool], str] | None = None
        self.html_status: Callable[[JobClient], str] | None = None
        self.status_display: Any = None  # the notebook's display of the job (control/notebook.py), if any

    @property
    def job_id(self) -> str:
        return self._coordinator.job_id

    def get_job_id(self) -> str:
        return self._coordinator.job_id

    def get_job_status(self) -> JobStatus:
        return self._coordinator.status

    def cancel(self) -> None:
        """Cancel the job without a savepoint and return at once: the status is CANCELLING, then
        CANCELED when the job has ended (``wait_until_done()`` waits for it; ``wait()`` then
        raises JobCancelledError)."""
        self._coordinator.cancel()

    def get_start_time_ms(self) -> int:
        """When the job was submitted (wall-clock ms)."""
        return self._start_time_ms

    def get_failure(self) -> BaseException | None:
        """The error that failed the job, None unless it FAILED."""
        return self._coordinator.failure

    def _attach_dashboard(self, url: Callable[[bool], str]) -> None:
        """``url(signed_in)``: the job's dashboard page, with the control token when signed in."""
        self._dashboard = url

    def get_dashboard_url(self, signed_in: bool = False) -> str | None:
        """The job's page on the dashboard its process serves (the control endpoint,
        docs/control.md), None when it is not served (the job has ended: ``flowpoint ui`` shows
        ended jobs). ``signed_in``: the link with the installation's control token, which signs
        a browser in (as ``flowpoint list`` prints it): for the job's owner only, never for a
        log or a shared document."""
        if self._dashboard is None or self.is_done():
            return None
        return self._dashboard(signed_in)

    def get_metrics(self) -> dict[str, Any]:
        """The job's metrics so far (see ``JobExecutionResult.get_metrics``)."""
        return dict(self._coordinator.metrics)

    def metric_store(self) -> Any:
        """Per operator and parallel instance: totals, rates, gauges, busy and backpressured
        time (:class:`flowpoint.metrics.store.MetricStore`; what the REST API and Prometheus show)."""
        return self._coordinator.metric_store

    def get_current_watermark(self) -> int | None:
        """The job's watermark now (the minimum over its active channels), None before any."""
        return self._coordinator.current_watermark()

    def get_checkpoint_stats(self) -> list:
        """Checkpoints triggered so far (:class:`~flowpoint.driver.checkpoint_coordinator.CheckpointStats`)."""
        return self._coordinator.checkpoint_stats()

    def is_done(self) -> bool:
        return self._coordinator.done.is_set()

    def wait_until_done(self, timeout: float | None = None) -> bool:
        """Block until the job ends, at most ``timeout`` seconds; True when it ended. Unlike
        :meth:`wait`, a failed or cancelled job does not raise."""
        done = self._coordinator.done.wait(timeout)
        if done:
            self._show_final_status()
        return done

    def _show_final_status(self) -> None:
        """In a notebook: the job's display shows its final state before the waiting cell ends."""
        display = self.status_display
        if display is not None:
            display.finish()

    def progress(self) -> JobProgress:
        """Where the job stands now: epoch, records read, restarts, source splits, ..."""
        return self._coordinator.view()

    def get_epoch_stats(self) -> list[tuple[int, int, float]]:
        """The last 1,000 epochs so far: ``(epoch, records read, seconds)``."""
        return list(self._coordinator.epoch_history)

    # -- what the REST API and the dashboard show (read-only) -----------------------------------

    def get_plan(self) -> Any:
        """The job's vertices (chains of operators), operators and edges
        (:class:`flowpoint.driver.plan_view.PlanView`)."""
        return self._coordinator.plan

    def get_end_time_ms(self) -> int | None:
        """When the job ended (wall-clock ms), None while it runs."""
        return self._coordinator.ended_ms if self._coordinator.done.is_set() else None

    def get_runtime(self) -> str:
        """``"epoch"`` or ``"continuous"`` (``execution.runtime``; a BATCH job runs in epochs)."""
        return "continuous" if self._coordinator.continuous else "epoch"

    def get_checkpoint_settings(self) -> Any:
        """The job's resolved checkpoint settings (a copy), None until the job runs."""
        import dataclasses

        settings = self._coordinator.settings
        return dataclasses.replace(settings) if settings is not None else None

    def get_savepoint_stats(self) -> list:
        """Savepoints taken so far, completed and failed, as checkpoint stats whose ``kind`` is
        ``savepoint`` or ``stop`` (a stop-with-savepoint's)."""
        return self._coordinator.savepoint_stats()

    def get_exception_history(self) -> list:
        """The job's failures, oldest first (:class:`flowpoint.driver.history.FailureRecord`)."""
        return self._coordinator.exception_history()

    def get_restore_history(self) -> list:
        """Checkpoints and savepoints the job restored, oldest first (``RestoreRecord``)."""
        return self._coordinator.restore_history()

    def get_spark_jobs(self) -> list[tuple[int, tuple[int, ...]]]:
        """``(epoch, its Spark job ids)`` of the recent epochs; empty on the continuous runtime."""
        return self._coordinator.spark_jobs()

    def get_spark_ui_url(self) -> str | None:
        """The address of Spark's web UI for this job's session, None when it is off."""
        return self._coordinator.adapter.ui_url()

    def trigger_savepoint(self, target_directory: str | None = None, native: bool = False) -> str:
        """Take a savepoint at the next epoch boundary and return its directory
        (``<target>/savepoint-<job-id[:6]>-<12 hex>``) once its ``_metadata`` is written.
        ``target_directory`` None: ``state.savepoints.dir`` (``env.set_default_savepoint_directory``).
        ``native``: in the state backend's own format (Flink's NATIVE): a full checkpoint's
        files copied into the savepoint directory (needs checkpointing enabled)."""
        if native:
            return self._native_savepoint(target_directory)
        return self._coordinator.savepoint(target_directory, stop=False, drain=False)

    def _native_savepoint(self, target_directory: str | None, attempts: int = 3) -> str:
        c = self._coordinator
        target = resolve_target(target_directory, c.config)
        for attempt in range(attempts):
            _, path = self.trigger_checkpoint(full=True)
            try:
                return native_savepoint(path, target, c.job_id, c._savepoints.files.location().options, c._savepoints.keyring)
            except (FileNotFoundError, CheckpointError):
                # retention removed the checkpoint while its files were copied: take another
                if attempt == attempts - 1:
                    raise
        raise AssertionError  # pragma: no cover - the loop returns or raises

    def trigger_checkpoint(self, full: bool = False, timeout: float | None = None) -> tuple[int, str]:
        """Trigger a checkpoint now (the next epoch boundary; the continuous runtime injects a
        barrier at once) and wait for it: its id and path. ``full``: it references no file of an
        earlier (incremental) checkpoint. CheckpointError when checkpointing is not enabled or
        the checkpoint fails."""
        c = self._coordinator
        if not c.settings.enabled:
            msg = f"cannot trigger a checkpoint of job {c.job_id} ({c.job_name!r}): checkpointing is not enabled (execution.checkpointing.interval)"
            raise CheckpointError(msg)
        deadline = None if timeout is None else time.monotonic() + timeout
        while c.checkpoints is None and not c.done.is_set():  # the job is still starting
            c.done.wait(0.1)
        cp = c.checkpoints
        if cp is None:
            msg = f"job {c.job_id} ({c.job_name!r}) ended before the checkpoint was triggered"
            raise CheckpointError(msg)
        request = cp.request_now(full)
        while deadline is None or time.monotonic() < deadline:
            cid = request.checkpoint_id
            stats = next((s for s in reversed(cp.history) if s.checkpoint_id == cid), None) if cid is not None else None
            if stats is not None and stats.status == "COMPLETED":
                return cid, str(stats.path or cp.store.job_dir_uri())
            if stats is not None and stats.status == "FAILED":
                msg = f"checkpoint {cid} of job {c.job_id} failed: {stats.failure_reason}"
                raise CheckpointError(msg)
            if c.done.is_set():
                msg = f"job {c.job_id} ({c.job_name!r}) ended ({c.status.value}) before the checkpoint completed"
                raise CheckpointError(msg)
            c.done.wait(0.1)
        msg = f"the checkpoint of job {c.job_id} did not complete within {timeout} s"
        raise CheckpointError(msg)

    def stop_with_savepoint(self, target_directory: str | bool | None = None, drain: bool | str | None = False,
                            *, advance_to_end_of_event_time: bool | None = None, savepoint_directory: str | None = None) -> str:
        """Take a savepoint at the next epoch boundary, then end the job (status FINISHED).
        ``drain=True`` first sends a final +infinity watermark so every window and event-time
        timer fires before the savepoint. Returns the savepoint directory once it is written;
        the job ends right after (``wait_until_done()`` waits for that).

        PyFlink's form works too: ``stop_with_savepoint(advance_to_end_of_event_time,
        savepoint_directory)`` (a bool first: the drain flag, then the directory), and those
        keyword names."""
        if isinstance(target_directory, bool):  # PyFlink's order: (advance_to_end_of_event_time, savepoint_directory)
            target_directory, drain = (drain if isinstance(drain, str) else None), target_directory
        if advance_to_end_of_event_time is not None:
            drain = advance_to_end_of_event_time
        if savepoint_directory is not None:
            target_directory = savepoint_directory
        if not isinstance(drain, bool) or not (target_directory is None or isinstance(target_directory, str)):
            msg = (
                f"stop_with_savepoint({target_directory!r}, {drain!r}): give the savepoint directory (a str or None) "
                "and drain (a bool): stop_with_savepoint('/path', drain=False), or PyFlink's stop_with_savepoint(False, '/path')"
            )
            raise ConfigurationError(msg)
        return self._coordinator.savepoint(target_directory, stop=True, drain=drain)

    def wait(self, timeout: float | None = None) -> JobExecutionResult:
        """Block until the job ends; returns its result or raises why it failed."""
        if not self._coordinator.done.wait(timeout):
            msg = f"job {self.job_id} still running after {timeout} s"
            raise TimeoutError(msg)
        self._show_final_status()
        c = self._coordinator
        if c.status is JobStatus.CANCELED:
            msg = f"job {c.job_name!r} ({c.job_id}) was cancelled"
            raise JobCancelledError(msg)
        if c.failure is not None:
            if isinstance(c.failure, FlowpointError):
                raise c.failure
            msg = f"job {c.job_name!r} ({c.job_id}) failed: {c.failure!r}"
            error = JobExecutionError(msg)
            error.log_path = getattr(c.failure, "log_path", None)
            raise error from c.failure
        return c.result()

    get_job_execution_result = wait

    def __repr__(self) -> str:
        # no token: a repr may end up in a log
        url = self.get_dashboard_url()
        return (
            f"JobClient(job_id={self.job_id!r}, name={self._coordinator.job_name!r}, status={self.get_job_status().value}"
            + (f", dashboard={url!r}" if url else "") + ")"
        )

    def _repr_html_(self) -> str:
        """In a notebook, ``job_client`` alone in a cell shows the job's status and dashboard link
        (flowpoint/control/notebook.py, which the launcher attaches as ``html_status``)."""
        if self.html_status is None:
            return f"<pre>{html.escape(repr(self))}</pre>"
        return self.html_status(self)
