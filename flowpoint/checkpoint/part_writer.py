"""The one writer of state parts: every file of state that a checkpoint, a savepoint or a job's
durable working state holds is written here (docs/architecture.md, section 7).

The callers decide WHAT a part holds (its bytes, or a local file to upload); this module
decides the rest, the same way for each:

- where it goes: a checkpoint's parts below its job directory (``chk-<n>/`` for parts of this
  checkpoint alone, ``shared/`` for parts later checkpoints list too, ``chk-<n>/channel-*.pkl``
  for channel state), a savepoint's Parquet parts beside its ``_metadata``, working files below
  ``<durable root>/<run key>/stage-<s>/part-<p>/``;
- how it is written: atomically and privately, before the task acknowledges it (checkpoint
  storage: :class:`~flowpoint.checkpoint.filesystem.CheckpointStorageAccess`, with its file
  mode; local working files: :func:`flowpoint.private_files.write_private`, 0600 in 0700
  directories);
- what is recorded about it: its size and SHA-256 in a :class:`PartHandle`, which the task's
  acknowledgement carries to the driver, where ``_metadata`` (checkpoints, savepoints) or the
  committed chain (working files) records them, and every read checks them.

Driver-memory checkpoint storage (``CheckpointTarget.inline``) is out of the executors' reach:
a task's part then carries its bytes and the driver writes them (:func:`write_carried`).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import uuid
from dataclasses import dataclass
from typing import Any

from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.integrity import check_bytes
from flowpoint.errors import io_errors
from flowpoint.private_files import write_private
from flowpoint.state.rocksdb_changelog import LOCAL_PREFIX
from flowpoint.worker_resources import BoundedCache, worker

_RECENT_LIMIT = 64 << 20  # bytes of the working files this process wrote lately, kept for read-your-writes
_RECENT_FILES = 4096
_ACCESS_CLIENTS = 32  # storage clients (one per root and options) kept per process
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")  # what a uid may not bring into a file name


@dataclass(frozen=True)
class CheckpointTarget:
    """A checkpoint whose parts this epoch's stateful tasks write (its synchronous part is the
    committed state the epoch starts from)."""

    checkpoint_id: int
    job_dir_uri: str  # chk-<id>/ and shared/ are relative to it
    inline: bool = False  # driver-memory storage: parts come back in the acknowledgement


@dataclass(frozen=True)
class PartHandle:
    """One file a task wrote into a checkpoint or savepoint directory (or a working file: then
    ``path`` is its URI)."""

    path: str  # relative to the checkpoint job directory or the savepoint directory
    size: int
    kind: str  # "full" | "changelog" | "sst" | "private" | "canonical" | "channel" | "working"
    sha256: str
    local_name: str | None = None
    rows: int | None = None
    uploaded: bool = True  # False: a file an earlier checkpoint already holds (an SST file, a HashMap chain's part)
    data: bytes | None = None  # driver-memory checkpoint storage only


def safe_name(uid: str) -> str:
    """An operator uid as a file name's part."""
    return _UNSAFE.sub("_", uid)[:80]


def sha256(data: bytes) -> str:
    """The checksum of every part (SHA-256 hex)."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


# -- checkpoint parts --------------------------------------------------------------------------


class CheckpointParts:
    """The parts one task writes into checkpoint ``target``'s storage (``options``: the storage's
    options), each returned as the handle its acknowledgement carries."""

    def __init__(self, target: CheckpointTarget, options: Any) -> None:
        self.checkpoint_id = target.checkpoint_id
        self.inline = target.inline
        self.access = None if target.inline else CheckpointStorageAccess(target.job_dir_uri, dict(options))

    def _put(self, rel: str, data: bytes, kind: str, local_name: str | None = None) -> PartHandle:
        if self.access is not None:
            self.access.write_bytes(rel, data)
        return PartHandle(rel, len(data), kind, sha256(data), local_name, data=data if self.inline else None)

    def hashmap(self, uid: str, partition: int, data: bytes, kind: str, shared: bool) -> PartHandle:
        """A HashMap part (``kind`` "full" or "changelog"): in ``shared/`` when it starts or
        continues a chain later checkpoints build on, else in ``chk-<n>/``."""
        if shared:
            tag = "log" if kind == "changelog" else "full"
            rel = f"shared/{safe_name(uid)}-{partition}-chk{self.checkpoint_id}-{tag}-{uuid.uuid4().hex[:8]}.pkl"
        else:
            rel = f"chk-{self.checkpoint_id}/{safe_name(uid)}-{partition}.pkl"
        return self._put(rel, data, kind)

    def rocksdb_changelog(self, uid: str, partition: int, db_id: str, data: bytes) -> PartHandle:
        """A changelog part on a RocksDB chain of DB lineage ``db_id`` (state/rocksdb_changelog.py)."""
        rel = f"shared/{safe_name(uid)}-{partition}-{db_id}-chk{self.checkpoint_id}-{uuid.uuid4().hex[:8]}.changelog"
        return self._put(rel, data, "changelog", f"{LOCAL_PREFIX}{self.checkpoint_id:010d}")

    def rocksdb_file(self, uid: str, partition: int, db_id: str, local_dir: str, name: str, size: int, kind: str, shared: bool) -> PartHandle:
        """A file ``name`` of a RocksDB checkpoint in ``local_dir``, uploaded: an SST file
        (``kind`` "sst") once into ``shared/``; another file (``kind`` "private") into ``shared/``
        when a chain outlives this checkpoint's directory (``shared``), else into ``chk-<n>/``."""
        if kind == "sst":
            rel = f"shared/{safe_name(uid)}-{partition}-{db_id}-{name}"
        elif shared:
            rel = f"shared/{safe_name(uid)}-{partition}-{db_id}-chk{self.checkpoint_id}-{name}"
        else:
            rel = f"chk-{self.checkpoint_id}/{safe_name(uid)}-{partition}/{name}"
        path = os.path.join(local_dir, name)
        self.access.upload_file(path, rel)  # type: ignore[union-attr]  # native files need filesystem storage
        return PartHandle(rel, size, kind, sha256_file(path), name)

    def channel_state(self, name: str, data: bytes) -> PartHandle:
        """A subtask's channel state of an unaligned checkpoint (tasks/channel_state.py)."""
        return self._put(f"chk-{self.checkpoint_id}/channel-{name}.pkl", data, "channel")


