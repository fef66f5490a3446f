"""The runtime state backend: one abstraction over HashMap and RocksDB working state.

As Flink's ``StateBackend`` creates a keyed backend per task (and quix-streams' store ->
partition -> transaction), :func:`partition_backend` returns the backend of one job run, and a
task uses it through five steps:

- :meth:`PartitionBackend.acquire`: the partition's state at the committed version (from this
  process's cache, caught up with durable deltas, or rebuilt from the durable base on any host);
- :meth:`PartitionBackend.end_epoch`: make the epoch's changes durable (a delta, or a new base)
  and report them in the acknowledgement;
- :meth:`PartitionBackend.snapshot`: the synchronous part of a checkpoint (a frozen copy of the
  committed state), returning the asynchronous part, which writes the task's checkpoint parts
  to checkpoint storage and returns their handles;
- :meth:`PartitionBackend.committed_tables`: committed state as tables, for savepoints and
  queries, read on the executor that holds (or rebuilds) the partition;
- :meth:`PartitionBackend.release`: the task's end (RocksDB closes its DBs).

This module is the only place that chooses by backend name.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import time
from collections.abc import Callable
from typing import Any

from flowpoint.checkpoint.integrity import check_tables, decode, misshapen
from flowpoint.checkpoint.part_writer import (
    CheckpointParts,
    CheckpointTarget,
    PartHandle,
    join,
    safe_name,
    working_dir,
    working_name,
    write_working_file,
)
from flowpoint.checkpoint.parts import RestoredFile
from flowpoint.partition import durable
from flowpoint.partition.committed_chain import CommittedChain, CommittedFile, TaskStateAck
from flowpoint.partition.protocol import OperatorPart, StateLocation, TaskSlice
from flowpoint.partition.working import (
    ChangeTracker,
    TaskState,
    TaskStateCache,
    ensure_working_dir,
    load_restored,
    partition_dir,
    task_states,
)
from flowpoint.pickles import dumps, dumps_tagged
from flowpoint.state.compatibility import infer_kind, recorded_states, sample_value_class
from flowpoint.state.heap import HeapKeyedStateBackend, puts_and_deletes
from flowpoint.state.key_identity import key_table

BACKENDS = ("hashmap", "rocksdb")


class PartitionBackend:
    kind = ""

    def __init__(self, location: StateLocation, max_parallelism: int, cache: TaskStateCache | None = None) -> None:
        self.location = location
        self.max_parallelism = max_parallelism
        self.options = location.storage_options
        self.cache = task_states() if cache is None else cache  # this process's partitions (tests pass their own)
        self._root: str | None = None

    # -- places --------------------------------------------------------------------------------

    @property
    def root(self) -> str:
        """This host's working directory: ``state.working.dir`` or this user's default here,
        created private (0700) or checked (refused if another user owns it or can write it)."""
        if self._root is None:
            self._root = ensure_working_dir(self.location.local_dir or None)
        return self._root

    def local_dir(self, stage_id: int, partition: int) -> str:
        return partition_dir(self.root, self.location.run_key, stage_id, partition)

    def durable_dir(self, stage_id: int, partition: int) -> str:
        return working_dir(self.location.durable_uri, self.location.run_key, stage_id, partition)

    def cache_path(self, stage_id: int, partition: int, uri: str) -> str:
        """This executor's local copy of a durable file of the partition."""
        return os.path.join(self.local_dir(stage_id, partition), "durable", uri.rstrip("/").rsplit("/", 1)[-1])

    def read(self, f: CommittedFile, what: str, stage_id: int, partition: int) -> bytes:
        uri = f.path or ""
        return durable.read_file(uri, f.size, f.sha256, self.options, what, self.cache_path(stage_id, partition, uri))

    def load(self, f: CommittedFile, what: str, stage_id: int, partition: int) -> Any:
        """The unpickled contents of a committed durable file (:meth:`read`); StateDecodeError
        naming it when it matches its checksum but does not unpickle."""
        data = self.read(f, what, stage_id, partition)
        payload = decode(pickle.loads, data, f.path or "", None, f"working {what}", durable.RESTORE_HINT)
        if not (type(payload) is tuple and len(payload) == 2 and payload[0] in ("base", "delta") and isinstance(payload[1], dict) and all(isinstance(u, str) for u in payload[1])):
            raise misshapen(f.path or "", f"it holds a {type(payload).__name__}, not a base or delta per operator", None, None, f"working {what}", durable.RESTORE_HINT)
        return payload

    def write(self, stage_id: int, partition: int, name: str, data: bytes) -> tuple[str, int, str]:
        uri = join(self.durable_dir(stage_id, partition), name)
        h = write_working_file(uri, data, self.options, self.cache_path(stage_id, partition, uri))
        return h.path, h.size, h.sha256

    def prune(self, stage_id: int, partition: int, chain: CommittedChain) -> None:
        if chain.base is not None:
            durable.prune_cache(os.path.join(self.local_dir(stage_id, partition), "durable"), chain.base.epoch)

    # -- the task's steps ----------------------------------------------------------------------

    def acquire(self, stage_id: int, partition: int, chain: CommittedChain, uids: list[str]) -> tuple[TaskState, bool]:
        raise NotImplementedError

    def begin_task(self, s: TaskSlice) -> None:
        """Delete the durable files the last commit superseded."""
        if s.chain.obsolete:
            durable.delete(s.chain.obsolete, self.options)
        self.prune(s.stage_id, s.partition, s.chain)

    def end_epoch(self, ts: TaskState, s: TaskSlice, epoch: int, token: str, pickled: dict[str, bytes] | None = None) -> TaskStateAck:
        raise NotImplementedError

    def release(self, ts: TaskState) -> None:
        """The task that acquired ``ts`` ended (whatever way)."""
        ts.leave()

    def discard(self, stage_id: int, partition: int) -> None:
        """The job finished (its last state is committed and durable): this process forgets the
        partition (its cached state, closed) and this host's working files of it go, with the
        job's directories they leave empty. What the driver's removal job does for a whole job,
        done by the continuous slot that held the partition (``release`` it first)."""
        run = self.location.run_key
        self.cache.drop(run, stage_id, partition)
        path = self.local_dir(stage_id, partition)
        shutil.rmtree(path, ignore_errors=True)
        top = os.path.join(self.root, run.split("/", 1)[0])
        while os.path.dirname(path) != os.path.dirname(top):  # up to the job's directory, itself included
            path = os.path.dirname(path)
            try:
                os.rmdir(path)  # only when empty: another partition's files stay
            except OSError:
                break

    def commit_in_place(self, ts: TaskState, version: int) -> None:
        """The continuous runtime's barrier: the changes since the last barrier become the
        committed state ``version`` in this process (no durable delta: a failure restarts the
        job from its last completed checkpoint, docs/architecture.md, section 4b)."""
        raise NotImplementedError

    def snapshot(self, ts: TaskState, uids: list[str], partition: int, target: CheckpointTarget, shared: dict[str, str],
                 pickled: dict[str, bytes] | None = None) -> Callable[[], list[OperatorPart]]:
        raise NotImplementedError

    def committed_tables(self, ts: TaskState, uids: list[str]) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
        raise NotImplementedError

    def new_operator_backend(self, ts: TaskState, uid: str, name: str) -> Any:
        raise NotImplementedError

    def _write_delta(self, ts: TaskState, s: TaskSlice, epoch: int, token: str) -> tuple[CommittedFile | None, int, int]:
        changed = sum(b.changed_keys() for b in ts.backends.values())
        total = sum(b.num_keys() for b in ts.backends.values())
        if not changed:
            return None, changed, total
        per_uid = {uid: b.delta() for uid, b in ts.backends.items()}
        uri, size, digest = self.write(s.stage_id, s.partition, working_name("delta", epoch, token), dumps(("delta", per_uid)))
        return CommittedFile(epoch, token, uri, size, digest), changed, total


