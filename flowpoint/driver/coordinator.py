"""The coordinator: one job's driver (docs/architecture.md, sections 4 and 4b).

It builds the services every loop shares (driver/splits.py, committed.py, savepoints.py,
restarts.py, working_files.py, progress.py and the checkpoint coordinator of checkpoint_coordinator.py),
picks the loop that runs the job (:meth:`Coordinator._loop_for`), and runs it in the job's
thread; other threads cancel the job, ask for savepoints and read its progress through a
read-only view (:meth:`Coordinator.view`). It never touches records.
"""

from __future__ import annotations

import atexit
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

from flowpoint.api.storage_options import storage_options
from flowpoint.checkpoint.signing import Keyring
from flowpoint.driver import failure_report
from flowpoint.driver.checkpoint_coordinator import CheckpointCoordinator
from flowpoint.driver.committed import CommittedState
from flowpoint.driver.continuous_loop import ContinuousLoop
from flowpoint.driver.epoch_loop import EpochLoop
from flowpoint.driver.history import failure_record
from flowpoint.driver.job_status import (
    JobExecutionResult,
    JobProgress,
    JobStatus,
    SplitProgress,
    new_job_id,
)
from flowpoint.driver.loop import LoopServices
from flowpoint.driver.plan_view import plan_view
from flowpoint.driver.progress import Progress, on_terminal, total_records
from flowpoint.driver.restarts import RepeatedFailures, RestartManager
from flowpoint.driver.resume import job_fingerprint
from flowpoint.driver.runtime_choice import choose_runtime, say_checkpoint_mode
from flowpoint.driver.savepoints import SavepointService, state_partitions
from flowpoint.driver.splits import SplitPlanner
from flowpoint.driver.working_files import WorkingFiles
from flowpoint.errors import FlowpointError, JobExecutionError
from flowpoint.spark.adapter_choice import adapter_for
from flowpoint.state.key_identity import KeyedStateMap, keyed_state_maps
from flowpoint.tasks.plan import build_stage_plans

if TYPE_CHECKING:
    from flowpoint.driver.description import JobDescription
    from flowpoint.driver.restore import RestoredJob
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")

