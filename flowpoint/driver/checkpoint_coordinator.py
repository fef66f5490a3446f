"""The checkpoint coordinator: consistent cuts at epoch boundaries (docs/architecture.md, sections 4 and 7).

After the coordinator commits epoch ``n`` and the checkpoint interval has passed, it *triggers*
checkpoint ``c``: it freezes the source split positions after epoch ``n``, the watermarks and
the driver-side sink state. The state is not the coordinator's to copy (docs/architecture.md, section 10a): every
stateful task of epoch ``n+1`` takes the synchronous part from the committed state it starts
from, writes its own parts under ``chk-<c>/`` (RocksDB SST files under ``shared/`` once) in a
thread while it processes the epoch, and acknowledges their paths, sizes and SHA-256 sums. When
epoch ``n+1`` commits with every part acknowledged, a background thread writes
``chk-<c>/_metadata`` atomically. Only then does the checkpoint count, older ones are subsumed
(retention), and user functions hear ``notify_checkpoint_complete(c)``.
"""

from __future__ import annotations

import contextlib
import logging
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.directory import CheckpointStore, unit_name
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.metadata import (
    ChannelStateFile,
    CheckpointMetadata,
    OperatorState,
    SplitPosition,
    StateFile,
    SubtaskState,
)
from flowpoint.checkpoint.part_writer import write_carried
from flowpoint.checkpoint.parts import writes_native_files
from flowpoint.clock import now_ms
from flowpoint.errors import CheckpointError
from flowpoint.partition.backend import (
    ROCKSDB_CHAIN_PREFIX,
    chain_entry,
    is_chain,
    is_rocksdb_chain,
    shared_key,
)
from flowpoint.partition.protocol import CheckpointTarget, OperatorPart
from flowpoint.state.keygroups import key_group_range_for_operator

if TYPE_CHECKING:
    from flowpoint.checkpoint.settings import CheckpointSettings
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")

MEMORY_ROOT = "memory://flowpoint-checkpoints"


@dataclass
class CheckpointStats:
    """What the coordinator records and exposes about one checkpoint (Flink's checkpoint stats)."""

    checkpoint_id: int
    epoch: int
    trigger_time_ms: int
    status: str = "IN_PROGRESS"  # IN_PROGRESS | COMPLETED | FAILED
    sync_ms: float = 0.0
    async_ms: float = 0.0
    duration_ms: float = 0.0  # the tasks' synchronous plus asynchronous parts
    end_to_end_ms: float = 0.0  # trigger to completion (Flink's end-to-end duration)
    state_size: int = 0
    incremental_size: int = 0
    tasks_acknowledged: int = 0
    tasks_total: int = 0
    failure_reason: str | None = None
    path: str | None = None
    kind: str = "checkpoint"  # checkpoint | savepoint | stop (a stop-with-savepoint's savepoint)
    operator_sizes: dict[str, int] = field(default_factory=dict)  # uid -> bytes of its state in it
    channel_state_size: int = 0  # unaligned: bytes of the records in flight it stores (Flink's persisted in-flight data)

    def fail(self, reason: str) -> None:
        """It failed now: ``end_to_end_ms`` is how long after its trigger."""
        self.status, self.failure_reason = "FAILED", reason
        self.end_to_end_ms = float(max(0, now_ms() - self.trigger_time_ms))


@dataclass
class CheckpointRequest:
    """A checkpoint asked for now (``flowpoint checkpoint``, ``POST /jobs/:jid/checkpoints``):
    the next checkpoint the loop triggers is it (at once, not after the interval)."""

    full: bool = False
    checkpoint_id: int | None = None


@dataclass
class CutState:
    """The synchronous part of a checkpoint on the driver: everything but the state, frozen."""

    checkpoint_id: int
    epoch: int
    stateful: list[tuple[int, int]]  # (stage, partition) whose tasks must acknowledge parts
    sources: list[SplitPosition]
    sinks: dict[str, Any]
    records_read: int
    stats: CheckpointStats
    awaiting_sync: bool = True  # the next epoch's tasks take the synchronous part
    parts: dict[tuple[int, int], list[OperatorPart]] = field(default_factory=dict)
    new_shared: dict[str, str] = field(default_factory=dict)  # shared/ files this checkpoint uploaded
    cancelled: bool = False
    watermarks: dict[str, Any] = field(default_factory=dict)  # event time: channels and generator states
    channel_state: list = field(default_factory=list)  # unaligned: ChannelStatePart of each subtask with frames in flight