def _num_keys(tables: dict[str, dict]) -> int:
    if len(tables) <= 1:
        return sum(len(t) for t in tables.values())
    keys: set = set()
    for t in tables.values():
        keys.update(t.keys())
    return len(keys)


# -- HashMap -----------------------------------------------------------------------------------


class HashMapPartitionBackend(PartitionBackend):
    """Objects in this worker's memory; deltas and full-snapshot bases in durable storage."""

    kind = "hashmap"

    def new_operator_backend(self, ts: TaskState, uid: str, name: str) -> Any:
        return HeapKeyedStateBackend(name, uid=uid)

    def _apply_file(self, ts: TaskState, f: CommittedFile, what: str, stage_id: int, partition: int) -> None:
        kind, per_uid = self.load(f, what, stage_id, partition)
        for uid, data in per_uid.items():
            check_tables(data, kind != "base", f.path or "", uid, None, f"working {what}")
        for uid, data in per_uid.items():
            b = ts.backend(uid, uid)
            if kind == "base":
                b.restore(data)
            else:
                b.apply(data)
                tracker = ts.changes
                if tracker is not None:  # epochs another worker ran: their keys changed here too
                    for name, (puts, deletes) in data.items():
                        tracker.add(uid, name, key_table(puts))
                        tracker.add(uid, name, key_table(dict.fromkeys(deletes)))

    @staticmethod
    def _track(ts: TaskState) -> None:
        """The epoch whose changes the undo logs hold committed: remember its keys for the next
        incremental checkpoint (O(changed keys))."""
        tracker = ts.changes
        for uid, b in ts.backends.items():
            for name, undo in b.undo.items():
                if undo:
                    tracker.add(uid, name, undo.keys())  # type: ignore[union-attr]

    def acquire(self, stage_id: int, partition: int, chain: CommittedChain, uids: list[str]) -> tuple[TaskState, bool]:
        run = self.location.run_key
        ts = self.cache.get(run, stage_id, partition)
        fresh = False
        if ts is not None and ts.pending is not None:
            epoch, token = ts.pending
            ts.pending = None
            if epoch == ts.version + 1 and chain.is_committed(epoch, token):
                if ts.changes is not None:
                    self._track(ts)
                ts.commit()
                ts.version = epoch
            else:
                ts.rollback()
                ts.operators = None  # the functions may hold the failed attempt's fields
        if ts is not None and (ts.version > chain.version or ts.version < chain.base_epoch):
            ts = None
        if ts is None:
            ts = TaskState(self, "", self.max_parallelism)
            fresh = True
            if chain.base is not None and chain.base.path:
                self._apply_file(ts, chain.base, "base snapshot", stage_id, partition)
            elif chain.restored:
                for uid, tables in load_restored(chain.restored, self.location.options).items():
                    b = ts.backend(uid, uid)
                    b.restore(tables)
                    b.restored_states = recorded_states(chain.restored, uid, tables)
            ts.commit()
            ts.version = chain.base_epoch
            if self.location.changelog:
                ts.changes = ChangeTracker(ts.version)  # changes are known from this version on
            self.cache.put(run, stage_id, partition, ts)
        if chain.version > ts.version:
            # another worker ran the epochs since: the opened operators (their timer queues,
            # their functions' fields) no longer match the state they are about to see
            ts.operators = None
        for f in chain.deltas:
            if f.epoch > ts.version:
                if f.path:
                    self._apply_file(ts, f, "delta", stage_id, partition)
                ts.commit()
                ts.version = f.epoch
        ts.version = chain.version  # epochs without deltas changed no state here
        ts.chain = chain
        ts.enter()
        return ts, fresh

    def end_epoch(self, ts: TaskState, s: TaskSlice, epoch: int, token: str, pickled: dict[str, bytes] | None = None) -> TaskStateAck:
        """``pickled``: a dict that gets the operator's pickled tables when a new base is written
        (one keyed operator), for :meth:`snapshot` at the same barrier to reuse."""
        if s.compact:
            changed = sum(b.changed_keys() for b in ts.backends.values())
            total = sum(b.num_keys() for b in ts.backends.values())
            per_uid = {uid: b.snapshot() for uid, b in ts.backends.items()}
            uri, size, digest = self.write(s.stage_id, s.partition, working_name("base", epoch, token), _base_bytes(per_uid, pickled))
            return TaskStateAck(epoch, token, None, CommittedFile(epoch, token, uri, size, digest), changed, total)
        delta, changed, total = self._write_delta(ts, s, epoch, token)
        return TaskStateAck(epoch, token, delta, None, changed, total)

    def commit_in_place(self, ts: TaskState, version: int) -> None:
        if ts.changes is not None:
            self._track(ts)
        ts.commit()
        ts.version = version

    def snapshot(self, ts: TaskState, uids: list[str], partition: int, target: CheckpointTarget, shared: dict[str, str],
                 pickled: dict[str, bytes] | None = None) -> Callable[[], list[OperatorPart]]:
        """The synchronous part: each operator's committed state pickled, either whole (a full
        snapshot) or as a changelog on top of the last completed checkpoint's parts: the keys
        set and deleted since then (:meth:`_incremental_part`). Driver-memory storage, and
        ``state.backend.hashmap.changelog.max-ratio: 0``, always write full snapshots. The
        asynchronous part writes the new files and returns the handles. ``pickled``: operators'
        tables :meth:`end_epoch` pickled at this barrier (the same committed state)."""
        pickled = pickled or {}
        tracker = ts.changes if self.location.changelog and not target.inline else None
        incremental = tracker is not None
        frozen = []
        known: dict[int, dict | None] = {}  # version -> the keys changed since (one union for every operator)
        for uid in uids:
            t0 = time.perf_counter()
            b = ts.backends.get(uid)
            tables = b.snapshot() if b is not None else {}
            states = {name: _heap_kind(b, name, t) | {"keys": len(t)} for name, t in tables.items() if t}
            chain: list[PartHandle] = []
            if tracker is not None:
                data, kind, keys, chain = self._incremental_part(tracker, uid, tables, shared, known, pickled.get(uid))
            else:
                data, kind, keys = pickled.get(uid) or dumps(tables), "full", _num_keys(tables)
            frozen.append((uid, data, kind, chain, keys, (time.perf_counter() - t0) * 1000, states))
        if tracker is not None:
            tracker.cut(ts.version)
        options, version, run = self.options, ts.version, self.location.run_key

        def write() -> list[OperatorPart]:
            writer = CheckpointParts(target, options)
            parts = []
            for uid, data, kind, chain, keys, sync_ms, states in frozen:
                t0 = time.perf_counter()
                if data is None:  # nothing changed since the last completed checkpoint: its parts again
                    parts.append(OperatorPart(uid, partition, chain, keys, sync_ms, 0.0, run, states, version))
                    continue
                h = writer.hashmap(uid, partition, data, kind, shared=incremental)  # incremental: in shared/, later checkpoints list it too
                parts.append(OperatorPart(uid, partition, [*chain, h], keys, sync_ms, (time.perf_counter() - t0) * 1000, run, states, version))
            return parts

        return write

    def _incremental_part(self, tracker: ChangeTracker, uid: str, tables: dict[str, dict], shared: dict[str, str], known: dict[int, dict | None],
                          pickled: bytes | None = None) -> tuple[bytes | None, str, int, list[PartHandle]]:
        """``(bytes, kind, keys, the earlier parts it builds on)`` of one operator's part: a
        changelog on top of the last completed checkpoint's chain when this copy of the state
        knows every key changed since that checkpoint's snapshot and the chain stays within
        ``state.backend.hashmap.changelog.*``, else a full snapshot (a new chain). No bytes: no
        key changed, the part is that chain as it is."""
        loc = self.location
        previous = read_chain(shared, uid)
        if previous is not None and previous[1] != loc.run_key:
            previous = None  # another run's history (a restart): its versions are not this run's
        changes = None
        if previous is not None:
            if previous[2] not in known:
                known[previous[2]] = tracker.since(previous[2])
            changes = known[previous[2]]
        if changes is not None and previous is not None:
            chain = previous[3]
            full_size = sum(h.size for h in chain if h.kind == "full")
            logs = [h for h in chain if h.kind == "changelog"]
            # several states: the largest one's keys (counting distinct keys would cost O(state))
            keys = max((len(t) for t in tables.values()), default=0)
            log = changelog(tables, {name: keys for (u, name), keys in changes.items() if u == uid})
            if not log:
                return None, "changelog", keys, chain
            if len(logs) < loc.changelog_max_parts:
                data = dumps(log)
                if sum(h.size for h in logs) + len(data) <= loc.changelog_max_ratio * full_size:
                    return data, "changelog", keys, chain
        return pickled or dumps(tables), "full", _num_keys(tables), []

    def committed_tables(self, ts: TaskState, uids: list[str]) -> tuple[dict[str, dict], dict[str, dict[str, str]]]:
        tables, kinds = {}, {}
        for uid in uids:
            b = ts.backends.get(uid)
            if b is None:
                continue
            tables[uid] = b.snapshot()
            known = {name: _heap_kind(b, name, t) for name, t in tables[uid].items()}
            kinds[uid] = {name: k["kind"] for name, k in known.items() if k["declared"]}
        return tables, kinds


