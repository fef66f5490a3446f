"""The restart manager (driver side): where a job starts from, and restarts after failures.

When the job starts it restores from its restore point (``-s`` or ``--resume``'s choice), if
any. After a failure that a restart can get past (spark/failures.py), it waits as the restart
strategy says, then restores the latest completed checkpoint, else the restore point, else the
job starts from the beginning (Flink's full failover). The restart strategy decides, whatever the
exception's class (as in Flink). A user function that fails on the same record the same way
after a restart is counted and named as such; it fails the job at once only where the user chose
so (``restart-strategy.repeated-failure.fail-fast``; by default, without a restart strategy set,
for Python's data errors only). The loop it restarts resets and restores its own state
(:class:`RestartableLoop`), so every loop can use it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Protocol

from flowpoint.checkpoint.directory import unit_name
from flowpoint.checkpoint.signing import Keyring
from flowpoint.clock import now_ms
from flowpoint.driver.history import JobHistory
from flowpoint.driver.restore import RestoredJob, plan_restore
from flowpoint.driver.restore_point import restore_point
from flowpoint.spark.failures import failure_identity, is_recoverable

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from flowpoint.checkpoint.metadata import CheckpointMetadata
    from flowpoint.driver.checkpoint_coordinator import CheckpointCoordinator
    from flowpoint.driver.progress import Progress
    from flowpoint.driver.working_files import WorkingFiles
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")


def restartable(error: BaseException) -> bool:
    """Failures a restart can get past. A non-recoverable error (a wrong job, configuration, key,
    state use or value; a missing state file) fails the job at once with its message."""
    return is_recoverable(error)


def ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


class RepeatedFailures:
    """Counts a failure that recurs on the same record the same way (``failures.failure_identity``)
    across consecutive restarts, and decides whether the user chose to fail fast on it."""

    def __init__(self, policy: str = "data-errors", chosen: bool = False):
        self.policy = policy  # none | data-errors | all (restart-strategy.repeated-failure.fail-fast)
        self.chosen = chosen  # set by the user (else the default for the job's restart strategy)
        self._last: tuple | None = None
        self._count = 0

    def count(self, error: BaseException) -> int:
        """How many failures in a row, this one included, were this one (1: a new failure)."""
        identity = failure_identity(error)
        self._count = self._count + 1 if identity is not None and identity == self._last else 1
        self._last = identity
        return self._count

    def fails_fast(self, error: BaseException, count: int) -> bool:
        if count < 2:
            return False
        return self.policy == "all" or (self.policy == "data-errors" and bool(getattr(error, "data_error", False)))

    def explain(self) -> str:
        why = "" if self.chosen else " (the default when no restart strategy is set)"
        return (
            f"restart-strategy.repeated-failure.fail-fast is {self.policy}{why}; set it to none "
            f"(-Drestart-strategy.repeated-failure.fail-fast=none) to restart as the restart strategy allows"
        )


class RestartableLoop(Protocol):
    def attempt(self) -> None:
        """Run until the job's input ends or it stops; a failure raises."""

    def reset(self) -> None:
        """Forget the failed run: its committed state, positions and counters."""

    def restore(self, restore: RestoredJob | None) -> None:
        """Start the next run from ``restore`` (None: from the beginning)."""

    def position(self) -> str:
        """Where the failed run was, for the progress line (e.g. "epoch 7")."""