class Coordinator:
    def __init__(self, description: JobDescription, spark: Any):
        graph = description.graph
        self.graph = graph
        self.spark = spark
        self.adapter = adapter_for(spark)  # classic or Spark Connect (flowpoint/spark/adapter.py)
        self.config = description.config
        self.description = description
        self.job_id = new_job_id()
        self.job_name = graph.job_name
        self.fingerprint = job_fingerprint(graph)  # with the name, its identity for --resume
        self.plan = plan_view(graph)  # vertices and edges as the REST API shows them
        self.status = JobStatus.CREATED
        self.failure: BaseException | None = None
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self.checkpoints: CheckpointCoordinator | None = None
        self.settings: Any = None  # CheckpointSettings, resolved when the job starts running
        self.ended_ms: int | None = None  # wall-clock time the job ended
        self._started = 0.0
        self._ended = 0.0
        self._launcher: Any = None
        # the services every loop shares
        self._progress = Progress(self.config)
        self._files = WorkingFiles(self.config, self.job_id, spark)
        self._state = CommittedState(graph)
        self._splits = SplitPlanner(graph)
        self._savepoints = SavepointService(
            graph, spark, self.config, self.job_id, self.job_name, self._state, self._splits, self._files, self._progress,
        )
        self._restarts = RestartManager(
            graph, self.config, self.job_id, self._files, self._progress, self._cancel,
            restarting=lambda: self._set_status(JobStatus.RESTARTING), running=lambda: self._set_status(JobStatus.RUNNING),
        )
        self._loop: Any = None  # EpochLoop or ContinuousLoop
        self.runtime = "epoch" if graph.batch else str(self.config.get("execution.runtime")).lower()  # decided in run()
        _warn_missing_uids(graph)

    def _set_status(self, status: JobStatus) -> None:
        self.status = status

    # -- the read-only view --------------------------------------------------------------------

    @property
    def epoch(self) -> int:
        return self._loop.unit if self._loop is not None else 0

    @property
    def records_read(self) -> int:
        return self._state.records_read

    @property
    def restarts(self) -> int:
        return self._restarts.restarts

    @property
    def resumed_from(self) -> tuple[str, int] | None:
        """(job id, checkpoint id) this run restored."""
        return self._restarts.resumed_from

    @property
    def metrics(self) -> dict[str, Any]:
        """``"<operator name>.<metric>"`` totals from the tasks' reports (records in and out, the
        user's counters and meters), the committed counts (exact: late records dropped, ...), and
        the job's own (restarts, checkpoints)."""
        out: dict[str, Any] = self._state.live.flat()
        out.update(self._state.metrics)
        stats = self.checkpoint_stats()
        done = [s for s in stats if s.status == "COMPLETED"]
        out["numRestarts"] = self.restarts
        out["numberOfCompletedCheckpoints"] = len(done)
        out["numberOfFailedCheckpoints"] = sum(1 for s in stats if s.status == "FAILED")
        out["numberOfInProgressCheckpoints"] = sum(1 for s in stats if s.status == "IN_PROGRESS")
        if done:
            out["lastCheckpointDuration"] = int(done[-1].end_to_end_ms or done[-1].duration_ms)
            out["lastCheckpointSize"] = done[-1].state_size
        return out

    @property
    def metric_store(self) -> Any:
        """The tasks' metrics as they arrive (flowpoint/metrics/store.py; read-only use)."""
        return self._state.live

    @property
    def epoch_history(self) -> list[tuple[int, int, float]]:
        return self._progress.history

    def view(self) -> JobProgress:
        splits = tuple(
            SplitProgress(st.node.uid, st.index, st.split.split_id, st.position, st.finished) for st in self._splits.states()
        )
        endpoints = tuple(getattr(self._loop, "endpoints", lambda: ())())
        return JobProgress(
            self.job_id, self.job_name, self.status, self.epoch, self.records_read, self.restarts, splits,
            self.resumed_from, self.fingerprint, endpoints, self.runtime,
        )

    def current_watermark(self) -> int | None:
        """The lowest watermark over the job's channels (None without event time)."""
        return self._state.current_watermark()

    def checkpoint_stats(self) -> list:
        return list(self.checkpoints.history) if self.checkpoints is not None else []

    def savepoint_stats(self) -> list:
        return list(self._savepoints.history)

    def exception_history(self) -> list:
        """The job's failures, oldest first (driver/history.py), the one that failed the job
        included, also when it came before the restart loop (e.g. a restore that failed)."""
        history = self._restarts.history
        records = history.failures()
        failure = self.failure
        if failure is not None and not history.recorded(failure):
            records.append(failure_record(failure, restarted=False, timestamp_ms=self.ended_ms))
        return records

    def restore_history(self) -> list:
        return self._restarts.history.restores()

    def spark_jobs(self) -> list[tuple[int, tuple[int, ...]]]:
        """``(epoch, ids of the Spark jobs it ran)`` of the recent epochs (epoch runtime)."""
        return list(getattr(self._launcher, "spark_jobs", ()))

    def result(self) -> JobExecutionResult:
        return JobExecutionResult(
            self.job_id, self.job_name, int((self._ended - self._started) * 1000), self.epoch, self.records_read, self
        )

    # -- control -------------------------------------------------------------------------------

    def cancel(self) -> None:
        if self.done.is_set():
            return
        self._cancel.set()
        self.status = JobStatus.CANCELLING
        launcher = self._launcher
        if launcher is not None and not self.continuous:  # a continuous loop sees the flag within milliseconds
            try:
                self.adapter.cancel_job_group(self.job_id)
            except Exception:  # noqa: BLE001 - the job may already be between epochs
                pass

    def savepoint(self, target_directory: str | None, stop: bool = False, drain: bool = False) -> str:
        """Ask for a savepoint at the next epoch boundary and wait for it; returns its directory."""
        return self._savepoints.request(target_directory, stop, drain, self._savepoint_refusal).result()

    def _savepoint_refusal(self) -> str | None:
        if self.done.is_set() or self.status.is_globally_terminal_state():
            return f"cannot take a savepoint of job {self.job_name!r} ({self.job_id}): it is {self.status.value}"
        return None

    # -- running -------------------------------------------------------------------------------

    @property
    def continuous(self) -> bool:
        """The job runs on the continuous runtime (decided when it starts: :func:`~flowpoint.driver.runtime_choice.choose_runtime`)."""
        return self.runtime == "continuous"

    def _check_cancelled(self) -> None:
        if self._cancel.is_set():
            msg = f"job {self.job_id} was cancelled before it started"
            raise JobExecutionError(msg)

    def _loop_for(self, restore: RestoredJob | None, plans: dict) -> Any:
        """The loop that runs the job, as ``execution.runtime`` chooses: epochs or continuous."""
        services = LoopServices(self._state, self._splits, self._savepoints, self._restarts, self.checkpoints, self._files,
                                self._progress, self._launcher, self._cancel)
        if self.continuous:

            loop: Any = ContinuousLoop(self.graph, self.config, services, plans=plans, adapter=self.adapter, job_name=self.job_name, settings=self.settings)
        else:
            loop = EpochLoop(self.graph, self.config, services)
        loop.start(restore)
        return loop

    def run(self) -> None:
        self._started = time.monotonic()
        try:
            d = self.description
            if d.settings_error is not None:
                raise d.settings_error
            params = d.parameters
            self.settings = d.checkpoints
            backoff = d.restart_backoff
            self._restarts.repeats = RepeatedFailures(*d.repeated_failure)
            for node in self.graph.sinks():
                node.t.sink.on_job_config(self.config)
                node.t.sink.on_job_start(self.settings.interval_ms if self.settings.enabled else None)
            self._files.open(self.settings, storage_options(self.config))
            restore = self._restarts.initial_restore(self.settings, backoff)
            plans = build_stage_plans(self.graph, self.job_id, params)
            self.runtime = choose_runtime(self.graph, self.config, self.adapter, self.job_name, self._progress, self._check_cancelled)
            self._progress.unit = "segment" if self.continuous else "epoch"
            if self.continuous:
                self._launcher = self.adapter.continuous_launcher(self.job_id, f"flowpoint {self.job_name} (continuous)")
            else:
                self._launcher = self.adapter.epoch_launcher(self.graph, plans, self.job_id)
            self.adapter.start_job_group(self.job_id, f"flowpoint job {self.job_name}")
            atexit.register(self._files.remove_durable_state)
            first = restore.checkpoint_id + 1 if restore else 1
            if self.settings.enabled:
                self.checkpoints = CheckpointCoordinator(
                    self.settings, self.graph, self.job_id, self.job_name, first, self._files.storage_options, Keyring.from_config(self.config),
                )
                self.checkpoints.declared = self._state.declared_states
                self.checkpoints.on_completed = self._progress.checkpoint_completed
            if self.checkpoints is not None:
                self.checkpoints.runtime = self.runtime
            self._savepoints.start(self.settings.backend, self.checkpoints, first, self.runtime)
            self._restarts.checkpoints = self.checkpoints
            self._loop = self._loop_for(restore, plans)
            self.status = JobStatus.RUNNING
            runtime = "continuously" if self.continuous else "in epochs"
            self._progress.say(f"job {self.job_name!r} ({self.job_id}) running {runtime} on Spark {self.adapter.describe()}")
            say_checkpoint_mode(self.continuous, self.settings, self._progress)
            self._progress.start(total_records(self.graph), self.records_read, on_terminal(self.graph))
            self._loop.run()
            if self.checkpoints is not None and not self._cancel.is_set():
                self.checkpoints.poll(wait=True)
            self.status = JobStatus.CANCELED if self._cancel.is_set() else JobStatus.FINISHED
        except BaseException as e:  # noqa: BLE001 - reported through the client
            if self._cancel.is_set():
                self.status = JobStatus.CANCELED
            else:
                self.status = JobStatus.FAILED
                self.failure = e
                if not isinstance(e, FlowpointError):
                    log.exception("job %s failed", self.job_id)
        finally:
            self._end()

    def _end(self) -> None:
        self._ended = time.monotonic()
        self.ended_ms = int(time.time() * 1000)
        if self.checkpoints is not None:
            try:
                self.checkpoints.abort_pending(f"job {self.status.value.lower()}")
            except Exception:  # noqa: BLE001
                log.exception("aborting the checkpoint in flight of job %s failed", self.job_id)
        # the sinks first: a sink that cannot make the last output final turns FINISHED into
        # FAILED, and a FAILED job keeps its checkpoints (the error says to restore one), so
        # the checkpoints are kept or discarded only for the status the job ends with
        self.status, self.failure = end_sinks(self.graph, self.status, self.failure)
        if self.checkpoints is not None:
            try:
                self.checkpoints.shutdown(self.status.value)
            except Exception:  # noqa: BLE001
                log.exception("checkpoint shutdown of job %s failed", self.job_id)
        if self._launcher is not None:
            self._launcher.close()
            by_slots = self._loop is not None and self._loop.tasks_removed_local_state and not self._files.state_jobs
            self._files.remove_local_state(executors=not by_slots)
            old = self._restarts.predecessor
            if self._files.remove_leftovers_of(old):
                self._progress.say(f"removed the working files job {old} left behind (its process ended without removing them)")
            if self.checkpoints is not None:
                try:
                    self.checkpoints.remove_incomplete()
                except Exception:  # noqa: BLE001 - litter, not state: the job's outcome stands
                    log.exception("could not remove incomplete checkpoints of job %s", self.job_id)
        self._files.release()  # the lock file stays until the durable files go at exit
        seconds = (self._ended or time.monotonic()) - self._started
        if self.status is JobStatus.FAILED and self.failure is not None:
            failure_report.report(self.job_id, self.job_name, self.status.value, self.failure)
        self._progress.ended(self.job_name, self.job_id, self.status.value, seconds, self.records_read)
        self._savepoints.close(f"the job is {self.status.value}", self.done.set)

    # -- reading state after the job -----------------------------------------------------------

    def read_keyed_state(self, uid: str, state_name: str | None) -> dict:
        """Committed keyed state of one operator, read by Spark tasks where it lives."""
        self.graph.node_by_uid(uid)  # an unknown uid is refused with the uids there are
        self._files.state_jobs += 1
        merged = self.adapter.read_keyed_state(self._files.location(), state_partitions(self.graph, self._state, uid), uid)
        if self.done.is_set():
            self._files.remove_local_state()  # the read rebuilt it on executors; the job is over
        maps = keyed_state_maps(merged)
        if state_name is None:
            return maps
        return maps.get(state_name, KeyedStateMap())


