"""The RocksDB partition backend: one RocksDB per keyed operator on the executor's local disk, a
cache of committed state, with deltas and bases (RocksDB checkpoints' files) in durable storage
and checkpoints of SSTs shared across checkpoints (or a changelog chain: state/rocksdb_changelog.py).
The factory in partition/backend.py loads this module only for a job on RocksDB."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable
from typing import Any

from flowpoint import private_files
from flowpoint.checkpoint.part_writer import (
    CheckpointParts,
    PartHandle,
    join,
    safe_name,
    upload_working_dir,
    working_name,
)
from flowpoint.checkpoint.parts import restore_db, restore_native
from flowpoint.clock import now_ms
from flowpoint.errors import io_errors
from flowpoint.partition import durable
from flowpoint.partition.backend import (
    ROCKSDB_CHAIN_PREFIX,
    PartitionBackend,
    db_path,
    read_chain_entry,
    restore_tables,
    shared_key,
    state_schemas,
)
from flowpoint.partition.committed_chain import CommittedChain, CommittedFile, TaskStateAck
from flowpoint.partition.protocol import (
    CheckpointTarget,
    OperatorPart,
    TaskSlice,
)
from flowpoint.partition.working import (
    TaskState,
)
from flowpoint.state import rocksdb_changelog
from flowpoint.state.compatibility import recorded_states
from flowpoint.state.rocksdb import RocksDBKeyedStateBackend, RocksDBMemory

_KINDS = ("value", "list", "map", "reducing", "aggregating")
_LINEAGE = "LINEAGE"  # the local DBs' lineage id, beside them


class RocksDBPartitionBackend(PartitionBackend):
    """One RocksDB per keyed operator on the executor's local disk (a cache holding only
    committed state); deltas and bases (RocksDB checkpoints' files) in durable storage. A local
    DB whose version is outside the committed chain's range (the partition ran elsewhere and its
    history moved past the last base) is discarded and rebuilt, never used."""

    kind = "rocksdb"

    @property
    def memory(self) -> Any:
        """The job's ``state.backend.rocksdb.memory.*`` (a RocksDBMemory)."""

        return RocksDBMemory(**dict(self.location.rocksdb_memory))

    def new_operator_backend(self, ts: TaskState, uid: str, name: str) -> Any:

        b = RocksDBKeyedStateBackend(name, db_path(ts.directory, uid), self.max_parallelism, uid=uid, memory=self.memory)
        b.open()
        if self.location.rocksdb_changelog:
            b.record_changes()
        if b.version() < ts.version:
            b.set_version(ts.version)  # an operator without state until now: empty at every epoch
        return b

    def acquire(self, stage_id: int, partition: int, chain: CommittedChain, uids: list[str]) -> tuple[TaskState, bool]:
        run = self.location.run_key
        ts = self.cache.get(run, stage_id, partition)
        directory = self.local_dir(stage_id, partition)
        fresh = ts is None
        if ts is None:
            ts = TaskState(self, directory, self.max_parallelism)
            self.cache.put(run, stage_id, partition, ts)
        ts.enter()  # held from here: the cache does not close it under this task
        try:
            return self._acquire(ts, fresh, directory, stage_id, partition, chain, uids)
        except BaseException:
            self.release(ts)  # the DBs it opened close (their locks too): the caller gets no state to release
            raise

    def _acquire(self, ts: TaskState, fresh: bool, directory: str, stage_id: int, partition: int, chain: CommittedChain, uids: list[str]) -> tuple[TaskState, bool]:
        if ts.pending is not None and not chain.is_committed(*ts.pending):
            ts.operators = None  # the functions may hold the failed attempt's fields
        elif ts.pending is not None:
            ts.version = ts.pending[0]
        if chain.version > ts.version:
            ts.operators = None  # another worker ran the epochs since
        ts.pending = None
        ts.chain = chain
        for b in ts.backends.values():
            b.rollback()  # the DB holds committed state only; the last attempt's changes were its overlay
        names = sorted(set(uids) | {f.uid for f in chain.restored} | set(ts.backends))
        if not self._usable(ts, directory, names, chain):
            fresh = True
            self._rebuild(ts, directory, names, chain)
        cache: dict[str, dict] = {}
        for uid in names:
            b = ts.backends.get(uid)
            if b is None:

                b = ts.backends[uid] = RocksDBKeyedStateBackend(uid, db_path(directory, uid), self.max_parallelism, uid=uid, memory=self.memory)
            b.open()
            if self.location.rocksdb_changelog:
                b.record_changes()  # the deltas committed from here on are the next changelog parts
            for f in chain.deltas:
                if f.epoch <= b.version():
                    continue
                delta = None
                if f.path:
                    per_uid = cache.get(f.path)
                    if per_uid is None:
                        per_uid = cache[f.path] = self.load(f, "delta", stage_id, partition)[1]
                    delta = per_uid.get(uid)
                b.apply(delta, version=f.epoch)
        ts.version = chain.version
        return ts, fresh

    def _usable(self, ts: TaskState, directory: str, names: list[str], chain: CommittedChain) -> bool:
        """Whether the local DBs hold a committed version this chain can continue from."""
        try:
            with open(os.path.join(directory, _LINEAGE)) as f:
                ts.db_id = f.read().strip()
        except OSError:
            return False
        for uid in names:
            b = ts.backends.get(uid)
            if b is None:
                if not os.path.exists(db_path(directory, uid)):
                    continue  # an operator without state yet (its empty DB starts at any version)

                b = ts.backends[uid] = RocksDBKeyedStateBackend(uid, db_path(directory, uid), self.max_parallelism, uid=uid, memory=self.memory)
            b.open()
            if not chain.base_epoch <= b.version() <= chain.version:
                return False
        return True

    def _rebuild(self, ts: TaskState, directory: str, names: list[str], chain: CommittedChain) -> None:
        """Discard the local DBs and make them again from the chain's base (or restore)."""

        for b in ts.backends.values():
            b.close()
        ts.backends = {}
        ts.operators = None
        shutil.rmtree(directory, ignore_errors=True)
        private_files.makedirs(directory)
        base_epoch = chain.base_epoch
        if chain.base is not None:
            by_uid: dict[str, list[tuple[str, str, int, str]]] = {}
            for uri, local_name, size, digest in chain.base.files:
                uid_dir, _, name = local_name.partition("/")
                by_uid.setdefault(uid_dir, []).append((uri, name, size, digest))
            for uid in names:
                files = by_uid.get(safe_name(uid))
                if files:
                    self._download(db_path(directory, uid), files)
        logs: dict[str, list[tuple[str, bytes]]] = {}
        if chain.base is None and chain.restored:
            for uid in names:
                restored = [f for f in chain.restored if f.uid == uid]
                native = [f for f in restored if f.files]
                if native:
                    logs[uid] = restore_native(db_path(directory, uid), native, self.location.options)
        for uid in names:
            b = ts.backends[uid] = RocksDBKeyedStateBackend(uid, db_path(directory, uid), self.max_parallelism, uid=uid, memory=self.memory)
            b.open()
            rocksdb_changelog.replay(b, logs.get(uid, []))
            tables = [f for f in chain.restored if f.uid == uid and not f.files] if chain.base is None else []
            if tables:
                restore_tables(b, tables, self.location.options)
            elif chain.base is None and chain.restored:
                b.restored_states = recorded_states(chain.restored, uid)
                b.remap_named_tuples({name: r.value_class for name, r in b.restored_states.items()})
            b.set_version(base_epoch)
        ts.db_id = uuid.uuid4().hex[:12]
        lineage = os.path.join(directory, _LINEAGE)
        with io_errors("write the local state file", lineage):
            private_files.write_private(lineage, ts.db_id.encode(), atomic=False)

    def _download(self, path: str, files: list[tuple[str, str, int, str]]) -> None:
        restore_db(path, ((name, durable.read_file(uri, size, digest, self.options, "base snapshot file"))
                          for uri, name, size, digest in files))

    def end_epoch(self, ts: TaskState, s: TaskSlice, epoch: int, token: str, pickled: dict[str, bytes] | None = None) -> TaskStateAck:
        base = None
        if s.compact:
            # the DBs hold the committed state this epoch started from: that is the new base
            tmp = os.path.join(ts.directory, f"base-{token}")
            shutil.rmtree(tmp, ignore_errors=True)
            files: list[tuple[str, str, int, str]] = []
            size = 0
            uri = join(self.durable_dir(s.stage_id, s.partition), working_name("base", ts.version, token, suffix=""))
            try:
                for uid, b in sorted(ts.backends.items()):
                    local = os.path.join(tmp, safe_name(uid))
                    b.create_checkpoint(local)
                    for h in upload_working_dir(local, join(uri, safe_name(uid)), self.options):
                        files.append((h.path, f"{safe_name(uid)}/{h.local_name}", h.size, h.sha256))
                        size += h.size
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            base = CommittedFile(ts.version, token, uri, size, None, tuple(files))
        delta, changed, total = self._write_delta(ts, s, epoch, token)
        return TaskStateAck(epoch, token, delta, base, changed, total)

    def commit_in_place(self, ts: TaskState, version: int) -> None:
        """The continuous runtime's commit at a barrier: the overlay's changes go into the DB,
        and the overlay goes (as an epoch's commit drops it). Kept, every key it ever held stayed
        dirty, so each later barrier wrote all of them again: a growing key set made every
        segment's write, flush and incremental checkpoint as large as the whole state, and the
        overlay held every key in memory (issue 27)."""
        for b in ts.backends.values():
            b.apply(b.delta(), version=version)
        ts.commit()
        ts.version = version

    def release(self, ts: TaskState) -> None:
        try:
            for b in ts.backends.values():
                b.close()  # releases the DBs' locks for the partition's next task, in any process
        finally:
            ts.leave()

    def snapshot(self, ts: TaskState, uids: list[str], partition: int, target: CheckpointTarget, shared: dict[str, str], pickled: dict | None = None) -> Callable[[], list[OperatorPart]]:
        """The synchronous part: a RocksDB checkpoint (hard links) of each operator's committed
        DB, or, with the changelog (``state.backend.changelog.enabled``) and a chain of this DB
        to build on, the deltas committed since that chain's last part. The asynchronous part
        uploads the new files (SSTs into ``shared/`` once) and returns the handles."""
        frozen = []
        root = os.path.join(ts.directory, f"chk-{target.checkpoint_id}")
        shutil.rmtree(root, ignore_errors=True)  # a retried task: the earlier attempt's copy
        changelog = self.location.rocksdb_changelog
        taken_ms = now_ms()
        for uid in uids:
            b = ts.backends.get(uid)
            if b is None:
                continue
            t0 = time.perf_counter()
            schemas = state_schemas(b)
            states = {name: {"kind": kind, "declared": True} | ({"schema": schemas[name]} if name in schemas else {}) for name, (_sid, kind) in b._names.items() if kind in _KINDS}
            for name, info in states.items():
                cls = b.value_class(name)
                if cls is not None:
                    info["value_class"] = cls
            log = self._changelog_part(ts, b, uid, shared) if changelog else None
            if log is not None:
                frozen.append((uid, None, log, b.num_keys(), (time.perf_counter() - t0) * 1000, states, b.version()))
                continue
            local = os.path.join(root, safe_name(uid))
            files = b.create_checkpoint(local)
            if changelog:
                b.materialized()
            frozen.append((uid, local, files, b.num_keys(), (time.perf_counter() - t0) * 1000, states, b.version()))
        options, incremental, db_id = self.options, self.location.incremental or changelog, ts.db_id

        def write() -> list[OperatorPart]:
            writer = CheckpointParts(target, options)
            parts = []
            try:
                for uid, local, files, keys, sync_ms, states, version in frozen:
                    t0 = time.perf_counter()
                    if local is None:  # a changelog part on the chain ``files`` holds
                        chain, entries, materialized_ms = files
                        handles = list(chain)
                        if entries:
                            handles.append(writer.rocksdb_changelog(uid, partition, db_id, rocksdb_changelog.encode(entries)))
                        parts.append(OperatorPart(uid, partition, handles, keys, sync_ms, (time.perf_counter() - t0) * 1000, db_id, states, version, materialized_ms))
                        continue
                    handles = []
                    for name, fsize in files:
                        sst = incremental and name.endswith(".sst")
                        if sst:
                            known = shared.get(shared_key(uid, db_id, name, fsize))
                            if known:
                                rel, digest = known.split("|", 1)
                                handles.append(PartHandle(rel, fsize, "sst", digest, name, uploaded=False))
                                continue
                        # a chain (changelog) outlives this checkpoint's directory: in shared/ too
                        handles.append(writer.rocksdb_file(uid, partition, db_id, local, name, fsize, "sst" if sst else "private", shared=changelog))
                    materialized_ms = taken_ms if changelog else 0
                    parts.append(OperatorPart(uid, partition, handles, keys, sync_ms, (time.perf_counter() - t0) * 1000, db_id, states, version, materialized_ms))
            finally:
                shutil.rmtree(root, ignore_errors=True)
            return parts

        return write

    def _changelog_part(self, ts: TaskState, b: Any, uid: str, shared: dict[str, str]) -> tuple[list[PartHandle], list, int] | None:
        """``(the chain, the deltas since its last part, its materialization time)`` when this
        checkpoint may be a changelog part on the last completed checkpoint's chain: the chain
        is this DB's and the DB's log holds every delta since. None: materialize, which a chain
        older than ``periodic-materialize.interval`` or with changelog parts larger than its
        materialization does at the checkpoint after the one that finds it due."""
        entry = read_chain_entry(shared, uid, ROCKSDB_CHAIN_PREFIX)
        if entry is None:
            return None
        _cid, lineage, version, chain, materialized_ms = entry
        if lineage != ts.db_id or b.materialize_next:
            return None
        changes = b.changes_since(version)
        if changes is None:
            return None
        entries, new_bytes = changes
        logged = sum(h.size for h in chain if h.kind == "changelog") + new_bytes
        if now_ms() - materialized_ms >= self.location.materialize_interval_ms or logged > sum(h.size for h in chain if h.kind != "changelog"):
            # due: the memtables start flushing in RocksDB's background threads now, and the next
            # checkpoint materializes, with little left to flush in the task's own thread
            b.flush_in_background()
        return chain, entries, materialized_ms

    def committed_tables(self, ts: TaskState, uids: list[str]) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
        tables, kinds = {}, {}
        for uid in uids:
            b = ts.backends.get(uid)
            if b is None:
                continue
            tables[uid] = b.snapshot()
            kinds[uid] = {name: kind for name, (_sid, kind) in b._names.items() if kind in _KINDS}
        return tables, kinds


