"""The checkpoint coordinator: consistent cuts at epoch boundaries (DESIGN sections 4 and 7).

After the coordinator commits epoch ``n`` and the checkpoint interval has passed, it *triggers*
checkpoint ``c``. The synchronous part freezes what the cut consists of: each stateful
partition's committed working-state files (immutable; pinned so compaction keeps them until
the upload is done), the source split positions after epoch ``n`` and the driver-side sink
state. The asynchronous part runs in a background thread while later epochs go on: it turns
each partition's files into a full snapshot per operator, writes them under ``chk-<c>/`` in
checkpoint storage, and completes the checkpoint by writing ``chk-<c>/_metadata`` atomically.
Only then does the checkpoint count, older ones are subsumed (retention), and user functions
hear ``notify_checkpoint_complete(c)``.
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import time
import uuid
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.metadata import (
    CheckpointMetadata,
    OperatorState,
    SplitPosition,
    StateFile,
    SubtaskState,
)
from flowpoint.checkpoint.storage import CheckpointStorageAccess
from flowpoint.checkpoint.store import CheckpointStore
from flowpoint.errors import CheckpointError
from flowpoint.state.keygroups import key_group_range_for_operator
from flowpoint.state.working import CommittedChain, read_committed_tables
from flowpoint.tasks.batches import dumps

if TYPE_CHECKING:
    from flowpoint.api.checkpointing import CheckpointSettings
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")

MEMORY_ROOT = "memory://flowpoint-checkpoints"


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class CheckpointStats:
    """What the coordinator records and exposes about one checkpoint (Flink's checkpoint stats)."""

    checkpoint_id: int
    epoch: int
    trigger_time_ms: int
    status: str = "IN_PROGRESS"  # IN_PROGRESS | COMPLETED | FAILED
    sync_ms: float = 0.0
    async_ms: float = 0.0
    duration_ms: float = 0.0
    state_size: int = 0
    incremental_size: int = 0
    tasks_acknowledged: int = 0
    tasks_total: int = 0
    failure_reason: str | None = None
    path: str | None = None


@dataclass
class CutState:
    """The synchronous part of a checkpoint: everything the upload needs, frozen."""

    checkpoint_id: int
    epoch: int
    chains: dict[tuple[int, int], CommittedChain]
    sources: list[SplitPosition]
    sinks: dict[str, Any]
    records_read: int
    stats: CheckpointStats
    pinned: frozenset[str] = field(default_factory=frozenset)
    # RocksDB: the synchronous part runs in the next epoch's tasks, which report their snapshots
    awaiting_sync: bool = False
    snapshots: dict[tuple[int, int], dict[str, tuple]] = field(default_factory=dict)
    local_dirs: list[str] = field(default_factory=list)
    new_shared: dict[tuple, str] = field(default_factory=dict)  # registry entries this checkpoint uploaded
    cancelled: bool = False
    watermarks: dict[str, Any] = field(default_factory=dict)  # event time: channels and generator states
    run_key: str = ""


def safe_name(uid: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "_", uid)[:80]


class CheckpointCoordinator:
    def __init__(self, settings: CheckpointSettings, graph: JobGraph, job_id: str, job_name: str, first_id: int = 1):
        self.settings = settings
        self.graph = graph
        self.job_id = job_id
        self.job_name = job_name
        if settings.backend == "rocksdb" and settings.storage != "filesystem":
            msg = (
                "EmbeddedRocksDBStateBackend checkpoints are files: they need filesystem checkpoint storage "
                "(state.checkpoints.dir or set_checkpoint_storage('file:///...')), not JobManagerCheckpointStorage"
            )
            raise CheckpointError(msg)
        root = settings.checkpoints_dir if settings.storage == "filesystem" else MEMORY_ROOT
        if root is None:
            msg = "filesystem checkpoint storage needs a directory: set state.checkpoints.dir or set_checkpoint_storage('file:///...')"
            raise CheckpointError(msg)
        self.access = CheckpointStorageAccess(root)
        self.store = CheckpointStore(self.access, job_id, settings.num_retained)
        self.store.init()
        self.next_id = first_id
        self.history: list[CheckpointStats] = []
        self.pending: CutState | None = None
        self._future: Future | None = None
        # one checkpoint is in flight at a time; more threads let a new one start while the upload
        # of an expired one still hangs on slow storage
        self._pool = ThreadPoolExecutor(4, thread_name_prefix=f"flowpoint-checkpoint-{job_id[:8]}")
        self._last_trigger = time.monotonic()
        self._last_end = float("-inf")
        self._consecutive_failures = 0
        self.completed: list[int] = []  # ids to announce to user functions with the next epoch
        self.aborted: list[int] = []
        # RocksDB incremental checkpoints: (run, uid, partition, file name, size) -> its path in
        # shared/. Keyed by run: DBs restored twice from one checkpoint may name different files alike.
        self.shared: dict[tuple, str] = {}

    # -- triggering ----------------------------------------------------------------------------

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def due(self) -> bool:
        if not self.enabled or self.pending is not None:
            return False
        now = time.monotonic()
        return (now - self._last_trigger) * 1000 >= self.settings.interval_ms and (now - self._last_end) * 1000 >= self.settings.min_pause_ms

    def pinned(self) -> frozenset[str]:
        return self.pending.pinned if self.pending is not None else frozenset()

    def trigger(self, epoch: int, chains: dict, sources: list[SplitPosition], sinks: dict[str, Any], records_read: int, watermarks: dict[str, Any] | None = None) -> CheckpointStats:
        t0 = time.perf_counter()
        cid = self.next_id
        self.next_id += 1
        stats = CheckpointStats(cid, epoch, now_ms())
        stateful = {k: c for k, c in chains.items() if self._keyed_uids(k[0])}
        rocksdb = self.settings.backend == "rocksdb"
        pinned = frozenset() if rocksdb else frozenset(p for c in stateful.values() for p in c.files())
        cut = CutState(cid, epoch, stateful, sources, sinks, records_read, stats, pinned, awaiting_sync=rocksdb, watermarks=dict(watermarks or {}))
        stats.tasks_total = sum(len(self._keyed_uids(k[0])) for k in stateful)
        self._last_trigger = time.monotonic()
        self.pending = cut
        self.history.append(stats)
        if not rocksdb:
            stats.sync_ms = (time.perf_counter() - t0) * 1000
            self._future = self._pool.submit(self._write, cut)
        return stats

    def sync_request(self) -> int | None:
        """RocksDB: the checkpoint whose synchronous part the next epoch's tasks must take."""
        cut = self.pending
        return cut.checkpoint_id if cut is not None and cut.awaiting_sync else None

    def attach_snapshots(self, checkpoint_id: int, acks: list, run_key: str) -> None:
        """The epoch that took a RocksDB checkpoint's synchronous part committed: upload it."""
        cut = self.pending
        if cut is None or cut.checkpoint_id != checkpoint_id:
            return
        cut.run_key = run_key
        for ack in acks:
            if ack.snapshot:
                cut.snapshots[(ack.stage_id, ack.partition)] = ack.snapshot
        cut.local_dirs = sorted({os.path.dirname(d) for snap in cut.snapshots.values() for d, *_ in snap.values()})
        cut.stats.sync_ms = max((ms for snap in cut.snapshots.values() for *_, ms in snap.values()), default=0.0)
        cut.awaiting_sync = False
        self._future = self._pool.submit(self._write, cut)

    def _keyed_uids(self, stage_id: int) -> list[str]:
        stage = self.graph.stages[stage_id]
        return [self.graph.nodes[n].uid for n in stage.nodes if self.graph.nodes[n].keyed]

    # -- the asynchronous part -----------------------------------------------------------------

    def _write(self, cut: CutState) -> CheckpointMetadata:
        try:
            return self._write_checkpoint(cut)
        finally:
            for d in cut.local_dirs:  # the hard-linked RocksDB copies, uploaded or not
                shutil.rmtree(d, ignore_errors=True)
            if cut.cancelled:  # aborted while writing: remove what was written after the abort
                try:
                    self.store.abort(cut.checkpoint_id, list(cut.new_shared.values()))
                except Exception:  # noqa: BLE001
                    log.exception("could not remove the files of aborted checkpoint %d", cut.checkpoint_id)

    def _operator(self, operators: dict[str, OperatorState], uid: str) -> OperatorState:
        op = operators.get(uid)
        if op is None:
            node = self.graph.node_by_uid(uid)
            stage = self.graph.stages[node.stage_id]
            op = operators[uid] = OperatorState(uid, node.name, stage.parallelism, stage.max_parallelism, self.settings.backend, [])
        return op

    def _write_rocksdb(self, cut: CutState, chk: str, operators: dict[str, OperatorState]) -> None:
        """Upload the tasks' RocksDB checkpoints: with incremental checkpoints, SST files already
        in ``shared/`` are referenced, not uploaded again; everything else goes under chk-<n>/."""
        incremental = self.settings.incremental
        for (stage_id, p), snap in sorted(cut.snapshots.items()):
            stage = self.graph.stages[stage_id]
            kgr = key_group_range_for_operator(stage.max_parallelism, stage.parallelism, p)
            for uid, (local_dir, files, num_keys, _ms) in sorted(snap.items()):
                state_files, size, uploaded = [], 0, 0
                for name, fsize in files:
                    local = os.path.join(local_dir, name)
                    if incremental and name.endswith(".sst"):
                        key = (cut.run_key, uid, p, name, fsize)
                        rel = self.shared.get(key) or cut.new_shared.get(key)
                        if rel is None:
                            rel = f"shared/{uuid.uuid4().hex}.sst"
                            self.store.upload_file(local, rel)
                            cut.new_shared[key] = rel
                            uploaded += fsize
                        kind = "sst"
                    else:
                        rel = f"{chk}/{safe_name(uid)}-{p}/{name}"
                        self.store.upload_file(local, rel)
                        uploaded += fsize
                        kind = "private"
                    state_files.append(StateFile(rel, fsize, kind, name))
                    size += fsize
                self._operator(operators, uid).subtasks.append(SubtaskState(p, kgr.start, kgr.end, state_files, num_keys, size, uploaded))
                cut.stats.tasks_acknowledged += 1
                cut.stats.state_size += size
                cut.stats.incremental_size += uploaded

    def _write_checkpoint(self, cut: CutState) -> CheckpointMetadata:
        t0 = time.perf_counter()
        chk = self.store.begin(cut.checkpoint_id)
        operators: dict[str, OperatorState] = {}
        if self.settings.backend == "rocksdb":
            self._write_rocksdb(cut, chk, operators)
        for (stage_id, p), chain in sorted(cut.chains.items()) if self.settings.backend == "hashmap" else ():
            stage = self.graph.stages[stage_id]
            tables = read_committed_tables(chain)
            kgr = key_group_range_for_operator(stage.max_parallelism, stage.parallelism, p)
            for uid in self._keyed_uids(stage_id):
                op = self._operator(operators, uid)
                table = tables.get(uid, {})
                data = dumps(table)
                rel = f"{chk}/{safe_name(uid)}-{p}.pkl"
                self.store.write_file(rel, data)
                keys = set()
                for t in table.values():
                    keys.update(t.keys())
                f = StateFile(rel, len(data), "full")
                op.subtasks.append(SubtaskState(p, kgr.start, kgr.end, [f], len(keys), len(data), len(data)))
                cut.stats.tasks_acknowledged += 1
                cut.stats.state_size += len(data)
                cut.stats.incremental_size += len(data)
        cut.stats.async_ms = (time.perf_counter() - t0) * 1000
        cut.stats.duration_ms = cut.stats.sync_ms + cut.stats.async_ms
        meta = CheckpointMetadata(
            checkpoint_id=cut.checkpoint_id,
            job_id=self.job_id,
            job_name=self.job_name,
            kind="checkpoint",
            epoch=cut.epoch,
            trigger_time_ms=cut.stats.trigger_time_ms,
            completed_time_ms=now_ms(),
            max_parallelism=max((s.max_parallelism for s in self.graph.stages), default=128),
            backend=self.settings.backend,
            incremental=self.settings.backend == "rocksdb" and self.settings.incremental,
            operators=list(operators.values()),
            sources=cut.sources,
            sinks=cut.sinks,
            watermarks=cut.watermarks,
            stats={
                "sync_ms": round(cut.stats.sync_ms, 3),
                "async_ms": round(cut.stats.async_ms, 3),
                "state_size": cut.stats.state_size,
                "incremental_size": cut.stats.incremental_size,
                "tasks_acknowledged": cut.stats.tasks_acknowledged,
                "records_read": cut.records_read,
            },
        )
        if cut.cancelled:
            msg = f"checkpoint {cut.checkpoint_id} was aborted while its files were written"
            raise CheckpointError(msg)
        self.store.complete(meta)
        cut.stats.path = self.store.uri(chk)
        return meta

    # -- completion, failure, timeout ----------------------------------------------------------

    def poll(self, wait: bool = False) -> CheckpointMetadata | None:
        """Finish the pending checkpoint if its upload is done (or ``wait`` for it); returns its
        metadata when it completed. A failed upload declines the checkpoint; more consecutive
        failures than ``tolerable_failures`` fail the job (raises CheckpointError)."""
        cut, future = self.pending, self._future
        if cut is None or future is None:
            return None
        if not future.done():
            elapsed = now_ms() - cut.stats.trigger_time_ms
            if not wait and elapsed <= self.settings.timeout_ms:
                return None
            try:
                future.result(timeout=max(0.0, (self.settings.timeout_ms - elapsed) / 1000))
            except Exception:  # noqa: BLE001 - handled below through future state
                pass
            if not future.done():
                self._decline(cut, f"checkpoint {cut.checkpoint_id} expired after {self.settings.timeout_ms} ms before completing")
                return None
        error = future.exception()
        if error is not None:
            self._decline(cut, f"checkpoint {cut.checkpoint_id} failed: {type(error).__name__}: {error}")
            return None
        return self._completed(cut)

    def _completed(self, cut: CutState) -> CheckpointMetadata:
        meta = self._future.result()  # type: ignore[union-attr]
        cut.stats.status = "COMPLETED"
        self.shared.update(cut.new_shared)
        self.pending = None
        self._future = None
        self._last_end = time.monotonic()
        self._consecutive_failures = 0
        self.completed.append(cut.checkpoint_id)
        log.info("completed checkpoint %d (epoch %d, %d bytes, %.0f ms)", cut.checkpoint_id, cut.epoch, cut.stats.state_size, cut.stats.duration_ms)
        return meta

    def _decline(self, cut: CutState, reason: str) -> None:
        """The checkpoint failed or expired: it is dropped, and too many in a row fail the job."""
        self._fail(cut, reason)
        self._last_end = time.monotonic()
        log.warning("%s", reason)
        self._consecutive_failures += 1
        if self._consecutive_failures > self.settings.tolerable_failures:
            msg = f"{reason}; {self._consecutive_failures} consecutive checkpoint failures exceed tolerable-failed-checkpoints={self.settings.tolerable_failures}"
            raise CheckpointError(msg)

    def abort_pending(self, reason: str) -> None:
        """A failover or the job's end: the in-flight checkpoint is aborted, unless its upload
        already completed it (then it counts as completed)."""
        cut, future = self.pending, self._future
        if cut is None:
            return
        if future is not None and not future.cancel():
            try:
                future.result()
            except Exception:  # noqa: BLE001 - it is aborted below
                pass
            if future.exception() is None:
                self._completed(cut)
                return
        self._fail(cut, reason)

    def _fail(self, cut: CutState, reason: str) -> None:
        cut.cancelled = True  # an upload still running never completes it
        cut.stats.status = "FAILED"
        cut.stats.failure_reason = reason
        self.pending = None
        self._future = None
        self.aborted.append(cut.checkpoint_id)
        for d in cut.local_dirs:
            shutil.rmtree(d, ignore_errors=True)
        try:
            self.store.abort(cut.checkpoint_id, list(cut.new_shared.values()))
        except Exception:  # noqa: BLE001 - the checkpoint is dropped either way
            log.exception("could not remove the files of failed checkpoint %d", cut.checkpoint_id)

    def take_notifications(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        done, aborted = tuple(self.completed), tuple(self.aborted)
        self.completed.clear()
        self.aborted.clear()
        return done, aborted

    def latest(self) -> CheckpointMetadata | None:
        return self.store.latest()

    def shutdown(self, status: str) -> None:
        """The job ended: keep or discard its checkpoints as Flink does for that final status."""
        self._pool.shutdown(wait=True)
        retention = self.settings.retention
        discard = status == "FINISHED" or (status == "CANCELED" and retention != "RETAIN_ON_CANCELLATION")
        if discard and self.settings.storage == "filesystem":
            self.store.discard_all()