def merge_states(op: OperatorState, states: dict[str, dict[str, Any]]) -> None:
    """Add one part's state names, kinds and key counts to its operator's ``_metadata`` entry
    (what ``flowpoint inspect`` shows without reading the state files)."""
    if op.states is None:
        op.states = {}
    for name, info in states.items():
        into = op.states.setdefault(name, {"kind": info.get("kind"), "declared": bool(info.get("declared"))})
        if "keys" in info:
            into["keys"] = into.get("keys", 0) + int(info["keys"])
        if info.get("declared") and not into["declared"]:
            into["kind"], into["declared"] = info.get("kind"), True
        if info.get("schema") is not None:
            into.setdefault("schema", info["schema"])
        if info.get("value_class") is not None:  # the named tuple class and fields of its values
            into.setdefault("value_class", info["value_class"])


def apply_declared(op: OperatorState, declared: dict[str, dict] | None) -> None:
    """Record in an operator's ``_metadata`` entry the kind and schema its states were declared
    with in this run (``CommittedState.declared_states``, from the tasks' acknowledgements): a part
    written before the operators of its task registered their states only infers them."""
    if not declared or not op.states:
        return
    for name, info in declared.items():
        st = op.states.get(name)
        if st is None:
            continue
        st["kind"], st["declared"] = info["kind"], True
        if info.get("schema") is not None:
            st["schema"] = info["schema"]


def shared_registry(cut: CutState) -> dict[tuple[str, int], dict[str, str]]:
    """What the next incremental checkpoint of every (uid, partition) builds on, from a completed
    checkpoint's parts: RocksDB SST files by shared key, a HashMap chain's entry."""
    registry: dict[tuple[str, int], dict[str, str]] = {}
    for parts in cut.parts.values():
        for part in parts:
            into = registry.setdefault((part.uid, part.partition), {})
            for h in part.files:
                if h.kind == "sst":
                    into[shared_key(part.uid, part.lineage, h.local_name or "", h.size)] = f"{h.path}|{h.sha256}"
            if is_chain(part.files):  # HashMap: the next checkpoint's changelog builds on it
                key, value = chain_entry(part, cut.checkpoint_id)
                into[key] = value
            elif is_rocksdb_chain(part.files):  # RocksDB with the changelog: the same
                key, value = chain_entry(part, cut.checkpoint_id, ROCKSDB_CHAIN_PREFIX)
                into[key] = value
    return registry