def end_sinks(graph: JobGraph, status: JobStatus, failure: BaseException | None) -> tuple[JobStatus, BaseException | None]:
    """Tell every sink the job ended with ``status``; returns the job's status and failure
    after that: a FINISHED job whose sink failed at its end is FAILED with the sink's error."""
    for node in graph.sinks():
        try:
            node.t.sink.on_job_end(status.value)
        except Exception as e:  # noqa: BLE001
            if status is JobStatus.FINISHED:
                # a sink that could not make the job's last output final (a transaction
                # that did not commit, a part file not finished): the job did not finish
                # what it promised, and keeps its checkpoints to be restored
                if not isinstance(e, FlowpointError):
                    log.exception("sink %s failed at job end", node.name)
                    error = JobExecutionError(
                        f"sink {node.name!r} could not make the job's last output final: {type(e).__name__}: {e}. "
                        "The job failed and keeps its checkpoints: fix the cause, then restore the latest one "
                        "(`flowpoint run --resume`, or -s <chk-n>)"
                    )
                    error.__cause__ = e
                    e = error
                status, failure = JobStatus.FAILED, e
            else:
                log.exception("sink %s failed at job end", node.name)
    return status, failure


def _warn_missing_uids(graph: JobGraph) -> None:
    """Stateful operators should have an explicit uid: a generated one changes with the graph.
    One line for the job, naming them all."""
    missing = [repr(n.name) for n in graph.nodes.values() if (n.keyed or n.kind == "source") and not n.t.uid]
    if missing:
        log.warning(
            "no uid on %s: state is saved under generated uids, which change when the job graph changes; "
            "set .uid(...) on them so savepoints and checkpoints restore after changes", ", ".join(missing),
        )
