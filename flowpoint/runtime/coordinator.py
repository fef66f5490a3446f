"""The coordinator: runs a job's epoch loop in the driver (DESIGN sections 3 and 4).

For every epoch it plans how far each source split advances, runs the epoch on Spark, and
commits it: only when every task of the epoch succeeded do the new split positions, the tasks'
state files and the sinks' output become the base of the next epoch. It never touches records.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import sys
import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowpoint.errors import CheckpointError, FlowpointError, JobExecutionError
from flowpoint.runtime.checkpointing import CheckpointCoordinator, apply_declared, now_ms
from flowpoint.runtime.job import (
    JobExecutionResult,
    JobProgress,
    JobStatus,
    SplitProgress,
    new_job_id,
)
from flowpoint.runtime.restore import RestoredJob, plan_restore, split_position
from flowpoint.runtime.resume import job_fingerprint, restore_point
from flowpoint.state import durable
from flowpoint.state.key_identity import KeyedStateMap, keyed_state_maps
from flowpoint.state.keygroups import key_group_range_for_operator
from flowpoint.state.working import (
    CommittedChain,
    JobLock,
    claim_leftovers,
    ensure_working_dir,
    lock_path,
    remove_job_dir,
    resolve_working_dir,
)
from flowpoint.tasks.protocol import EpochSpec, StateLocation, TaskAck, TaskSlice

if TYPE_CHECKING:
    from flowpoint.api.environment import StreamExecutionEnvironment
    from flowpoint.connectors.source import Source, SourceSplit
    from flowpoint.graph.jobgraph import JobGraph, Node

log = logging.getLogger("flowpoint")


@dataclass
class SavepointRequest:
    """A savepoint asked for from another thread, taken by the coordinator between two epochs."""

    target: str
    stop: bool
    drain: bool
    future: Future


@dataclass
class SplitState:
    node: Node
    index: int  # position among the source's splits: the order of its records
    split: SourceSplit
    position: Any
    finished: bool = False


def restartable(error: BaseException) -> bool:
    """Failures a restart can get past. A non-recoverable error (a wrong job, configuration, key,
    state use or value; a missing state file) fails the job at once with its message."""
    from flowpoint.runtime.failures import is_recoverable

    return is_recoverable(error)


class Coordinator:
    def __init__(self, graph: JobGraph, env: StreamExecutionEnvironment, spark: Any):
        self.graph = graph
        self.spark = spark
        self.config = env.get_configuration()
        self.env = env
        self.job_id = new_job_id()
        self.job_name = graph.job_name
        self.fingerprint = job_fingerprint(graph)  # with the name, its identity for --resume
        self.resumed_from: tuple[str, int] | None = None  # (job id, checkpoint id) this run restored
        self.status = JobStatus.CREATED
        self.failure: BaseException | None = None
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self.epoch = 0
        self.restarts = 0
        self.checkpoints: CheckpointCoordinator | None = None
        self._checkpointed_epoch = 0
        self.records_read = 0
        self.chains: dict[tuple[int, int], CommittedChain] = {}
        self.splits: dict[int, list[SplitState]] = {}
        # state.working.dir, else a per-user default that each process (driver, executor) finds
        # itself; created private (0700) and checked when the job starts (state/working.py)
        self._working_configured = self.config.get("state.working.dir") or None
        self.working_dir = resolve_working_dir(self._working_configured)
        self._lock: JobLock | None = None
        self._predecessor: str | None = None  # the job whose checkpoint this run restored
        self._started = 0.0
        self._ended = 0.0
        self._executor: Any = None
        self._last_progress = 0.0
        self.epoch_history: list[tuple[int, int, float]] = []  # (epoch, records read, seconds)
        # event time (DESIGN 8): every watermark channel's committed mark, generator states, metrics
        self.watermarks: dict[str, tuple[int, bool]] = {}
        self.generators: dict[str, bytes] = {}
        self.operator_state: dict[str, dict] = {}  # "<uid>:<subtask>" -> CheckpointedFunction state
        self.declared_states: dict[str, dict[str, dict]] = {}  # uid -> state name -> {kind, schema} registered in this run
        self._restored_uids: frozenset[str] = frozenset()
        self.metrics: dict[str, int] = {}
        self.storage_options: dict[str, str] = {}
        self.durable_root = ""
        self._time_driven = any(_time_driven(n) for n in graph.nodes.values())
        # savepoints: requests from other threads, ids shared with checkpoints
        self._savepoint_requests: list[SavepointRequest] = []
        self._savepoint_lock = threading.Lock()
        self._next_savepoint_id = 1
        self._stopped = False
        self._restore_point: tuple[Any, str, bool] | None = None
        _warn_missing_uids(graph)

    # -- control -------------------------------------------------------------------------------

    def cancel(self) -> None:
        if self.done.is_set():
            return
        self._cancel.set()
        self.status = JobStatus.CANCELLING
        executor = self._executor
        if executor is not None:
            try:
                executor.sc.cancelJobGroup(self.job_id)
            except Exception:  # noqa: BLE001 - the job may already be between epochs
                pass

    def savepoint(self, target_directory: str | None, stop: bool = False, drain: bool = False) -> str:
        """Ask for a savepoint at the next epoch boundary and wait for it; returns its directory."""
        from flowpoint.checkpoint.savepoint import resolve_target

        target = resolve_target(target_directory, self.config)
        request = SavepointRequest(target, stop, drain, Future())
        with self._savepoint_lock:
            if self.done.is_set() or self.status.is_globally_terminal_state():
                msg = f"cannot take a savepoint of job {self.job_name!r} ({self.job_id}): it is {self.status.value}"
                raise CheckpointError(msg)
            self._savepoint_requests.append(request)
        return request.future.result()

    def _fail_savepoint_requests(self, reason: str) -> None:
        with self._savepoint_lock:
            requests, self._savepoint_requests = self._savepoint_requests, []
        for r in requests:
            if not r.future.done():
                r.future.set_exception(CheckpointError(f"savepoint of job {self.job_name!r} ({self.job_id}) not taken: {reason}"))

    def _take_savepoints(self) -> bool:
        """Between epochs: take the requested savepoints; True if one of them stops the job."""
        with self._savepoint_lock:
            requests, self._savepoint_requests = self._savepoint_requests, []
        stop = False
        for r in requests:
            try:
                if r.stop and r.drain and not stop:
                    self._drain()
                path = self._write_savepoint(r.target)
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                r.future.set_exception(e)
                continue
            stop = stop or r.stop
            r.future.set_result(path)
        return stop

    def _drain(self) -> None:
        """stop --drain: one more epoch in which every source split sends a final +infinity
        watermark (no records), so every window and event-time timer fires."""
        reads: dict[int, list[list]] = {}
        for states in self.splits.values():
            for st in states:
                p = st.node.parallelism
                parts = reads.setdefault(st.node.stage_id, [[] for _ in range(p)])
                parts[st.index % p].append((st.index, st.split, None, True))
        self._run_epoch(reads, {}, last=True)

    def _savepoint_id(self) -> int:
        if self.checkpoints is not None:
            cid = self.checkpoints.next_id
            self.checkpoints.next_id += 1
            self.checkpoints.store.continue_after(cid)
            return cid
        cid = self._next_savepoint_id
        self._next_savepoint_id += 1
        return cid

    def _state_partitions(self, only_uid: str | None = None) -> list:
        """Every stateful (stage, partition) with its committed chain, for a state job."""
        from flowpoint.spark.state_jobs import StatePartition

        items = []
        for stage in self.graph.stages:
            uids = tuple(self.graph.nodes[n].uid for n in stage.nodes if self.graph.nodes[n].keyed)
            if not uids or (only_uid is not None and only_uid not in uids):
                continue
            for p in range(stage.parallelism):
                kgr = key_group_range_for_operator(stage.max_parallelism, stage.parallelism, p)
                chain = self.chains.get((stage.id, p)) or CommittedChain()
                items.append(StatePartition(stage.id, p, chain, uids, stage.max_parallelism, kgr.start, kgr.end))
        return items

    def _write_savepoint(self, target: str) -> str:
        """Every stateful task writes its canonical part (a Spark job over the partitions, run
        where their state is); the driver writes ``_metadata`` from the parts' entries."""
        from flowpoint.checkpoint.savepoint import (
            assemble_operator,
            complete_savepoint,
            create_savepoint_dir,
            discard_incomplete,
        )
        from flowpoint.spark.state_jobs import write_savepoint_parts

        t0 = time.perf_counter()
        trigger_ms = now_ms()
        location = self.location()
        access = create_savepoint_dir(target, self.job_id, location.options)
        try:
            written = write_savepoint_parts(self.spark.sparkContext, location, self._state_partitions(), access.uri())
            by_uid: dict[str, list] = {}
            for uid, sub, states in written:
                by_uid.setdefault(uid, []).append((sub, states))
            operators = []
            for uid, parts in sorted(by_uid.items()):
                node = self.graph.node_by_uid(uid)
                stage = self.graph.stages[node.stage_id]
                op = assemble_operator(uid, node.name, stage.parallelism, stage.max_parallelism, parts)
                if op is not None:
                    apply_declared(op, self.declared_states.get(uid))
                if op is None:  # an operator without state has nothing to restore (and may be removed)
                    for sub, _ in parts:
                        for f in sub.files:
                            access.delete(f.path)
                    continue
                operators.append(op)
            sources = [split_position(st.node, st.index, st.split, st.position, st.finished) for states in self.splits.values() for st in states]
            watermarks = {
                "channels": {c: [wm, idle] for c, (wm, idle) in self.watermarks.items()},
                "generators": dict(self.generators),
                "operator_state": dict(self.operator_state),
            }
            cid = self._savepoint_id()
            path = complete_savepoint(
                access, job_id=self.job_id, job_name=self.job_name, checkpoint_id=cid, epoch=self.epoch,
                backend=self.settings.backend, operators=operators,
                max_parallelism=max((s.max_parallelism for s in self.graph.stages), default=128), trigger_time_ms=trigger_ms,
                sources=sources, sinks={n.uid: n.t.sink.snapshot_driver_state() for n in self.graph.sinks()}, watermarks=watermarks,
                stats={"records_read": self.records_read, "duration_ms": round((time.perf_counter() - t0) * 1000, 3)},
            )
        except BaseException:
            discard_incomplete(access)
            raise
        self._progress(f"savepoint {cid} (epoch {self.epoch}) of job {self.job_id} written to {path}")
        return path

    def view(self) -> JobProgress:
        """Where the job stands, read-only (JobClient.progress)."""
        splits = tuple(
            SplitProgress(st.node.uid, st.index, st.split.split_id, st.position, st.finished)
            for states in list(self.splits.values()) for st in list(states)
        )
        return JobProgress(
            self.job_id, self.job_name, self.status, self.epoch, self.records_read, self.restarts, splits,
            self.resumed_from, self.fingerprint,
        )

    def result(self) -> JobExecutionResult:
        return JobExecutionResult(
            self.job_id, self.job_name, int((self._ended - self._started) * 1000), self.epoch, self.records_read, self
        )

    # -- the epoch loop ------------------------------------------------------------------------

    def run(self) -> None:
        from flowpoint.api.checkpointing import resolve_checkpoint_settings
        from flowpoint.api.restart import resolve_restart_backoff
        from flowpoint.spark.epoch_executor import SparkEpochExecutor
        from flowpoint.tasks.plan import build_stage_plans

        self._started = time.monotonic()
        try:
            spark = self.spark
            params = self.env.get_config().get_global_job_parameters()
            self.settings = resolve_checkpoint_settings(self.env)
            self.backoff = resolve_restart_backoff(self.env, self.settings.enabled)
            for node in self.graph.sinks():
                node.t.sink.on_job_start(self.settings.interval_ms if self.settings.enabled else None)
            from flowpoint.api.storage_options import storage_options

            self.storage_options = storage_options(self.config)
            self.working_dir = ensure_working_dir(self._working_configured)
            self._lock = JobLock(self.working_dir, self.job_id)
            self.durable_root = durable_root(self.config, self.settings, self.job_id, self.working_dir)
            _check_remote_dir(self.config, self.durable_root, self.storage_options)
            _warn_unshared(spark, self.durable_root)
            restore = self._initial_restore()
            plans = build_stage_plans(self.graph, self.job_id, params)
            self._executor = SparkEpochExecutor(spark, self.graph, plans, self.job_id)
            spark.sparkContext.setJobGroup(self.job_id, f"flowpoint job {self.job_name}", interruptOnCancel=True)
            atexit.register(self._remove_durable_state)
            self._next_savepoint_id = restore.checkpoint_id + 1 if restore else 1
            if self.settings.enabled:
                first = restore.checkpoint_id + 1 if restore else 1
                self.checkpoints = CheckpointCoordinator(self.settings, self.graph, self.job_id, self.job_name, first, self.storage_options)
                self.checkpoints.declared = self.declared_states
            self._init_splits()
            if restore is not None:
                self._apply_restore(restore)
            self.status = JobStatus.RUNNING
            self._progress(f"job {self.job_name!r} ({self.job_id}) running on Spark {spark.sparkContext.master}")
            self._run_with_restarts()
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
            self._ended = time.monotonic()
            if self.checkpoints is not None:
                try:
                    self.checkpoints.abort_pending(f"job {self.status.value.lower()}")
                    self.checkpoints.shutdown(self.status.value)
                except Exception:  # noqa: BLE001
                    log.exception("checkpoint shutdown of job %s failed", self.job_id)
            for node in self.graph.sinks():
                try:
                    node.t.sink.on_job_end(self.status.value)
                except Exception as e:  # noqa: BLE001
                    if self.status is JobStatus.FINISHED and isinstance(e, FlowpointError):
                        # a sink that could not make the job's last output final (a transaction
                        # that did not commit): the job did not finish what it promised
                        self.status, self.failure = JobStatus.FAILED, e
                    else:
                        log.exception("sink %s failed at job end", node.name)
            if self._executor is not None:
                self._executor.close()
                self._remove_local_state()
                self._remove_leftovers_of_predecessor()
                if self.checkpoints is not None:
                    try:
                        self.checkpoints.remove_incomplete()
                    except Exception:  # noqa: BLE001 - litter, not state: the job's outcome stands
                        log.exception("could not remove incomplete checkpoints of job %s", self.job_id)
            if self._lock is not None:
                self._lock.release()  # the lock file stays until the durable files go at exit
            self._final_progress()
            with self._savepoint_lock:
                self.done.set()
            self._fail_savepoint_requests(f"the job is {self.status.value}")

    # -- restore and restart -------------------------------------------------------------------

    @property
    def run_key(self) -> str:
        """Names this run's working state (a restart begins a new run from a checkpoint)."""
        return f"{self.job_id}/run-{self.restarts}"

    def location(self) -> StateLocation:
        """Where this run's working state lives (shipped to every task)."""
        return StateLocation(
            self.run_key, self.working_dir if self._working_configured else "", self.durable_root, self.settings.backend,
            tuple(sorted(self.storage_options.items())), bool(self.settings.incremental),
            self._changelog(), float(self.settings.changelog_max_ratio), int(self.settings.changelog_max_parts),
        )

    def _changelog(self) -> bool:
        """Whether HashMap checkpoints may be changelogs (their tasks then track changed keys)."""
        s = self.settings
        return bool(s.enabled and s.storage == "filesystem" and s.backend == "hashmap" and s.changelog_max_ratio > 0)

    def _remove_local_state(self, job_id: str | None = None) -> None:
        """The job ended: its executor-local working files and cached state go, on every host
        (a task per executor core; durable files stay for get_keyed_state until exit)."""
        try:
            from flowpoint.spark.state_jobs import remove_local_state

            sc = self.spark.sparkContext
            tasks = max(2, 2 * int(sc.defaultParallelism))
            remove_local_state(sc, self.location(), job_id or self.job_id, tasks)
        except Exception:  # noqa: BLE001 - Spark may be stopping; local files are a cache
            log.debug("could not remove the local working state of job %s", job_id or self.job_id, exc_info=True)
        remove_job_dir(self.working_dir, job_id or self.job_id)

    def _remove_leftovers_of_predecessor(self) -> None:
        """After a run restored from another run's checkpoint (``--resume``, ``-s``): if that run
        was killed on this host (its lock file is there and no process holds it), its working
        files go too: local files on the driver and every executor, and its durable files."""
        old = self._predecessor
        if not old or not claim_leftovers(self.working_dir, old):
            return
        self._remove_local_state(old)
        self._remove_durable_state(old)
        self._progress(f"removed the working files job {old} left behind (its process ended without removing them)")

    def _remove_durable_state(self, job_id: str | None = None) -> None:
        """The durable working files of this job (at exit), or of ``job_id``, and its lock file."""
        job_id = job_id or self.job_id
        options = tuple(sorted(self.storage_options.items()))
        root = self.durable_root if job_id == self.job_id else durable_root(self.config, self.settings, job_id, self.working_dir)
        durable.delete_tree(durable.join(root, job_id), options)
        if root.endswith(f"/{job_id}/taskowned"):  # inside the job's checkpoint directory
            durable.delete_tree(root, options)
            durable.remove_empty_dir(root.rsplit("/", 1)[0])
        remove_job_dir(self.working_dir, job_id)
        if job_id == self.job_id and self._lock is not None:
            self._lock.release(remove=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(lock_path(self.working_dir, job_id))

    def _initial_restore(self) -> RestoredJob | None:
        allow = bool(self.config.get("execution.savepoint.ignore-unclaimed-state"))

        def plan(uri: str, meta: Any) -> RestoredJob:
            return plan_restore(meta, uri, self.graph, self.settings.backend, allow, self.storage_options)

        found = restore_point(self.config, self.settings, self.graph, plan)  # -s, or --resume's choice
        if found is None:
            return None
        job_dir_uri, meta, restore = found.job_dir_uri, found.meta, found.restore
        self.resumed_from = (meta.job_id, meta.checkpoint_id)  # recorded in the job registry
        self._restore_point = (meta, job_dir_uri, allow)  # a failure before the first checkpoint goes back here
        self._predecessor = meta.job_id if meta.job_id != self.job_id else None
        self._progress(f"restoring {meta.kind} {meta.checkpoint_id} (epoch {meta.epoch}) of job {meta.job_id} from {job_dir_uri}")
        for uid in restore.dropped_uids:
            log.warning("dropping state of uid %r: the job has no such stateful operator (--allow-non-restored-state)", uid)
        return restore

    def _apply_restore(self, restore: RestoredJob) -> None:
        self.watermarks, self.generators = restored_watermarks(restore.watermarks, self.graph)
        allow = bool(self.config.get("execution.savepoint.ignore-unclaimed-state"))
        self.operator_state = restored_operator_state(restore.watermarks.get("operator_state") or {}, self.graph, allow)
        self._restored_uids = frozenset(uid.rsplit(":", 1)[0] for uid in self.operator_state)
        self.chains = dict(restore.chains)
        self.epoch = restore.epoch
        self._checkpointed_epoch = restore.epoch
        self.records_read = restore.records_read
        for node in self.graph.sources():
            states = self.splits[node.id]
            saved = sorted((i, v) for (uid, i), v in restore.positions.items() if uid == node.uid)
            if not saved:
                continue
            states.clear()
            for i, (split, position, finished) in saved:
                states.append(SplitState(node, i, split, position, finished))
        for node in self.graph.sinks():
            node.t.sink.restore_driver_state(restore.sinks.get(node.uid))

    def _run_with_restarts(self) -> None:
        while True:
            try:
                self._loop()
                return
            except BaseException as e:
                if self._cancel.is_set() or not restartable(e):
                    raise
                delay = self.backoff.on_failure(now_ms())
                if delay is None:
                    if self.restarts or self.settings.enabled:
                        log.error("job %s failed and its restart strategy %s gives up", self.job_id, self.backoff.describe())
                    raise
                self._restart(e, delay)
                if self._cancel.is_set():
                    return

    def _restart(self, error: BaseException, delay_ms: int) -> None:
        latest = None
        if self.checkpoints is not None:
            self.checkpoints.abort_pending("job failover")
            latest = self.checkpoints.latest()
        if latest is not None:
            origin = f"checkpoint {latest.checkpoint_id} (epoch {latest.epoch})"
        elif self._restore_point is not None:
            origin = f"the {self._restore_point[0].kind} the job was started from ({self._restore_point[1]})"
        else:
            origin = "the beginning (no completed checkpoint)"
        self._progress(
            f"epoch {self.epoch} failed: {error}. Restarting from {origin} in {delay_ms} ms "
            f"(restart strategy {self.backoff.describe()})"
        )
        self.status = JobStatus.RESTARTING
        if self._cancel.wait(delay_ms / 1000):
            return
        durable.delete_tree(durable.join(self.durable_root, self.run_key), tuple(sorted(self.storage_options.items())))
        remove_job_dir(self.working_dir, self.run_key)
        self.restarts += 1
        self.chains = {}
        self.epoch = 0
        self._checkpointed_epoch = 0
        self.records_read = 0
        self.watermarks, self.generators = {}, {}
        self.operator_state, self._restored_uids = {}, frozenset()
        self._init_splits()
        if latest is not None:
            self._apply_restore(plan_restore(latest, self.checkpoints.store.job_dir_uri(), self.graph, self.settings.backend, options=self.storage_options))
        elif self._restore_point is not None:
            meta, job_dir_uri, allow = self._restore_point
            self._apply_restore(plan_restore(meta, job_dir_uri, self.graph, self.settings.backend, allow, self.storage_options))
        else:
            for node in self.graph.sinks():
                node.t.sink.restore_driver_state(None)
        self.status = JobStatus.RUNNING

    def _init_splits(self) -> None:
        for node in self.graph.sources():
            source: Source = node.t.source
            splits = source.create_splits(node.parallelism)
            self.splits[node.id] = [SplitState(node, i, s, s.start) for i, s in enumerate(splits)]

    def _discover(self) -> None:
        for node in self.graph.sources():
            states = self.splits[node.id]
            for s in node.t.source.discover_splits([st.split for st in states]):
                states.append(SplitState(node, len(states), s, s.start))

    def _plan(self, elapsed: float) -> tuple[dict[int, list[list]], dict[tuple[int, int], tuple[Any, bool]], int]:
        """Decide the epoch's reads: ``reads[stage][partition]`` and the new positions."""
        # BATCH: the whole input in one epoch (a keyed operator sorts each key's records by time)
        budget = 1 << 62 if self.graph.batch else int(self.config.get("execution.epoch.max-records"))
        active = [st for states in self.splits.values() for st in states if not st.finished]
        per_split = max(1, budget // max(1, len(active)))
        reads: dict[int, list[list]] = {}
        new_positions: dict[tuple[int, int], tuple[Any, bool]] = {}
        planned = 0
        for st in active:
            source: Source = st.node.t.source
            plan = source.plan(st.split, st.position, per_split, elapsed)
            new_positions[(st.node.id, st.index)] = (plan.end, plan.finished)
            # every active split is listed, also without records: its watermark generator emits
            # periodically, and a split that just finished sends its final watermark
            spec = source.read_spec(st.split, st.position, plan.end) if plan.end != st.position else None
            stage = st.node.stage_id
            p = st.node.parallelism
            parts = reads.setdefault(stage, [[] for _ in range(p)])
            parts[st.index % p].append((st.index, st.split, spec, plan.finished))
            if spec is not None:
                planned += plan.records
        return reads, new_positions, planned

    def _split_finished(self, key: tuple[int, int]) -> bool:
        node_id, index = key
        return any(st.finished for st in self.splits.get(node_id, ()) if st.index == index)

    def _all_finished(self, new_positions: dict | None = None) -> bool:
        for states in self.splits.values():
            for st in states:
                finished = st.finished
                if new_positions and (st.node.id, st.index) in new_positions:
                    finished = new_positions[(st.node.id, st.index)][1]
                if not finished:
                    return False
        return all(n.t.source.is_bounded() for n in self.graph.sources())

    def _loop(self) -> None:
        idle_s = int(self.config.get("execution.epoch.interval")) / 1000.0
        # jobs with timers or watermarks run epochs without input too: processing time and idle
        # sources' watermarks advance, so windows and timers fire without new records
        idle_epoch_s = int(self.config.get("execution.epoch.idle-interval")) / 1000.0
        compaction_bytes = int(self.config.get("state.working.compaction-bytes"))
        read_started = time.monotonic()
        last_epoch_at = time.monotonic()
        while not self._cancel.is_set():
            self._checkpoint_if_due()
            if self._savepoint_requests and self._take_savepoints():
                self._stopped = True
                return
            self._discover()
            reads, new_positions, planned = self._plan(time.monotonic() - read_started)
            last = self._all_finished(new_positions)
            idle_epoch_due = self._time_driven and time.monotonic() - last_epoch_at >= idle_epoch_s
            if planned == 0 and not last and not idle_epoch_due and not (self.checkpoints and self.checkpoints.sync_request()):
                self._cancel.wait(idle_s)
                continue
            newly_finished = any(fin and not self._split_finished(key) for key, (_, fin) in new_positions.items())
            if planned == 0 and last and self.epoch > 0 and not newly_finished:
                break  # (a split that finishes only now still gets an epoch: it carries its final watermark)
            last_epoch_at = time.monotonic()
            self._run_epoch(reads, new_positions, last, planned, compaction_bytes)
            if last:
                break

    def _run_epoch(self, reads: dict, new_positions: dict, last: bool, planned: int = 0, compaction_bytes: int | None = None) -> None:
        if compaction_bytes is None:
            compaction_bytes = int(self.config.get("state.working.compaction-bytes"))
        self.epoch += 1
        cp = self.checkpoints
        done, aborted = cp.take_notifications() if cp else ((), ())
        target = cp.sync_request() if cp else None
        slices = self._slices(compaction_bytes)
        spec = EpochSpec(
            self.run_key, self.epoch, self.location(), last, done, aborted, target, now_ms(), dict(self.watermarks),
            {n.uid: len(self.splits[n.id]) for n in self.graph.sources()}, dict(self.generators), self._restored_uids,
        )
        t0 = time.monotonic()
        acks = self._executor.run_epoch(spec, reads, slices)
        self._commit(acks, new_positions)
        if target is not None:
            cp.attach_snapshots(target.checkpoint_id, acks)
        self._report(planned, time.monotonic() - t0, acks)

    def _slices(self, compaction_bytes: int) -> dict[int, list[TaskSlice]]:
        """Each partition's own share of the epoch (see flowpoint/tasks/protocol.py)."""
        cp = self.checkpoints
        out: dict[int, list[TaskSlice]] = {}
        for stage in self.graph.stages:
            uids = [self.graph.nodes[n].uid for n in stage.nodes]
            keyed = [self.graph.nodes[n].uid for n in stage.nodes if self.graph.nodes[n].keyed]
            row = []
            for p in range(stage.parallelism):
                chain = self.chains.get((stage.id, p)) or CommittedChain()
                ops = {f"{u}:{p}": self.operator_state[f"{u}:{p}"] for u in uids if f"{u}:{p}" in self.operator_state}
                shared: dict[str, str] = {}
                if cp is not None:
                    for u in keyed:
                        shared.update(cp.shared_files(u, p))
                compact = bool(keyed) and chain.wants_base(compaction_bytes)
                row.append(TaskSlice(stage.id, p, chain, compact, ops, shared))
            out[stage.id] = row
        return out

    def _checkpoint_if_due(self) -> None:
        cp = self.checkpoints
        if cp is None:
            return
        meta = cp.poll()
        if meta is not None:
            self.backoff.on_success(now_ms())
            for node in self.graph.sinks():
                node.t.sink.notify_checkpoint_complete(meta.checkpoint_id)
            from flowpoint.connectors.source import Source as SourceBase

            for node in self.graph.sources():
                source = node.t.source
                if type(source).notify_checkpoint_complete is SourceBase.notify_checkpoint_complete:
                    continue  # sources that do not listen cost nothing (no positions decoded)
                cut = [source.decode_position(sp.split_id, sp.position) for sp in meta.sources if sp.source_uid == node.uid]
                source.notify_checkpoint_complete(meta.checkpoint_id, cut)
        if self.epoch > self._checkpointed_epoch and cp.due():
            sources = [split_position(st.node, st.index, st.split, st.position, st.finished) for states in self.splits.values() for st in states]
            sinks = {n.uid: n.t.sink.snapshot_driver_state() for n in self.graph.sinks()}
            watermarks = {
                "channels": {c: [wm, idle] for c, (wm, idle) in self.watermarks.items()},
                "generators": dict(self.generators),
            "operator_state": dict(self.operator_state),
            }
            stateful = [(s.id, p) for s in self.graph.stages if any(self.graph.nodes[n].keyed for n in s.nodes) for p in range(s.parallelism)]
            cp.trigger(self.epoch, stateful, sources, sinks, self.records_read, watermarks)
            self._checkpointed_epoch = self.epoch

    def _commit(self, acks: list[TaskAck], new_positions: dict) -> None:
        latest: dict[tuple[int, int], TaskAck] = {}
        for ack in acks:
            latest[(ack.stage_id, ack.partition)] = ack  # a recomputed task reports the same result
        for ack in latest.values():
            if ack.error is not None:
                raise ack.error
        missing = [(s.id, p) for s in self.graph.stages for p in range(s.parallelism) if (s.id, p) not in latest]
        if missing:
            msg = f"epoch {self.epoch}: no acknowledgement from tasks (stage, partition) {missing}; not committed"
            raise JobExecutionError(msg)
        for key, ack in latest.items():
            chain = self.chains.get(key) or CommittedChain()
            self.chains[key] = chain.committed(ack.epoch, ack.token, ack.state)
        for (node_id, index), (end, finished) in new_positions.items():
            st = self.splits[node_id][index]
            st.position, st.finished = end, finished
        for ack in sorted(latest.values(), key=lambda a: (a.stage_id, a.partition)):
            self.watermarks.update(ack.watermarks)
            self.generators.update(ack.generators)
            self.operator_state.update(ack.operator_state)
            for uid, states in ack.declared.items():
                self.declared_states.setdefault(uid, {}).update(states)
            for name, n in ack.metrics.items():
                self.metrics[name] = self.metrics.get(name, 0) + n
        source_stages = {n.stage_id for n in self.graph.sources()}
        self.records_read += sum(a.records_in for a in latest.values() if a.stage_id in source_stages)
        for node in self.graph.sinks():
            payloads = sorted(
                (a.partition, a.sink_payloads[node.id])
                for a in latest.values()
                if a.stage_id == node.stage_id and node.id in a.sink_payloads
            )
            node.t.sink.on_epoch_committed(self.epoch, payloads, node.parallelism)

    # -- progress ------------------------------------------------------------------------------

    def _progress(self, line: str) -> None:
        if int(self.config.get("execution.progress.interval")) >= 0:
            print(f"[flowpoint] {line}", file=sys.stderr, flush=True)

    def _report(self, records: int, seconds: float, acks: list[TaskAck] | None = None) -> None:
        for ack in acks or ():
            if ack.state is not None:  # a stateful task: did it find its state in its process?
                self.metrics["stateTasks"] = self.metrics.get("stateTasks", 0) + 1
                self.metrics["stateTasksInMemory"] = self.metrics.get("stateTasksInMemory", 0) + (0 if ack.fresh_state else 1)
        self.epoch_history.append((self.epoch, records, seconds))
        del self.epoch_history[:-1000]
        interval = int(self.config.get("execution.progress.interval"))
        now = time.monotonic()
        if interval < 0 or (interval and (now - self._last_progress) * 1000 < interval):
            return
        self._last_progress = now
        rate = records / seconds if seconds > 0 else 0.0
        self._progress(
            f"epoch {self.epoch}: {records:,} records in {seconds:.2f} s ({rate:,.0f} records/s); "
            f"total {self.records_read:,}"
        )

    def _final_progress(self) -> None:
        seconds = (self._ended or time.monotonic()) - self._started
        rate = self.records_read / seconds if seconds > 0 else 0.0
        self._progress(
            f"job {self.job_name!r} ({self.job_id}) {self.status.value}: {self.epoch} epochs, "
            f"{self.records_read:,} records in {seconds:.1f} s ({rate:,.0f} records/s)"
        )

    def current_watermark(self) -> int | None:
        """The lowest watermark over the job's channels (None without event time)."""
        active = [wm for wm, idle in self.watermarks.values() if not idle]
        return min(active) if active else None

    def checkpoint_stats(self) -> list:
        return list(self.checkpoints.history) if self.checkpoints is not None else []

    # -- reading state after the job -----------------------------------------------------------

    def read_keyed_state(self, uid: str, state_name: str | None) -> dict:
        """Committed keyed state of one operator, read by Spark tasks where it lives."""
        from flowpoint.spark.state_jobs import read_keyed_state

        self.graph.node_by_uid(uid)  # an unknown uid is refused with the uids there are
        merged = read_keyed_state(self.spark.sparkContext, self.location(), self._state_partitions(uid), uid)
        if self.done.is_set():
            self._remove_local_state()  # the read rebuilt it on executors; the job is over
        maps = keyed_state_maps(merged)
        if state_name is None:
            return maps
        return maps.get(state_name, KeyedStateMap())


def _warn_missing_uids(graph: JobGraph) -> None:
    """Stateful operators should have an explicit uid: a generated one changes with the graph."""
    for n in graph.nodes.values():
        if (n.keyed or n.kind == "source") and not n.t.uid:
            log.warning(
                "operator %s has no uid; its state is saved under the generated uid %r, which changes when the job "
                "graph changes. Set .uid(...) on stateful operators so savepoints and checkpoints restore after changes",
                n.describe(), n.uid,
            )


def _time_driven(node: Node) -> bool:
    """Operators whose results depend on time passing, not only on records arriving."""
    if node.kind in ("window", "keyed_process", "timestamps"):
        return True
    strategy = node.t.options.get("watermark_strategy") if node.kind == "source" else None
    return strategy is not None and strategy.generates_watermarks


def restored_watermarks(saved: dict[str, Any], graph: JobGraph) -> tuple[dict[str, tuple[int, bool]], dict[str, bytes]]:
    """Watermark channels and generator states from a checkpoint, mapped onto ``graph``.

    Split channels (``s:<uid>:<i>``) restore as saved. Task channels (``t:<head uid>:<p>``)
    restore, for every partition of the stage now, as the lowest saved watermark of that stage:
    after a rescale the partitions differ, and the minimum never lets a record count as late
    that the uninterrupted job would have accepted.
    """
    channels = saved.get("channels") or {}
    out: dict[str, tuple[int, bool]] = {}
    lowest: dict[str, int] = {}
    for name, (wm, idle) in channels.items():
        if name.startswith("s:"):
            out[name] = (int(wm), bool(idle))
        elif name.startswith("t:"):
            uid = name[2:].rsplit(":", 1)[0]
            lowest[uid] = min(lowest.get(uid, int(wm)), int(wm))
    for stage in graph.stages:
        uid = graph.nodes[stage.head].uid
        if uid in lowest:
            for p in range(stage.parallelism):
                out[f"t:{uid}:{p}"] = (lowest[uid], False)
    return out, dict(saved.get("generators") or {})


def restored_operator_state(saved: dict[str, dict], graph: JobGraph, allow_non_restored: bool = False) -> dict[str, dict]:
    """CheckpointedFunction state from a checkpoint or savepoint, by uid, redistributed over the
    operator's parallelism now (list state split evenly, union list state to every instance)."""
    from flowpoint.api.operator_state import redistribute

    by_uid: dict[str, dict[int, dict]] = {}
    for key, states in saved.items():
        uid, index = key.rsplit(":", 1)
        by_uid.setdefault(uid, {})[int(index)] = {name: (mode, list(items)) for name, (mode, items) in states.items()}
    out: dict[str, dict] = {}
    parallelism = {n.uid: n.parallelism for n in graph.nodes.values()}
    for uid, old in by_uid.items():
        p = parallelism.get(uid)
        if p is None:
            if allow_non_restored:
                log.warning("dropping operator state of uid %r: the job has no such operator (--allow-non-restored-state)", uid)
                continue
            msg = (
                f"the restored state holds operator state of uid {uid!r}, but the job has no operator with this uid. "
                "Give the operator its old uid, or allow dropping that state (--allow-non-restored-state)"
            )
            raise CheckpointError(msg)
        for i, states in redistribute(old, p).items():
            out[f"{uid}:{i}"] = states
    return out


def durable_root(config: Any, settings: Any, job_id: str, working_dir: str) -> str:
    """Where committed working state is durable (see flowpoint/state/durable.py)."""
    import os

    remote = config.get("state.working.remote-dir")
    if remote:
        return str(remote) if "://" in str(remote) else os.path.abspath(str(remote))
    chk = settings.checkpoints_dir if settings.storage == "filesystem" else None
    if chk and not durable.is_local(str(chk)):
        return durable.join(str(chk), job_id, "taskowned")
    return os.path.join(working_dir, "durable")


def _check_remote_dir(config: Any, root: str, options: dict) -> None:
    """A local ``state.working.remote-dir`` must be safe from other users (who could delete or
    replace durable state): created 0700 if missing, else refused (InsecurePathError) when
    another user owns it or can write it, unless security.trust-shared-directories is true."""
    if config.get("state.working.remote-dir") and durable.is_local(root):
        from flowpoint.checkpoint.storage import CheckpointStorageAccess

        CheckpointStorageAccess(root, options).check_trusted("remote working directory", "state.working.remote-dir", create=True)


def _warn_unshared(spark: Any, root: str) -> None:
    master = str(spark.sparkContext.master)
    if durable.is_local(root) and not master.startswith("local"):
        log.warning(
            "working state is kept durable in the local directory %s while Spark runs on %s: this is only correct "
            "if every executor sees the same directory. On several hosts set state.working.remote-dir (or a remote "
            "state.checkpoints.dir) to s3://, hdfs://, ... (a task that cannot find its state fails the job)",
            root, master,
        )
