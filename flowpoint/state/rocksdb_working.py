"""Working state with the RocksDB backend: one RocksDB directory per keyed operator and partition.

The DB on the executor's disk holds only *committed* state; a task reads and writes through the
backend's in-memory overlay, whose changes become the epoch's delta file exactly as with the
HashMap backend. At the start of a task the partition's DBs are opened (a partition may run in
another worker process than last epoch: RocksDB's lock allows one process at a time, so every
task closes its DBs at its end) and brought up to the committed version by applying the
committed delta files they have not seen (the version is stored inside the DB, in the same
write batch as the delta). The DB is the base snapshot: nothing is compacted, and the
coordinator forgets delta files once a task reports its DBs hold them.
"""

from __future__ import annotations

import os
import pickle
import re
import shutil
import tempfile
from typing import Any

from flowpoint.state.working import CommittedChain, RestoredFile, load_restored, read_uri


def db_path(directory: str, uid: str) -> str:
    return os.path.join(directory, "db-" + re.sub(r"[^A-Za-z0-9._-]", "_", uid))


_KINDS = ("value", "list", "map", "reducing", "aggregating")


def load_deltas(path: str) -> dict[str, Any]:
    with open(path, "rb") as f:
        kind, per_uid = pickle.load(f)
    return per_uid


def catch_up(backend: Any, uid: str, chain: CommittedChain, cache: dict[str, dict[str, Any]]) -> None:
    """Open ``backend`` (restoring a checkpoint into a new DB first) and apply the committed
    deltas it misses. ``cache`` shares parsed delta files among the partition's operators."""
    restored = [f for f in chain.restored if f.uid == uid]
    if restored and not os.path.exists(backend.db_path):
        native = [f for f in restored if f.files]
        if native:
            restore_native(backend.db_path, native)
    backend.open()
    if restored and backend.version() == 0:
        tables = [f for f in restored if not f.files]
        if tables:
            restore_tables(backend, tables)
    for f in chain.deltas:
        if f.epoch <= backend.version():
            continue
        delta = None
        if f.path:
            per_uid = cache.get(f.path)
            if per_uid is None:
                per_uid = cache[f.path] = load_deltas(f.path)
            delta = per_uid.get(uid)
        if delta is not None:
            backend.apply(delta, version=f.epoch)
        else:
            backend.set_version(f.epoch)


def restore_native(path: str, files: list[RestoredFile]) -> None:
    """Make ``path`` a RocksDB from a checkpoint's files (downloaded from checkpoint storage)."""
    from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

    parent = os.path.dirname(path)
    os.makedirs(parent, exist_ok=True)
    staging = tempfile.mkdtemp(prefix="restore-", dir=parent)
    try:
        for f in files:
            for uri, local_name in f.files:
                with open(os.path.join(staging, local_name), "wb") as out:
                    out.write(read_uri(uri))
        RocksDBKeyedStateBackend.restore_files(path, staging)
    finally:
        shutil.rmtree(staging, ignore_errors=True)


def restore_tables(backend: Any, files: list[RestoredFile]) -> None:
    """Load full snapshots (HashMap checkpoints) or savepoint rows into an empty DB; a savepoint's
    declared state kinds go with them."""
    kinds: dict[str, str] = {}
    for f in files:
        kinds.update({name: kind for name, kind in f.kinds if name in f.declared})
    for tables in load_restored(files).values():
        backend.restore(tables, kinds or None)
    backend.set_version(max(f.epoch for f in files))


def remove_applied_deltas(directory: str, applied: int, pinned: frozenset[str]) -> None:
    """Delta files of epochs every DB of the partition holds durably are no longer needed."""
    if not os.path.isdir(directory):
        return
    keep = {os.path.basename(p) for p in pinned}
    for name in os.listdir(directory):
        if not name.startswith("delta-") or name in keep:
            continue
        try:
            epoch = int(name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if epoch <= applied:
            try:
                os.remove(os.path.join(directory, name))
            except FileNotFoundError:
                pass


def read_committed_tables_rocksdb(
    directory: str, uids: list[str], chain: CommittedChain, max_parallelism: int, kinds_out: dict[str, dict[str, str]] | None = None
) -> dict[str, dict[str, dict[Any, Any]]]:
    """Committed state of one partition, read on the driver between epochs or after the job (no
    task holds the DBs). ``kinds_out`` receives ``{uid: {state name: kind}}`` of the known kinds."""
    from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

    out: dict[str, dict[str, dict[Any, Any]]] = {}
    cache: dict[str, dict[str, Any]] = {}
    for uid in uids:
        path = db_path(directory, uid)
        if not os.path.exists(path) and not chain.restored:
            continue
        b = RocksDBKeyedStateBackend(uid, path, max_parallelism)
        try:
            catch_up(b, uid, chain, cache)
            out[uid] = b.snapshot()
            if kinds_out is not None:
                kinds_out[uid] = {name: kind for name, (_sid, kind) in b._names.items() if kind in _KINDS}
        finally:
            b.close()
    return out
