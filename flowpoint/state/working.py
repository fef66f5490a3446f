"""Where a task finds its working state from one epoch to the next.

PySpark reuses Python worker processes but does not send a partition to the same worker every
epoch. Each worker therefore keeps a process-wide cache of the task state it has held
(:class:`TaskStateCache`), and every epoch's changes are also written to a *delta file* on the
executor's local disk (``state.working.dir``). When epoch ``n`` of a partition starts, its task:

1. looks up the cached state for (job, stage, partition) in its own process;
2. if that copy holds the uncommitted changes of an earlier attempt, keeps them when the
   coordinator committed exactly that attempt (O(1)), or undoes them (O(changed keys));
3. brings the copy up to the committed version by applying the delta files of the epochs it
   missed (O(changes since it last ran here));
4. only a worker that never held the partition loads the last base snapshot plus the deltas
   after it (O(state)), once.

The coordinator asks a task to write a new base snapshot when the deltas since the last base
outgrow it, so cold loads stay bounded and old files are removed. See docs/state.md.
"""

from __future__ import annotations

import os
import pickle
import shutil
import tempfile
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from flowpoint.state.heap import HeapKeyedStateBackend
from flowpoint.state.keygroups import assign_to_key_group
from flowpoint.tasks.batches import dumps


@dataclass(frozen=True)
class CommittedFile:
    epoch: int
    token: str
    path: str | None  # None: the epoch changed nothing
    size: int = 0


@dataclass(frozen=True)
class RestoredFile:
    """A full snapshot of one operator's state in checkpoint storage (a restore's starting point)."""

    uid: str
    uri: str
    size: int = 0
    key_groups: tuple[int, int, int] | None = None  # (first, last, max parallelism): keep only these (rescaling)
    data: bytes | None = None  # the file itself, when executors cannot read the URI (driver-memory storage)
    files: tuple[tuple[str, str], ...] = ()  # RocksDB: (uri, name in the DB directory) of a native snapshot
    epoch: int = 0  # the checkpoint's epoch
    format: str = "pickle"  # "pickle" (a HashMap checkpoint's snapshot) | "canonical" (savepoint Parquet rows)
    kinds: tuple[tuple[str, str], ...] = ()  # canonical: (state name, kind) of every state
    declared: tuple[str, ...] = ()  # canonical: the state names whose kind is declared, not inferred


@dataclass(frozen=True)
class CommittedChain:
    """What the coordinator committed for one (stage, partition): the last committed task
    attempt, and for stateful stages the base snapshot and the deltas after it. After a restore,
    ``restored`` holds the checkpoint's snapshot files the base and deltas build on."""

    base: CommittedFile | None = None
    deltas: tuple[CommittedFile, ...] = ()
    last_epoch: int = 0
    last_token: str | None = None
    restored: tuple[RestoredFile, ...] = ()

    def files(self) -> list[str]:
        """The local working files this chain reads."""
        return [f.path for f in [self.base, *self.deltas] if f is not None and f.path]

    @property
    def version(self) -> int:
        return self.last_epoch

    def is_committed(self, epoch: int, token: str) -> bool:
        if epoch == self.last_epoch:
            return token == self.last_token
        return any(f.epoch == epoch and f.token == token for f in self.deltas)

    def delta_bytes(self) -> int:
        return sum(f.size for f in self.deltas)

    def wants_base(self, min_bytes: int = 1 << 20, max_deltas: int = 200) -> bool:
        base_size = self.base.size if self.base else sum(f.size for f in self.restored)
        return self.delta_bytes() > max(base_size, min_bytes) or len(self.deltas) >= max_deltas

    def committed(self, epoch: int, token: str, state: TaskStateAck | None) -> CommittedChain:
        if state is not None and state.applied is not None:
            # RocksDB: the partition's DBs durably hold every epoch up to ``applied`` (and any restore)
            kept = tuple(f for f in self.deltas if f.epoch > state.applied)
            if state.path:
                kept = (*kept, CommittedFile(epoch, token, state.path, state.size))
            return CommittedChain(None, kept, epoch, token)
        if state is None:
            return CommittedChain(self.base, self.deltas, epoch, token, self.restored)
        f = CommittedFile(epoch, token, state.path, state.size)
        if state.is_base:
            return CommittedChain(f, (), epoch, token)
        return CommittedChain(self.base, (*self.deltas, f), epoch, token, self.restored)


@dataclass(frozen=True)
class TaskStateAck:
    """A task's report of the state file it wrote for an epoch."""

    epoch: int
    token: str
    path: str | None
    size: int
    is_base: bool
    changed_keys: int
    total_keys: int
    applied: int | None = None  # RocksDB: the committed epoch the partition's DBs hold