class CheckpointCoordinator:
    def __init__(self, settings: CheckpointSettings, graph: JobGraph, job_id: str, job_name: str, first_id: int = 1, options: dict | None = None, keyring: Any = None):
        self.settings = settings
        self.graph = graph
        self.job_id = job_id
        self.job_name = job_name
        self.declared: dict[str, dict[str, dict]] = {}  # the coordinator's declared_states (shared)
        self.runtime = "epoch"  # the runtime the job runs on ("continuous": its cuts end segments), in each _metadata's stats
        self.store = open_checkpoint_store(settings, job_id, options, keyring)
        self.access = self.store.access
        self.next_id = first_id
        self.history: list[CheckpointStats] = []
        self.pending: CutState | None = None
        self._future: Future | None = None
        # one checkpoint is in flight at a time; more threads let a new one start while the upload
        # of an expired one still hangs on slow storage
        self._pool = ThreadPoolExecutor(4, thread_name_prefix=f"flowpoint-checkpoint-{job_id[:8]}")
        self._last_trigger = time.monotonic()
        self._last_end = float("-inf")
        self._failures = CheckpointFailureManager(settings.tolerable_failures)
        self._flying: dict[int, CheckpointStats] = {}  # continuous runtime: barriers in flight
        self.completed: list[int] = []  # ids to announce to user functions with the next epoch
        self.aborted: list[int] = []
        self.on_completed: Any = None  # called with each completed checkpoint's CheckpointStats (the terminal's line)
        self.shared = SharedFiles()  # what incremental checkpoints reference
        self.requests: list[CheckpointRequest] = []  # asked for now, not yet triggered

    # -- triggering ----------------------------------------------------------------------------

    def request_now(self, full: bool = False) -> CheckpointRequest:
        """Trigger a checkpoint at the next opportunity (the next epoch boundary; the continuous
        runtime injects its barrier at once), regardless of the interval; ``full``: it writes
        every state file again instead of referencing those of earlier checkpoints."""
        request = CheckpointRequest(full)
        self.requests.append(request)
        return request

    def requested(self) -> bool:
        return any(r.checkpoint_id is None for r in list(self.requests))

    def _assign(self, cid: int) -> None:
        for r in list(self.requests):
            if r.checkpoint_id is None:
                r.checkpoint_id = cid
                if r.full:
                    self.shared.full_ids.add(cid)
        self.requests = [r for r in self.requests if r.checkpoint_id is None]

    @property
    def enabled(self) -> bool:
        return self.settings.enabled

    def due(self) -> bool:
        if not self.enabled or self.pending is not None:
            return False
        if self.requested():
            return True
        now = time.monotonic()
        return (now - self._last_trigger) * 1000 >= self.settings.interval_ms and (now - self._last_end) * 1000 >= self.settings.min_pause_ms

    def trigger(self, epoch: int, stateful: list[tuple[int, int]], sources: list[SplitPosition], sinks: dict[str, Any], records_read: int, watermarks: dict[str, Any] | None = None, *, checkpoint_id: int | None = None, trigger_ms: int | None = None) -> CheckpointStats:
        """A checkpoint of the cut at ``epoch``; the continuous runtime passes the id its
        barrier carried (:meth:`take_id`) and when it injected it."""
        cid = self.next_id if checkpoint_id is None else checkpoint_id
        self.next_id = max(self.next_id, cid + 1)
        if checkpoint_id is None:
            self._assign(cid)
        stats = self._flying.pop(cid, None)
        if stats is None:
            stats = CheckpointStats(cid, epoch, now_ms() if trigger_ms is None else trigger_ms)
            self.history.append(stats)
        stats.epoch = epoch
        cut = CutState(cid, epoch, sorted(stateful), sources, sinks, records_read, stats, watermarks=dict(watermarks or {}))
        stats.tasks_total = sum(len(self._keyed_uids(k[0])) for k in cut.stateful)
        self._last_trigger = time.monotonic()
        self.pending = cut
        return stats

    def sync_request(self) -> CheckpointTarget | None:
        """The checkpoint whose parts the next epoch's stateful tasks must write."""
        cut = self.pending
        if cut is None or not cut.awaiting_sync:
            return None
        return CheckpointTarget(cut.checkpoint_id, self.store.job_dir_uri(), inline=self.settings.storage != "filesystem")

    def take_id(self) -> int:
        """The id of a checkpoint whose barrier is injected now (continuous runtime); its stats
        show it IN_PROGRESS while the barrier flows."""
        cid = self.next_id
        self.next_id += 1
        self._assign(cid)
        stats = self._flying[cid] = CheckpointStats(cid, 0, now_ms())
        self.history.append(stats)
        return cid

    def ms_since_last_end(self) -> float:
        return (time.monotonic() - self._last_end) * 1000

    def reserve_id(self) -> int:
        """The next id for a savepoint (ids are shared): checkpoints continue after it."""
        cid = self.next_id
        self.next_id += 1
        self.store.continue_after(cid)
        return cid

    def shared_files(self, uid: str, partition: int, checkpoint_id: int | None = None) -> dict[str, str]:
        """The files of earlier checkpoints the checkpoint ``checkpoint_id`` (default: the
        pending one) may reference; none for a full checkpoint."""
        if checkpoint_id is None and self.pending is not None:
            checkpoint_id = self.pending.checkpoint_id
        return self.shared.files(uid, partition, checkpoint_id)

    def attach_snapshots(self, checkpoint_id: int, acks: list) -> None:
        """The epoch whose tasks wrote a checkpoint's parts committed: complete it in the
        background once every stateful partition acknowledged its parts."""
        cut = self.pending
        if cut is None or cut.checkpoint_id != checkpoint_id:
            return
        declined = []
        for ack in acks:
            if ack.snapshot is not None:
                cut.parts[(ack.stage_id, ack.partition)] = ack.snapshot
            if getattr(ack, "channel_state", None) is not None:
                cut.channel_state.append(ack.channel_state)
            if ack.snapshot_error:
                declined.append(f"stage {ack.stage_id} partition {ack.partition}: {ack.snapshot_error}")
        cut.awaiting_sync = False
        SharedFiles.note_uploads(cut)
        cut.stats.sync_ms = max((p.sync_ms for parts in cut.parts.values() for p in parts), default=0.0)
        elapsed = now_ms() - cut.stats.trigger_time_ms
        if elapsed > self.settings.timeout_ms:
            self._decline(cut, f"checkpoint {cut.checkpoint_id} expired after {self.settings.timeout_ms} ms before completing (its tasks took {elapsed} ms)")
            return
        if declined:
            self._decline(cut, f"checkpoint {cut.checkpoint_id} failed: a task could not write its parts ({'; '.join(declined)})")
            return
        missing = [k for k in cut.stateful if k not in cut.parts]
        if missing:
            self._decline(cut, f"checkpoint {cut.checkpoint_id} failed: no parts acknowledged by stateful tasks (stage, partition) {missing}")
            return
        self._future = self._pool.submit(self._write, cut)

    def _keyed_uids(self, stage_id: int) -> list[str]:
        stage = self.graph.stages[stage_id]
        return [self.graph.nodes[n].uid for n in stage.nodes if self.graph.nodes[n].keyed]

    # -- the asynchronous part -----------------------------------------------------------------

    def _write(self, cut: CutState) -> CheckpointMetadata:
        try:
            return self._write_checkpoint(cut)
        finally:
            if cut.cancelled:  # aborted while writing: remove what was written after the abort
                try:
                    self.store.abort(cut.checkpoint_id, list(cut.new_shared.values()))
                except Exception:  # noqa: BLE001
                    log.exception("could not remove the files of aborted checkpoint %d", cut.checkpoint_id)

    def _write_checkpoint(self, cut: CutState) -> CheckpointMetadata:
        """Assemble ``_metadata`` from the tasks' acknowledged parts (the parts are written)."""
        t0 = time.perf_counter()
        chk = self.store.begin(cut.checkpoint_id)
        operators, task_async = assemble_operators(self.graph, cut, self.settings.backend, self.declared, self.store)
        channel_files, in_flight = channel_state_files(cut, self.store)
        cut.stats.async_ms = task_async + (time.perf_counter() - t0) * 1000
        cut.stats.duration_ms = cut.stats.sync_ms + cut.stats.async_ms
        meta = checkpoint_metadata(
            cut, self.graph, self.settings.backend, operators, channel_files, in_flight,
            job_id=self.job_id, job_name=self.job_name, incremental=self.settings.incremental, runtime=self.runtime,
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
            # the tasks wrote the parts; what is left is writing _metadata, usually milliseconds:
            # a short wait lets the next checkpoint start at this epoch boundary
            with contextlib.suppress(Exception):
                future.result(timeout=0.2)
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
        cut.stats.end_to_end_ms = float(now_ms() - cut.stats.trigger_time_ms)
        self.shared.completed(cut)
        self.pending = None
        self._future = None
        self._last_end = time.monotonic()
        self._failures.succeeded()
        self.completed.append(cut.checkpoint_id)
        log.info("completed checkpoint %d (%s %d, %d bytes, %.0f ms)", cut.checkpoint_id, unit_name(self.runtime), cut.epoch, cut.stats.state_size, cut.stats.duration_ms)
        if self.on_completed is not None:
            self.on_completed(cut.stats)
        return meta

    def _decline(self, cut: CutState, reason: str) -> None:
        """The checkpoint failed or expired: it is dropped, and too many in a row fail the job."""
        self._fail(cut, reason)
        self._last_end = time.monotonic()
        self._failures.failed(reason)

    def expire(self, checkpoint_id: int, reason: str) -> None:
        """A barrier still flowing (continuous runtime) outlived ``execution.checkpointing.timeout``:
        its checkpoint fails now, as Flink expires a pending checkpoint, and counts towards
        ``tolerable-failed-checkpoints`` (raises CheckpointError beyond it). The segment the
        barrier closes still commits when it arrives; it completes no checkpoint."""
        stats = self._flying.pop(checkpoint_id, None)
        if stats is None:
            return
        stats.fail(reason)
        self.aborted.append(checkpoint_id)
        self._last_end = time.monotonic()
        self._failures.failed(reason)

    def abort_pending(self, reason: str) -> None:
        """A failover or the job's end: the in-flight checkpoint is aborted, unless its upload
        already completed it (then it counts as completed). Barriers still flowing (continuous
        runtime) fail with ``reason``; their files go with the job's incomplete checkpoints."""
        flying, self._flying = self._flying, {}
        for cid, stats in flying.items():
            stats.fail(reason)
            self.aborted.append(cid)
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
        cut.stats.fail(reason)
        self.pending = None
        self._future = None
        self.aborted.append(cut.checkpoint_id)
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

    def remove_incomplete(self) -> None:
        """After the job's last Spark job: no task writes any more; the directories of checkpoints
        that never completed go (a task's upload may have outlived the abort)."""
        if self.settings.storage == "filesystem" and self.store.job_access.exists():
            self.store.remove_incomplete()


def channel_state_files(cut: CutState, store: Any) -> tuple[list[ChannelStateFile], int]:
    """``_metadata``'s entries of an unaligned checkpoint's channel state files (driver-memory
    storage: their bytes are written here), and the exchange items they hold."""
    files, items = [], 0
    for part in cut.channel_state:
        h = part.handle
        if h.data is not None:
            write_carried(store.job_access, h)
        files.append(ChannelStateFile(h.path, h.size, h.sha256, list(part.stages), part.writer))
        cut.stats.state_size += h.size
        cut.stats.incremental_size += h.size
        cut.stats.channel_state_size += h.size
        items += part.items
    return files, items


def assemble_operators(graph: JobGraph, cut: CutState, backend: str, declared: dict, store: Any) -> tuple[dict[str, OperatorState], float]:
    """The operators' entries of a checkpoint's ``_metadata`` from its tasks' parts (driver-memory
    storage: the parts' bytes are written here), the cut's stats counted; and the slowest
    task's asynchronous part (ms)."""
    operators: dict[str, OperatorState] = {}
    task_async = 0.0
    for (stage_id, p), parts in sorted(cut.parts.items()):
        stage = graph.stages[stage_id]
        kgr = key_group_range_for_operator(stage.max_parallelism, stage.parallelism, p)
        for part in sorted(parts, key=lambda x: x.uid):
            files, size, uploaded = [], 0, 0
            for h in part.files:
                if h.data is not None:  # driver-memory storage: the task could not write it
                    write_carried(store.job_access, h)
                files.append(StateFile(h.path, h.size, h.kind, h.local_name, h.rows, h.sha256))
                size += h.size
                uploaded += h.size if h.uploaded else 0
            op = operators.get(part.uid)
            if op is None:
                node = graph.node_by_uid(part.uid)
                owner = graph.stages[node.stage_id]
                op = operators[part.uid] = OperatorState(part.uid, node.name, owner.parallelism, owner.max_parallelism, backend, [])
            op.subtasks.append(SubtaskState(p, kgr.start, kgr.end, files, part.num_keys, size, uploaded))
            merge_states(op, part.states)
            apply_declared(op, declared.get(part.uid))
            cut.stats.tasks_acknowledged += 1
            cut.stats.state_size += size
            cut.stats.incremental_size += uploaded
            cut.stats.operator_sizes[part.uid] = cut.stats.operator_sizes.get(part.uid, 0) + size
            task_async = max(task_async, part.async_ms)
    return operators, task_async


def open_checkpoint_store(settings: CheckpointSettings, job_id: str, options: dict | None, keyring: Any) -> CheckpointStore:
    """The store of the job's checkpoints: under ``state.checkpoints.dir`` (filesystem storage)
    or in driver memory; RocksDB's checkpoints are files and need the former."""
    if writes_native_files(settings.backend) and settings.storage != "filesystem":
        msg = (
            "EmbeddedRocksDBStateBackend checkpoints are files: they need filesystem checkpoint storage "
            "(state.checkpoints.dir or set_checkpoint_storage('file:///...')), not JobManagerCheckpointStorage"
        )
        raise CheckpointError(msg)
    root = settings.checkpoints_dir if settings.storage == "filesystem" else MEMORY_ROOT
    if root is None:
        msg = "filesystem checkpoint storage needs a directory: set state.checkpoints.dir or set_checkpoint_storage('file:///...')"
        raise CheckpointError(msg)
    store = CheckpointStore(CheckpointStorageAccess(root, options), job_id, settings.num_retained, keyring)
    store.init()
    return store


class CheckpointFailureManager:
    """Flink's ``CheckpointFailureManager``: checkpoints that fail (or expire) in a row; more than
    ``execution.checkpointing.tolerable-failed-checkpoints`` of them fail the job."""

    def __init__(self, tolerable: int) -> None:
        self.tolerable = tolerable
        self.consecutive = 0

    def failed(self, reason: str) -> None:
        """A checkpoint failed for ``reason``: logged; raises CheckpointError beyond the tolerance."""
        log.warning("%s", reason)
        self.consecutive += 1
        if self.consecutive > self.tolerable:
            msg = f"{reason}; {self.consecutive} consecutive checkpoint failures exceed tolerable-failed-checkpoints={self.tolerable}"
            raise CheckpointError(msg)

    def succeeded(self) -> None:
        self.consecutive = 0


class SharedFiles:
    """The shared-file bookkeeping of incremental checkpoints: the files of the last completed
    checkpoint that the next one of each (uid, partition) may reference, and the checkpoints
    that must reference none (full ones)."""

    def __init__(self) -> None:
        # from the last completed checkpoint: per (uid, partition), RocksDB's
        # "<uid>/<DB lineage>/<file>/<size>" -> "<path in shared/>|<sha256>", and HashMap's
        # "hashmap-chain/<uid>" -> its chain of parts (see backend.py)
        self.registry: dict[tuple[str, int], dict[str, str]] = {}
        self.full_ids: set[int] = set()  # checkpoints that reference no earlier checkpoint's files

    def files(self, uid: str, partition: int, checkpoint_id: int | None) -> dict[str, str]:
        """What checkpoint ``checkpoint_id`` of ``(uid, partition)`` may reference."""
        if checkpoint_id in self.full_ids:
            return {}
        return self.registry.get((uid, partition), {})

    def completed(self, cut: CutState) -> None:
        """``cut`` completed: the next checkpoints build on its files."""
        self.registry = shared_registry(cut)

    @staticmethod
    def note_uploads(cut: CutState) -> None:
        """Record in ``cut.new_shared`` the ``shared/`` files its tasks uploaded (removed again
        if it fails): new RocksDB SST files and HashMap chains' new parts."""
        for parts in cut.parts.values():
            for part in parts:
                for h in part.files:
                    if h.kind == "sst" and h.uploaded:
                        cut.new_shared[shared_key(part.uid, part.lineage, h.local_name or "", h.size)] = h.path
                    elif h.uploaded and h.path.startswith("shared/"):  # a HashMap chain's new part
                        cut.new_shared[h.path] = h.path


def checkpoint_metadata(
    cut: CutState, graph: JobGraph, backend: str, operators: dict[str, OperatorState], channel_files: list[ChannelStateFile],
    in_flight: int, *, job_id: str, job_name: str, incremental: bool, runtime: str,
) -> CheckpointMetadata:
    """The ``_metadata`` of the checkpoint of ``cut``: its operators' entries, its channel state
    files (``in_flight``: the exchange items they hold), and its stats."""
    return CheckpointMetadata(
        checkpoint_id=cut.checkpoint_id,
        job_id=job_id,
        job_name=job_name,
        kind="checkpoint",
        epoch=cut.epoch,
        trigger_time_ms=cut.stats.trigger_time_ms,
        completed_time_ms=now_ms(),
        max_parallelism=max((s.max_parallelism for s in graph.stages), default=128),
        backend=backend,
        incremental=(writes_native_files(backend) and incremental)
        or any(f.kind == "changelog" for op in operators.values() for sub in op.subtasks for f in sub.files),
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
            "runtime": runtime,
            **({"channel_state_size": sum(f.size for f in channel_files), "channel_state_items": in_flight} if channel_files else {}),
        },
        channel_state=channel_files,
    )
