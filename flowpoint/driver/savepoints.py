"""The savepoint service (driver side): savepoints asked for from other threads, taken between
two units of the loop's work from the committed state.

A request waits in a queue until the loop calls :meth:`SavepointService.take`; the caller
blocks on its future. Savepoint ids are shared with checkpoints (a savepoint takes the next
checkpoint id), so ``_metadata`` ids never repeat within a job. Every stateful task writes its
canonical part where its state is (a Spark job); the driver writes ``_metadata`` from the parts'
entries. When the job ends, requests not taken fail with the job's status.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.directory import unit_name
from flowpoint.checkpoint.savepoint import (
    assemble_operator,
    complete_savepoint,
    create_savepoint_dir,
    discard_incomplete,
    resolve_target,
)
from flowpoint.checkpoint.signing import Keyring
from flowpoint.clock import now_ms
from flowpoint.driver.checkpoint_coordinator import CheckpointStats, apply_declared
from flowpoint.errors import CheckpointError
from flowpoint.spark.adapter_choice import adapter_for
from flowpoint.spark.state_jobs import StatePartition
from flowpoint.state.keygroups import key_group_range_for_operator

if TYPE_CHECKING:
    from collections.abc import Callable

    from flowpoint.driver.checkpoint_coordinator import CheckpointCoordinator
    from flowpoint.driver.committed import CommittedState
    from flowpoint.driver.progress import Progress
    from flowpoint.driver.splits import SplitPlanner
    from flowpoint.driver.working_files import WorkingFiles
    from flowpoint.graph.jobgraph import JobGraph


@dataclass
class SavepointRequest:
    """A savepoint asked for from another thread, taken by the loop between two epochs."""

    target: str
    stop: bool
    drain: bool
    future: Future


class SavepointService:
    def __init__(
        self, graph: JobGraph, spark: Any, config: Any, job_id: str, job_name: str,
        state: CommittedState, splits: SplitPlanner, files: WorkingFiles, progress: Progress,
    ):
        self.graph = graph
        self.spark = spark
        self.config = config
        self.job_id = job_id
        self.job_name = job_name
        self.state = state
        self.splits = splits
        self.files = files
        self.progress = progress
        self.keyring = Keyring.from_config(config)  # signs each savepoint's _metadata (checkpoint/signing.py)
        self.backend = ""
        self.runtime = "epoch"  # the runtime the job runs on, recorded in each savepoint's stats
        self.checkpoints: CheckpointCoordinator | None = None
        self._requests: list[SavepointRequest] = []
        self._lock = threading.Lock()
        self._next_id = 1
        self.history: list[CheckpointStats] = []  # the savepoints taken (and failed), as checkpoints' stats

    def start(self, backend: str, checkpoints: CheckpointCoordinator | None, first_id: int, runtime: str = "epoch") -> None:
        """The job runs (on ``runtime``): ids continue after ``first_id - 1`` (or the checkpoint coordinator's)."""
        self.backend = backend
        self.runtime = runtime
        self.checkpoints = checkpoints
        self._next_id = first_id

    # -- requests (any thread) -----------------------------------------------------------------

    def request(self, target_directory: str | None, stop: bool, drain: bool, refusal: Callable[[], str | None]) -> Future:
        """Queue a savepoint; ``refusal`` says why the job cannot take one any more (or None),
        asked under the lock that :meth:`close` holds while the job ends."""
        target = resolve_target(target_directory, self.config)
        request = SavepointRequest(target, stop, drain, Future())
        with self._lock:
            reason = refusal()
            if reason is not None:
                raise CheckpointError(reason)
            self._requests.append(request)
        return request.future

    def close(self, reason: str, ending: Callable[[], None]) -> None:
        """The job ends: ``ending`` runs under the requests' lock (no request is queued after
        it), then requests not taken fail with ``reason``."""
        with self._lock:
            ending()
        with self._lock:
            requests, self._requests = self._requests, []
        for r in requests:
            if not r.future.done():
                r.future.set_exception(CheckpointError(f"savepoint of job {self.job_name!r} ({self.job_id}) not taken: {reason}"))

    # -- taking them (the loop's thread) -------------------------------------------------------

    def pending(self) -> bool:
        return bool(self._requests)

    def take_requests(self) -> list[SavepointRequest]:
        """The pending requests, now the caller's to answer (a loop that takes savepoints in
        its own way: the continuous loop's savepoint barrier)."""
        with self._lock:
            requests, self._requests = self._requests, []
        return requests

    def take(self, drain: Callable[[], None], epoch: Callable[[], int]) -> bool:
        """Between two units of work: take the requested savepoints; True if one of them stops
        the job. ``drain`` runs the final watermarks through the job (before a stop with
        ``--drain``); ``epoch`` is the number of the last committed epoch."""
        with self._lock:
            requests, self._requests = self._requests, []
        stop = False
        for r in requests:
            try:
                if r.stop and r.drain and not stop:
                    drain()
                path = self.write(r.target, epoch(), stop=r.stop)
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                r.future.set_exception(e)
                continue
            stop = stop or r.stop
            r.future.set_result(path)
        return stop

    def _next_savepoint_id(self) -> int:
        if self.checkpoints is not None:
            return self.checkpoints.reserve_id()
        cid = self._next_id
        self._next_id += 1
        return cid

    def write(self, target: str, epoch: int, stop: bool = False) -> str:
        """Every stateful task writes its canonical part (a Spark job over the partitions, run
        where their state is); the driver writes ``_metadata`` from the parts' entries."""
        t0, trigger_ms = time.perf_counter(), now_ms()
        access = self.create(target)
        self.files.state_jobs += 1  # its tasks leave the state they read cached where they ran
        return self.complete(
            access, lambda: adapter_for(self.spark).write_savepoint_parts(self.files.location(), state_partitions(self.graph, self.state), access.uri()),
            epoch, self.splits.positions(), t0, trigger_ms, stop=stop,
        )

    def create(self, target: str) -> Any:
        """The new savepoint's directory (its access), below ``target``."""
        return create_savepoint_dir(target, self.job_id, self.files.location().options)

    def complete(self, access: Any, written: Callable[[], list], epoch: int, sources: list, t0: float, trigger_ms: int, stop: bool = False) -> str:
        """``_metadata`` of the savepoint in ``access`` from its parts (``written()``: ``[(uid,
        SubtaskState, state counts)]``, which the tasks wrote) and the committed state of
        ``epoch`` with the split positions ``sources``; an incomplete savepoint is removed.
        ``stop``: the savepoint of a stop-with-savepoint. Its stats (completed or failed) go
        to :attr:`history`."""
        cid = self._next_savepoint_id()
        stats = CheckpointStats(cid, epoch, trigger_ms, kind="stop" if stop else "savepoint")
        self.history.append(stats)
        del self.history[:-1000]
        try:
            by_uid: dict[str, list] = {}
            for uid, sub, states in written():
                by_uid.setdefault(uid, []).append((sub, states))
            operators = []
            for uid, parts in sorted(by_uid.items()):
                node = self.graph.node_by_uid(uid)
                stage = self.graph.stages[node.stage_id]
                op = assemble_operator(uid, node.name, stage.parallelism, stage.max_parallelism, parts)
                if op is not None:
                    apply_declared(op, self.state.declared_states.get(uid))
                if op is None:  # an operator without state has nothing to restore (and may be removed)
                    for sub, _ in parts:
                        for f in sub.files:
                            access.delete(f.path)
                    continue
                operators.append(op)
            path = complete_savepoint(
                access, job_id=self.job_id, job_name=self.job_name, checkpoint_id=cid, epoch=epoch,
                backend=self.backend, operators=operators,
                max_parallelism=max((s.max_parallelism for s in self.graph.stages), default=128), trigger_time_ms=trigger_ms,
                sources=sources, sinks=self.state.sink_states(), watermarks=self.state.event_time(),
                stats={"records_read": self.state.records_read, "duration_ms": round((time.perf_counter() - t0) * 1000, 3), "runtime": self.runtime},
                keyring=self.keyring,
            )
        except BaseException as e:
            stats.fail(f"{type(e).__name__}: {e}")
            discard_incomplete(access)
            raise
        _completed(stats, operators, path, t0)
        self.progress.say(f"savepoint {cid} ({unit_name(self.runtime)} {epoch}) of job {self.job_id} written to {path}")
        return path


def _completed(stats: CheckpointStats, operators: list, path: str, t0: float) -> None:
    """A savepoint's stats once its ``_metadata`` is written: every part is its own (no
    incremental sharing), written synchronously at the boundary it was taken at."""
    for op in operators:
        stats.operator_sizes[op.uid] = sum(int(sub.state_size or 0) for sub in op.subtasks)
    stats.state_size = stats.incremental_size = sum(stats.operator_sizes.values())
    stats.tasks_total = stats.tasks_acknowledged = sum(len(op.subtasks) for op in operators)
    stats.sync_ms = stats.duration_ms = round((time.perf_counter() - t0) * 1000, 3)
    stats.end_to_end_ms = float(now_ms() - stats.trigger_time_ms)
    stats.path = path
    stats.status = "COMPLETED"


def state_partitions(graph: JobGraph, state: CommittedState, only_uid: str | None = None) -> list:
    """Every stateful (stage, partition) with its committed chain, for a state job."""
    items = []
    for stage in graph.stages:
        uids = tuple(graph.nodes[n].uid for n in stage.nodes if graph.nodes[n].keyed)
        if not uids or (only_uid is not None and only_uid not in uids):
            continue
        for p in range(stage.parallelism):
            kgr = key_group_range_for_operator(stage.max_parallelism, stage.parallelism, p)
            items.append(StatePartition(stage.id, p, state.chain((stage.id, p)), uids, stage.max_parallelism, kgr.start, kgr.end))
    return items