def _base_bytes(per_uid: dict[str, dict], pickled: dict[str, bytes] | None) -> bytes:
    """A base file's bytes, ``("base", {uid: tables})`` pickled. With ``pickled`` and one
    operator, its tables are pickled alone first and kept in ``pickled`` (the checkpoint's full
    part at the same barrier is those bytes), and the base is built around them: 1,000,000 keys
    are pickled once, not twice, at a job's final barrier (``dumps_tagged``)."""
    if pickled is not None and len(per_uid) == 1:
        (uid, tables), = per_uid.items()
        inner = dumps(tables)
        data = dumps_tagged("base", uid, inner)
        if data is not None:
            pickled[uid] = inner
            return data
    return dumps(("base", per_uid))


def changelog(tables: dict[str, dict], changes: dict[str, set]) -> dict[str, tuple[dict, list]]:
    """A HashMap changelog part: ``{state name: (puts {key: value}, deletes [key])}`` of the
    changed keys, with their committed values now (a key no longer in a table is deleted)."""
    out: dict[str, tuple[dict, list]] = {}
    for name, keys in changes.items():
        puts, deletes = puts_and_deletes(tables.get(name, {}), keys)
        if puts or deletes:
            out[name] = (puts, deletes)
    return out
CHAIN_PREFIX = "hashmap-chain/"  # in a TaskSlice's ``shared``: "<prefix><uid>" -> the chain (JSON)
ROCKSDB_CHAIN_PREFIX = "rocksdb-chain/"  # the same for RocksDB changelog chains