class RestartManager:
    def __init__(
        self, graph: JobGraph, config: Any, job_id: str, files: WorkingFiles, progress: Progress,
        cancel: threading.Event, restarting: Callable[[], None], running: Callable[[], None],
    ):
        self.graph = graph
        self.config = config
        self.keyring = Keyring.from_config(config)  # who may have written what a restore reads (checkpoint/signing.py)
        self.job_id = job_id
        self.files = files
        self.progress = progress
        self.cancel = cancel
        self.restarting = restarting  # the job's status becomes RESTARTING
        self.running = running  # ... and RUNNING again
        self.settings: Any = None  # CheckpointSettings
        self.backoff: Any = None  # RestartBackoff
        self.checkpoints: CheckpointCoordinator | None = None
        self.resumed_from: tuple[str, int] | None = None  # (job id, checkpoint id) this run restored
        self.predecessor: str | None = None  # the job whose checkpoint this run restored
        self._restore_point: tuple[Any, str, bool] | None = None  # (metadata, job dir, allow non-restored)
        self.repeats = RepeatedFailures()  # the coordinator sets the job's policy
        self.history = JobHistory()  # failures and restores, for the REST API

    @property
    def restarts(self) -> int:
        return self.files.run

    @property
    def allow_non_restored(self) -> bool:
        return bool(self.config.get("execution.savepoint.ignore-unclaimed-state"))

    def initial_restore(self, settings: Any, backoff: Any) -> RestoredJob | None:
        """What the job starts from: ``-s``, or ``--resume``'s choice, or None (the beginning)."""
        self.settings, self.backoff = settings, backoff
        allow = self.allow_non_restored

        def plan(uri: str, meta: Any) -> RestoredJob:
            return plan_restore(meta, uri, self.graph, settings.backend, allow, self.files.storage_options, self.keyring)

        found = restore_point(self.config, settings, self.graph, plan)
        if found is None:
            return None
        job_dir_uri, meta, restore = found.job_dir_uri, found.meta, found.restore
        self.resumed_from = (meta.job_id, meta.checkpoint_id)  # recorded in the job registry
        self._restore_point = (meta, job_dir_uri, allow)  # a failure before the first checkpoint goes back here
        self.predecessor = meta.job_id if meta.job_id != self.job_id else None
        why = f": {found.why}" if found.why else ""
        self.progress.say(f"restoring {meta.kind} {meta.checkpoint_id} ({unit_name(meta.stats.get('runtime'))} {meta.epoch}) of job {meta.job_id} from {job_dir_uri}{why}")
        self.history.restored(meta.checkpoint_id, meta.kind == "savepoint", job_dir_uri)
        for uid in restore.dropped_uids:
            log.warning("dropping state of uid %r: the job has no such stateful operator (--allow-non-restored-state)", uid)
        return restore

    def checkpoint_completed(self) -> None:
        """A checkpoint completed: the restart strategy's failure-rate window hears of it."""
        self.backoff.on_success(now_ms())

    def run(self, loop: RestartableLoop) -> None:
        """``loop.attempt()`` until it returns; after a failure a restart gets past, restart it
        from the latest completed checkpoint (else the restore point, else the beginning) as
        long as the restart strategy allows. Raises the failure that ends the job."""
        while True:
            try:
                loop.attempt()
                return
            except BaseException as e:
                if self.cancel.is_set():
                    raise
                if not restartable(e):
                    self.history.failed(e, restarted=False)
                    raise
                repeat = self.repeats.count(e)
                if self.repeats.fails_fast(e, repeat):
                    self.history.failed(e, restarted=False, repeat=repeat)
                    self.progress.say(
                        f"{loop.position()} failed again on the same record the same way ({ordinal(repeat)} time in a row). "
                        f"The job fails without restarting: {self.repeats.explain()}"
                    )
                    raise
                delay = self.backoff.on_failure(now_ms())
                if delay is None:
                    self.history.failed(e, restarted=False, repeat=repeat)
                    if self.restarts or self.settings.enabled:
                        again = f" (the {ordinal(repeat)} failure in a row on the same record)" if repeat > 1 else ""
                        log.error("job %s failed%s and its restart strategy %s gives up", self.job_id, again, self.backoff.describe())
                    raise
                self.history.failed(e, restarted=True, repeat=repeat)
                self._restart(loop, e, delay, repeat)
                if self.cancel.is_set():
                    return

    def _restart(self, loop: RestartableLoop, error: BaseException, delay_ms: int, repeat: int = 1) -> None:
        latest = None
        if self.checkpoints is not None:
            self.checkpoints.abort_pending("job failover")
            latest = self.checkpoints.latest()
        if latest is not None:
            origin = f"checkpoint {latest.checkpoint_id} ({self.progress.unit} {latest.epoch})"
        elif self._restore_point is not None:
            origin = f"the {self._restore_point[0].kind} the job was started from ({self._restore_point[1]})"
        else:
            origin = "the beginning (no completed checkpoint)"
        failed = f"failed again on the same record ({ordinal(repeat)} time in a row)" if repeat > 1 else "failed"
        self.progress.say(
            f"{loop.position()} {failed}: {error}. Restarting from {origin} in {delay_ms} ms "
            f"(restart strategy {self.backoff.describe()})"
        )
        self.restarting()
        if self.cancel.wait(delay_ms / 1000):
            return
        self.files.next_run()
        loop.reset()
        loop.restore(self.restore_after_failure(latest))
        if latest is not None and self.checkpoints is not None:
            store = self.checkpoints.store
            self.history.restored(latest.checkpoint_id, False, store.uri(store.chk_dir(latest.checkpoint_id)))
        elif self._restore_point is not None:
            meta = self._restore_point[0]
            self.history.restored(meta.checkpoint_id, meta.kind == "savepoint", self._restore_point[1])
        self.running()

    def restore_after_failure(self, latest: CheckpointMetadata | None) -> RestoredJob | None:
        """What a restart restores: ``latest`` (the latest completed checkpoint), else the
        restore point the job started from, else None (the beginning)."""
        options = self.files.storage_options
        if latest is not None:
            assert self.checkpoints is not None
            return plan_restore(latest, self.checkpoints.store.job_dir_uri(), self.graph, self.settings.backend, options=options, keyring=self.keyring)
        if self._restore_point is not None:
            meta, job_dir_uri, allow = self._restore_point
            return plan_restore(meta, job_dir_uri, self.graph, self.settings.backend, allow, options, self.keyring)
        return None