class TaskState:
    """The keyed state backends (one per keyed operator) of one partition, in one worker.

    ``kind`` is the state backend: "hashmap" (dicts in this process) or "rocksdb" (a DB per
    operator under ``directory``, opened for the length of a task; see rocksdb_working.py).
    """

    def __init__(self, kind: str = "hashmap", directory: str = "", max_parallelism: int = 128) -> None:
        self.kind = kind
        self.directory = directory
        self.max_parallelism = max_parallelism
        self.backends: dict[str, Any] = {}
        self.version = 0
        self.pending: tuple[int, str] | None = None
        self.operators: Any = None  # the opened operator chain bound to these backends
        self.chain: CommittedChain | None = None
        self._deltas: dict[str, dict[str, Any]] = {}

    def backend(self, uid: str, name: str) -> Any:
        b = self.backends.get(uid)
        if b is None:
            if self.kind == "rocksdb":
                from flowpoint.state.rocksdb import RocksDBKeyedStateBackend
                from flowpoint.state.rocksdb_working import catch_up, db_path

                b = RocksDBKeyedStateBackend(name, db_path(self.directory, uid), self.max_parallelism)
                catch_up(b, uid, self.chain or CommittedChain(), self._deltas)
            else:
                b = HeapKeyedStateBackend(name)
            self.backends[uid] = b
        return b

    def open_rocksdb(self, chain: CommittedChain) -> None:
        """Start of a task: drop uncommitted overlays, open the DBs, catch up to ``chain``."""
        from flowpoint.state.rocksdb_working import catch_up

        self.chain = chain
        self._deltas = {}
        for uid, b in self.backends.items():
            b.rollback()
            catch_up(b, uid, chain, self._deltas)

    def close_rocksdb(self) -> int:
        """End of a task: flush and close the DBs; returns the epoch they all durably hold."""
        applied = min((b.version() for b in self.backends.values()), default=0)
        for b in self.backends.values():
            b.close()
        self._deltas = {}
        return applied

    def apply_file(self, path: str) -> None:
        with open(path, "rb") as f:
            content = pickle.load(f)
        kind, per_uid = content
        for uid, data in per_uid.items():
            b = self.backends.get(uid)
            if b is None:
                b = self.backends[uid] = HeapKeyedStateBackend(uid)
            if kind == "base":
                b.restore(data)
            else:
                b.apply(data)

    def apply_restored(self, files: tuple[RestoredFile, ...]) -> None:
        """Load a checkpoint's full snapshots (``{state name: table}`` per operator uid)."""
        for uid, tables in load_restored(files).items():
            self.backend(uid, uid).restore(tables)
        self.commit()

    def rollback(self) -> None:
        for b in self.backends.values():
            b.rollback()

    def commit(self) -> None:
        for b in self.backends.values():
            b.commit()


class TaskStateCache:
    """Process-wide: (job id, stage id, partition) -> :class:`TaskState` (LRU over jobs)."""

    MAX_JOBS = 4

    def __init__(self) -> None:
        self._by_job: OrderedDict[str, dict[tuple[int, int], TaskState]] = OrderedDict()

    def acquire(self, job_id: str, stage_id: int, partition: int, chain: CommittedChain) -> tuple[TaskState, bool]:
        """The state of a partition at the chain's committed version; ``fresh`` if rebuilt."""
        entries = self._entries(job_id)
        ts = entries.get((stage_id, partition))
        fresh = False
        if ts is not None and ts.pending is not None:
            epoch, token = ts.pending
            ts.pending = None
            if epoch == ts.version + 1 and chain.is_committed(epoch, token):
                ts.commit()
                ts.version = epoch
            else:
                ts.rollback()
                ts.operators = None  # the functions may hold the failed attempt's fields
        base_epoch = chain.base.epoch if chain.base else 0
        if ts is not None and (ts.version > chain.version or ts.version < base_epoch):
            ts = None
        if ts is None:
            ts = TaskState()
            fresh = True
            if chain.base is not None and chain.base.path:
                ts.apply_file(chain.base.path)
            else:
                ts.apply_restored(chain.restored)
            ts.version = base_epoch
            entries[(stage_id, partition)] = ts
        if chain.version > ts.version:
            # another worker ran the epochs since: the opened operators (their timer queues,
            # their functions' fields) no longer match the state they are about to see
            ts.operators = None
        for f in chain.deltas:
            if f.epoch > ts.version:
                if f.path:
                    ts.apply_file(f.path)
                ts.commit()
                ts.version = f.epoch
        ts.version = chain.version  # epochs without deltas changed no state here
        return ts, fresh

    def acquire_rocksdb(self, job_id: str, stage_id: int, partition: int, chain: CommittedChain, directory: str, max_parallelism: int) -> tuple[TaskState, bool]:
        """RocksDB: the partition's DBs opened at the chain's committed version."""
        entries = self._entries(job_id)
        ts = entries.get((stage_id, partition))
        fresh = ts is None
        if ts is None:
            ts = entries[(stage_id, partition)] = TaskState("rocksdb", directory, max_parallelism)
        elif ts.pending is not None and not chain.is_committed(*ts.pending):
            ts.operators = None  # the functions may hold the failed attempt's fields
        elif ts.pending is not None:
            ts.version = ts.pending[0]
        if chain.version > ts.version:
            ts.operators = None  # another worker ran the epochs since (see acquire)
        ts.version = chain.version
        ts.pending = None
        ts.open_rocksdb(chain)
        return ts, fresh

    def _entries(self, job_id: str) -> dict[tuple[int, int], TaskState]:
        jobs = self._by_job
        entries = jobs.get(job_id)
        if entries is None:
            entries = jobs[job_id] = {}
            while len(jobs) > self.MAX_JOBS:
                jobs.popitem(last=False)
        else:
            jobs.move_to_end(job_id)
        return entries

    def drop(self, job_id: str, stage_id: int | None = None, partition: int | None = None) -> None:
        if stage_id is None:
            self._by_job.pop(job_id, None)
            return
        entries = self._by_job.get(job_id)
        if entries:
            entries.pop((stage_id, partition), None)  # type: ignore[arg-type]