def chain_entry(part: OperatorPart, checkpoint_id: int, prefix: str = CHAIN_PREFIX) -> tuple[str, str]:
    """The registry entry for one operator partition's chain in a completed checkpoint: its id,
    the lineage (HashMap: run key; RocksDB: local DB lineage), the committed version its last
    part holds, its files in ``shared/`` (a full snapshot or materialization, then changelog
    parts) and when the chain was materialized."""
    files = [[h.path, h.size, h.kind, h.sha256, h.local_name] for h in part.files]
    return prefix + part.uid, json.dumps([checkpoint_id, part.lineage, part.version, files, part.materialized_ms])


def read_chain(shared: dict[str, str], uid: str, prefix: str = CHAIN_PREFIX) -> tuple[int, str, int, list[PartHandle]] | None:
    """``(checkpoint id, lineage, version, parts)`` of the last completed checkpoint's chain of
    ``uid`` in this partition (None: none known)."""
    entry = read_chain_entry(shared, uid, prefix)
    return None if entry is None else entry[:4]


def read_chain_entry(shared: dict[str, str], uid: str, prefix: str = CHAIN_PREFIX) -> tuple[int, str, int, list[PartHandle], int] | None:
    """:func:`read_chain` and the chain's materialization time (ms)."""
    text = shared.get(prefix + uid)
    if not text:
        return None
    checkpoint_id, run, version, files, materialized_ms = json.loads(text)
    handles = [PartHandle(path, int(size), kind, sha256, local_name, uploaded=False) for path, size, kind, sha256, local_name in files]
    return int(checkpoint_id), str(run), int(version), handles, int(materialized_ms)


