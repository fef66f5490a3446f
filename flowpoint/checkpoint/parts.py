"""Reading the state files a checkpoint or savepoint holds, on any side (the driver, a task,
the state reader): which files a restore starts from (:class:`RestoredFile`), HashMap parts
(full snapshots and changelogs), and a RocksDB checkpoint's native files made into a DB.

Snapshot storage: below the task code that writes and loads working state (partition/working.py,
partition/backend.py), above the state kinds and backends it decodes into.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from flowpoint import private_files
from flowpoint.checkpoint.filesystem import read_uri_bytes
from flowpoint.checkpoint.integrity import check_bytes, decode
from flowpoint.errors import io_errors
from flowpoint.state import rocksdb_changelog
from flowpoint.state.compatibility import restoring_loads
from flowpoint.state.keygroups import assign_to_key_group
from flowpoint.state.rocksdb import RocksDBKeyedStateBackend


def writes_native_files(backend: str) -> bool:
    """Whether the backend's checkpoints are a native DB's files (restored only by that backend
    at the parallelism they were written with), which only filesystem storage can hold."""
    return backend == "rocksdb"


def can_restore_checkpoint(written_by: str, backend: str) -> bool:
    """Whether ``backend`` restores a checkpoint written by ``written_by`` (a full HashMap
    snapshot is tables any backend loads; native DB files only their own backend)."""
    return written_by == backend or not writes_native_files(written_by)


@dataclass(frozen=True)
class RestoredFile:
    """A full snapshot of one operator's state in checkpoint storage (a restore's starting point).
    Every file is checked against its recorded size and SHA-256 before it is decoded."""

    uid: str
    uri: str
    size: int = 0
    key_groups: tuple[int, int, int] | None = None  # (first, last, max parallelism): keep only these (rescaling)
    data: bytes | None = None  # the file itself, when executors cannot read the URI (driver-memory storage)
    files: tuple[tuple[str, str, int, str | None], ...] = ()  # RocksDB: (uri, name in the DB directory, size, sha256) of a native snapshot
    epoch: int = 0  # the checkpoint's epoch
    format: str = "pickle"  # "pickle" (a HashMap checkpoint's full snapshot) | "changelog" (a HashMap changelog part) | "canonical" (savepoint Parquet rows)
    kinds: tuple[tuple[str, str], ...] = ()  # canonical: (state name, kind) of every state
    declared: tuple[str, ...] = ()  # canonical: the state names whose kind is declared, not inferred
    schemas: tuple[tuple[str, str], ...] = ()  # (state name, JSON of its declared type) as _metadata records it
    value_classes: tuple[tuple[str, str], ...] = ()  # (state name, JSON of its values' named tuple class and fields)
    sha256: str | None = None  # of the file at ``uri`` (not for RocksDB: see ``files``)
    rows: int | None = None  # canonical: the Parquet row count


def restored_loads(f: RestoredFile) -> Callable[[bytes], Any]:
    """How the values of restored file ``f`` are unpickled: ``pickle.loads``, or an unpickler
    that rebuilds named tuples whose class changed fields since they were written, by field name
    (state/compatibility.py), when ``_metadata`` recorded such a class for one of its states."""
    if not f.value_classes:
        return pickle.loads
    return restoring_loads(json.loads(text) for _name, text in f.value_classes)


def load_part(data: bytes, uri: str, uid: str, loads: Callable[[bytes], Any] = pickle.loads) -> Any:
    """Unpickle a verified HashMap checkpoint part (with ``loads``: :func:`restored_loads`); a
    file that does not unpickle is a StateDecodeError naming it (no restart can fix it)."""
    return decode(loads, data, uri, uid, "checkpoint file")  # the job's own state, verified by its checksum


def apply_part(into: dict[str, dict[Any, Any]], changelog: bool, payload: Any, key_groups: tuple[int, int, int] | None = None) -> None:
    """Apply one HashMap checkpoint part to ``into`` (``{state name: {key: value}}``): a full
    snapshot (``{name: {key: value}}``) adds its entries, a changelog part (``{name: (puts,
    deletes)}``, written after the parts before it) sets and deletes keys. ``key_groups``
    ``(first, last, max parallelism)``: keep only these key groups (rescaling)."""

    def mine(k: Any) -> bool:
        first, last, max_parallelism = key_groups  # type: ignore[misc]
        return first <= assign_to_key_group(k, max_parallelism) <= last

    for name, table in payload.items():
        if changelog:
            puts, deletes = table
            table = puts
        if key_groups is not None:
            table = {k: v for k, v in table.items() if mine(k)}
        target = into.get(name)
        if target is None and not changelog:
            into[name] = table if type(table) is dict else dict(table)
            continue
        if target is None:
            target = into[name] = {}
        target.update(table)
        if changelog:
            for k in deletes:
                target.pop(k, None)


def read_uri(uri: str, options: dict | None = None) -> bytes:
    """The bytes of a file in checkpoint storage (any URI the storage layer opens)."""
    return read_uri_bytes(uri, options)


def restore_native(path: str, files: list[RestoredFile], options: dict) -> list[tuple[str, bytes]]:
    """Make ``path`` a RocksDB from a checkpoint's files (downloaded from checkpoint storage),
    each checked against its recorded size and SHA-256 first (CorruptStateError naming it).
    Returns the changelog parts among them (``[(uri, bytes)]``, in order) for the caller to
    replay on the opened DB (:func:`flowpoint.state.rocksdb_changelog.replay`)."""
    logs = []

    def db_files() -> Iterator[tuple[str, bytes]]:
        for f in files:
            for uri, local_name, size, sha256 in f.files:
                data = check_bytes(read_uri(uri, options), size, sha256, uri, f.uid, "checkpoint file")
                if local_name.startswith(rocksdb_changelog.LOCAL_PREFIX):
                    logs.append((uri, data))
                else:
                    yield local_name, data

    restore_db(path, db_files())
    return logs


def restore_db(path: str, files: Iterable[tuple[str, bytes]]) -> None:
    """Make ``path`` a RocksDB from ``(local name, verified bytes)``: each is written, readable
    by the job's user only (0600, in 0700 directories), into a staging directory beside ``path``
    that becomes the DB (the one local copy of RocksDB files at a restore, of a checkpoint's
    files or of a durable working base)."""
    private_files.makedirs(os.path.dirname(path))
    staging = path + ".restore"
    shutil.rmtree(staging, ignore_errors=True)
    private_files.makedirs(staging)
    try:
        for local_name, data in files:
            target = os.path.join(staging, local_name)
            with io_errors("write the local state file", target):
                private_files.write_private(target, data, atomic=False)
        RocksDBKeyedStateBackend.restore_files(path, staging, replace=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