def write_carried(job_access: CheckpointStorageAccess, handle: PartHandle) -> None:
    """Driver-memory storage: write a part whose bytes its handle carried to the driver."""
    job_access.write_bytes(handle.path, handle.data)  # type: ignore[arg-type]


# -- savepoint parts ---------------------------------------------------------------------------


def savepoint_file_name(uid: str, partition: int) -> str:
    safe = _UNSAFE.sub("_", uid)[:60]
    return f"{safe}-{hashlib.sha1(uid.encode()).hexdigest()[:8]}-{partition}.parquet"


def write_savepoint_part(access: CheckpointStorageAccess, uid: str, partition: int, data: bytes, rows: int) -> PartHandle:
    """Operator ``uid``'s canonical Parquet part of parallel instance ``partition`` (``rows``
    rows), in the savepoint directory ``access``."""
    rel = savepoint_file_name(uid, partition)
    access.write_bytes(rel, data)
    return PartHandle(rel, len(data), "canonical", sha256(data), rows=rows)


def copy_part(source: CheckpointStorageAccess, access: CheckpointStorageAccess, rel: str, size: int, digest: str | None) -> None:
    """A checkpoint's file ``rel`` into a native savepoint at the same relative path, checked
    against its recorded size and SHA-256 as it is copied (CorruptStateError naming it)."""
    parent = rel.rsplit("/", 1)[0] if "/" in rel else ""
    if parent:
        access.make_dirs(parent)
    access.write_bytes(rel, check_bytes(source.read_bytes(rel), size, digest, source.uri(rel), None, "checkpoint file"))


# -- durable working files ---------------------------------------------------------------------


def recent_writes() -> BoundedCache:
    """This worker's working files written lately (uri -> bytes, LRU, at most ``_RECENT_LIMIT``
    bytes): a task reads back what this process wrote without a round trip."""
    return worker().cache("durable.recent-writes", _RECENT_FILES, weigh=len, max_weight=_RECENT_LIMIT)


def remember(uri: str, data: bytes) -> None:
    if len(data) <= _RECENT_LIMIT // 4:
        recent_writes().put(uri, data)


def is_local(uri: str) -> bool:
    return "://" not in uri or uri.startswith("file://")


def local_path(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def join(root: str, *parts: str) -> str:
    return "/".join([root.rstrip("/"), *parts])


def split(uri: str) -> tuple[str, str]:
    root, _, name = uri.rstrip("/").rpartition("/")
    return root, name


def storage_access(root: str, options: tuple) -> Any:
    """This worker's storage client of ``root`` (built once per root and options, LRU)."""
    clients = worker().cache("durable.storage-access", _ACCESS_CLIENTS)
    return clients.get_or_create((root, options), lambda: CheckpointStorageAccess(root, dict(options)))


def working_dir(root: str, run_key: str, stage_id: int, partition: int) -> str:
    """Where a partition's durable working files go: ``<root>/<run key>/stage-<s>/part-<p>``."""
    return join(root, run_key, f"stage-{stage_id}", f"part-{partition}")


def working_name(kind: str, epoch: int, token: str, suffix: str = ".pkl") -> str:
    """``<kind>-<epoch>-<token>.pkl``: a delta or a base of ``epoch`` by the attempt ``token``."""
    return f"{kind}-{epoch:08d}-{token}{suffix}"


def write_local_copy(path: str, data: bytes) -> None:
    write_private(path, data)  # 0600 in new 0700 directories, whatever the umask; atomic


def _store_working(uri: str, data: bytes, options: tuple) -> None:
    if is_local(uri):
        with io_errors("write the working-state file", local_path(uri)):
            write_local_copy(local_path(uri), data)
    else:
        root, name = split(uri)
        storage_access(root, options).write_bytes(name, data)


def write_working_file(uri: str, data: bytes, options: tuple = (), cache: str | None = None) -> PartHandle:
    """Write a working file ``data`` at ``uri`` atomically (``cache``: a local path that keeps a
    copy of a remote file for this executor's other Python workers); its handle (``path``: the URI)."""
    _store_working(uri, data, options)
    if cache and not is_local(uri):
        with contextlib.suppress(OSError):
            write_local_copy(cache, data)
    remember(uri, data)
    return PartHandle(uri, len(data), "working", sha256(data))


def upload_working_dir(local_dir: str, uri: str, options: tuple = ()) -> list[PartHandle]:
    """Copy every file of ``local_dir`` below ``uri`` (a RocksDB checkpoint that is a base);
    their handles (``path``: the URI, ``local_name``: the name)."""
    out = []
    for name in sorted(os.listdir(local_dir)):
        source = os.path.join(local_dir, name)
        with io_errors("read the local state file", source), open(source, "rb") as f:
            data = f.read()
        target = join(uri, name)
        _store_working(target, data, options)
        out.append(PartHandle(target, len(data), "working", sha256(data), name))
    return out