def is_chain(files: list[PartHandle]) -> bool:
    """Whether a HashMap part's files are a chain later checkpoints may build on (in ``shared/``)."""
    return bool(files) and files[0].kind == "full" and all(h.path.startswith("shared/") and h.kind in ("full", "changelog") for h in files)


def is_rocksdb_chain(files: list[PartHandle]) -> bool:
    """Whether a RocksDB part is a changelog chain (a materialization and changelog parts, all
    in ``shared/``) later checkpoints may build on."""
    return (
        any(h.kind == "private" for h in files)
        and all(h.path.startswith("shared/") and h.kind in ("sst", "private", "changelog") for h in files)
    )


def _heap_kind(b: Any, name: str, table: dict) -> dict[str, Any]:
    """A HashMap state's kind for ``_metadata``: declared when the job registered the state (in
    this run, or in the run whose declared kind was restored), else inferred from its values."""
    schema = state_schemas(b).get(name)
    kind = b.kinds.get(name)
    recorded = b.restored_states.get(name)
    if kind is None and recorded is not None and recorded.declared:
        kind = recorded.kind
    out = {"kind": kind, "declared": True} if kind is not None else {"kind": infer_kind(table), "declared": False}
    if schema is not None:
        out["schema"] = schema
    cls = sample_value_class(out["kind"], table)  # the part's values: unpickled (remapped) objects of this run
    if cls is not None:
        out["value_class"] = cls
    return out


def state_schemas(b: Any) -> dict[str, dict]:
    """The declared schema of each state of an operator backend (declared in this run, else as
    restored): for ``_metadata``, where a restore checks it (state/compatibility.py)."""
    out = {name: r.schema for name, r in b.restored_states.items() if r.schema is not None}
    out.update({name: s for name, s in b.schemas.items() if s is not None})
    return out


# -- RocksDB -----------------------------------------------------------------------------------


def db_path(directory: str, uid: str) -> str:
    return os.path.join(directory, "db-" + safe_name(uid))


def shared_key(uid: str, db_id: str, name: str, size: int) -> str:
    return f"{uid}/{db_id}/{name}/{size}"


def restore_tables(backend: Any, files: list[RestoredFile], options: dict) -> None:
    """Load full snapshots (HashMap checkpoints) or savepoint rows into an empty DB; a savepoint's
    declared state kinds go with them."""
    kinds: dict[str, str] = {}
    for f in files:
        kinds.update({name: kind for name, kind in f.kinds if name in f.declared})
    for uid, tables in load_restored(files, options).items():
        backend.restore(tables, kinds or None)
        backend.restored_states = recorded_states(files, uid, tables)