CACHE = TaskStateCache()


def partition_dir(root: str, job_id: str, stage_id: int, partition: int) -> str:
    return os.path.join(root, job_id, f"stage-{stage_id}", f"part-{partition}")


def write_state_file(directory: str, kind: str, epoch: int, token: str, per_uid: dict[str, Any]) -> tuple[str, int]:
    """Write a delta or base file atomically; returns its path and size."""
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, f"{kind}-{epoch:08d}-{token}.pkl")
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(dumps((kind, per_uid)))
    os.replace(tmp, path)
    return path, os.path.getsize(path)


def load_restored(files: tuple[RestoredFile, ...] | list[RestoredFile]) -> dict[str, dict[str, dict[Any, Any]]]:
    """A checkpoint's full snapshots merged per operator uid, each file keeping only its key
    groups: ``{uid: {state name: {key: value}}}``."""
    merged: dict[str, dict[str, dict[Any, Any]]] = {}
    for f in files:
        if f.format == "canonical":
            from flowpoint.checkpoint.savepoint import decode_rows, read_parquet

            data = f.data if f.data is not None else read_uri(f.uri)
            kgs = None if f.key_groups is None else f.key_groups[:2]
            into = merged.setdefault(f.uid, {})
            for name, table in decode_rows(read_parquet(data, f.uri), dict(f.kinds), kgs).items():
                into.setdefault(name, {}).update(table)
            continue
        tables = pickle.loads(f.data if f.data is not None else read_uri(f.uri))
        into = merged.setdefault(f.uid, {})
        for name, table in tables.items():
            if f.key_groups is not None:
                first, last, max_parallelism = f.key_groups
                table = {k: v for k, v in table.items() if first <= assign_to_key_group(k, max_parallelism) <= last}
            into.setdefault(name, {}).update(table)
    return merged


def read_uri(uri: str) -> bytes:
    """The bytes of a file in checkpoint storage (any URI the storage layer opens)."""
    from flowpoint.checkpoint.storage import read_uri_bytes

    return read_uri_bytes(uri)


def remove_files_before(directory: str, chain: CommittedChain, pinned: frozenset[str] = frozenset()) -> None:
    """Delete files the committed chain no longer needs (older than its base, failed attempts),
    except ``pinned`` ones (read by a checkpoint still being written)."""
    if chain.base is None or not os.path.isdir(directory):
        return
    keep = {os.path.basename(f.path) for f in [chain.base, *chain.deltas] if f.path}
    keep |= {os.path.basename(p) for p in pinned}
    for name in os.listdir(directory):
        try:
            epoch = int(name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if name not in keep and epoch <= chain.version:
            try:
                os.remove(os.path.join(directory, name))
            except FileNotFoundError:
                pass


def default_working_dir() -> str:
    return os.path.join(tempfile.gettempdir(), f"flowpoint-state-{os.getuid() if hasattr(os, 'getuid') else 'user'}")


def remove_job_dir(root: str, job_id: str) -> None:
    shutil.rmtree(os.path.join(root, job_id), ignore_errors=True)


def read_committed_tables(chain: CommittedChain) -> dict[str, dict[str, dict[Any, Any]]]:
    """Committed state of one partition from its files: ``{uid: {state name: {key: value}}}``."""
    ts = TaskState()
    if chain.base is not None and chain.base.path:
        ts.apply_file(chain.base.path)
    else:
        ts.apply_restored(chain.restored)
    for f in chain.deltas:
        if f.path:
            ts.apply_file(f.path)
        ts.commit()
    return {uid: b.snapshot() for uid, b in ts.backends.items()}
