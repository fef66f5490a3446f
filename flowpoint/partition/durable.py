"""Durable working state: where committed epoch changes live so that any executor can rebuild
any partition (docs/architecture.md, section 10a). Local disk and worker memory are only caches of it.

Each stateful partition writes, per epoch, a *delta* file (the keys it changed) and now and then
a *base* (a full snapshot: a pickled table per operator with HashMap, a RocksDB checkpoint's
files with RocksDB) below ``<durable root>/<job id>/run-<n>/stage-<s>/part-<p>/``. The file is
durable before the task acknowledges, so a delta's durability is part of the epoch's commit.
Every file carries its size and SHA-256 in the committed chain (kept by the driver, shipped to the
task with its slice: it never goes through the durable root, which other writers may share); a
read checks both, and a file without a SHA-256, missing or different fails the task with :class:`StateNotFoundError` naming the file:
a partition never starts from empty or wrong state.

The files are written by the one writer of state parts (:mod:`flowpoint.checkpoint.part_writer`,
which keeps what this process wrote lately for read-your-writes); this module reads, caches,
prunes and deletes them.

The root is ``state.working.remote-dir`` when set, else ``<checkpoint dir>/<job id>/taskowned``
when checkpoints go to remote storage (s3://, hdfs://, ...), else ``state.working.dir`` on the
local disk (one host, or executors sharing that directory).
"""

from __future__ import annotations

import contextlib
import os
import shutil

from flowpoint.checkpoint.part_writer import (
    is_local,
    local_path,
    recent_writes,
    sha256,
    split,
    storage_access,
    write_local_copy,
)
from flowpoint.errors import StateNotFoundError

RESTORE_HINT = "restore the job from a checkpoint"


def _cached(cache: str | None, size: int | None, digest: str | None) -> bytes | None:
    """A local copy that matches the committed size and SHA-256 (else it is dropped)."""
    if not cache:
        return None
    try:
        with open(cache, "rb") as f:
            data = f.read()
    except OSError:
        return None
    if (size is not None and len(data) != size) or (digest is not None and sha256(data) != digest):
        with contextlib.suppress(OSError):
            os.remove(cache)
        return None
    return data


def prune_cache(directory: str, before_epoch: int) -> None:
    """Drop local copies of files older than the committed base (named ``<kind>-<epoch>-...``)."""
    try:
        names = os.listdir(directory)
    except OSError:
        return
    for name in names:
        try:
            epoch = int(name.split("-")[1])
        except (IndexError, ValueError):
            continue
        if epoch < before_epoch:
            with contextlib.suppress(OSError):
                os.remove(os.path.join(directory, name))


def read_file(uri: str, size: int | None, digest: str | None, options: tuple = (), what: str = "state file", cache: str | None = None) -> bytes:
    """The bytes of a durable file, checked against its recorded size and SHA-256 (``cache``: a
    local copy to try first, and to keep). A file without a recorded SHA-256 is refused: the
    committed chain the driver keeps is what authenticates working files (whoever can write the
    durable root can replace them), so nothing is read, let alone unpickled, without it."""
    if not digest:
        msg = f"working {what} {uri} has no SHA-256 in the committed chain: it cannot be verified, so it is not read; {RESTORE_HINT}"
        raise StateNotFoundError(msg)
    data = recent_writes().get(uri)
    if data is None and not is_local(uri):
        data = _cached(cache, size, digest)
        if data is None and cache:
            data = _read_remote(uri, options, what)
            with contextlib.suppress(OSError):
                write_local_copy(cache, data)
    if data is None:
        try:
            if is_local(uri):
                with open(local_path(uri), "rb") as f:
                    data = f.read()
            else:
                root, name = split(uri)
                data = storage_access(root, options).read_bytes(name)
        except (FileNotFoundError, OSError) as e:
            raise _not_found(uri, what, e) from e
        except Exception as e:  # CheckpointError from remote storage: missing or unreadable
            raise _not_found(uri, what, e) from e
    if size is not None and len(data) != size:
        msg = f"working {what} {uri} has {len(data)} bytes, the committed epoch recorded {size}: it was changed or truncated; restore the job from a checkpoint"
        raise StateNotFoundError(msg)
    if sha256(data) != digest:
        msg = f"working {what} {uri} does not match the checksum recorded when its epoch committed: it is corrupt; restore the job from a checkpoint"
        raise StateNotFoundError(msg)
    return data


def _read_remote(uri: str, options: tuple, what: str) -> bytes:
    try:
        root, name = split(uri)
        return storage_access(root, options).read_bytes(name)
    except Exception as e:  # noqa: BLE001 - missing or unreadable: named below
        raise _not_found(uri, what, e) from e


def _not_found(uri: str, what: str, e: BaseException) -> StateNotFoundError:
    msg = (
        f"cannot read the committed working {what} {uri} ({type(e).__name__}: {e}). A partition never starts "
        "from empty state: if executors run on several hosts, set state.working.remote-dir (or a remote "
        "state.checkpoints.dir) to storage every executor can read, such as s3:// or hdfs://"
    )
    return StateNotFoundError(msg)


def delete(uris: tuple[str, ...] | list[str], options: tuple = ()) -> None:
    """Best effort: files the committed chain no longer needs."""
    for uri in uris:
        recent_writes().pop(uri)
        try:
            if is_local(uri):
                path = local_path(uri)
                if os.path.isdir(path):
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    os.remove(path)
            else:
                root, name = split(uri)
                storage_access(root, options).delete(name)
        except Exception:  # noqa: BLE001 - leftovers go with the job's directory
            pass


def delete_tree(uri: str, options: tuple = ()) -> None:
    if is_local(uri):
        shutil.rmtree(local_path(uri), ignore_errors=True)
        return
    try:
        root, name = split(uri)
        a = storage_access(root, options)
        if a.exists(name):
            a.delete(name)
    except Exception:  # noqa: BLE001 - best effort
        pass


def remove_empty_dir(uri: str) -> None:
    """Remove a local directory if nothing is left in it (object stores have no directories)."""
    if is_local(uri):
        with contextlib.suppress(OSError):
            os.rmdir(local_path(uri))
