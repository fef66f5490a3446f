"""A RocksDB backend's DB as files (flowpoint/state/rocksdb.py): a RocksDB checkpoint (hard links)
of the committed DB, and a DB directory made from one.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from typing import Any

from flowpoint import private_files
from flowpoint.errors import StateAccessError


def create_checkpoint(db: Any, target_dir: str, flush: Callable[[], None]) -> list[tuple[str, int]]:
    """A RocksDB checkpoint (hard links) of ``db`` in ``target_dir`` (which must not exist),
    after ``flush`` (the memtables); returns ``[(file name, size)]`` of every file in it."""
    # lazy: rocksdict (the native library) only where a RocksDB backend runs
    from rocksdict import Checkpoint

    if os.path.exists(target_dir):
        msg = f"checkpoint directory {target_dir} already exists"
        raise StateAccessError(msg)
    private_files.makedirs(os.path.dirname(os.path.abspath(target_dir)))
    flush()
    Checkpoint(db).create_checkpoint(target_dir)
    os.chmod(target_dir, private_files.DIR_MODE)  # RocksDB creates it with the umask's mode
    return sorted((name, os.path.getsize(os.path.join(target_dir, name))) for name in os.listdir(target_dir))


def restore_files(db_path: str, source_dir: str, replace: bool = False) -> None:
    """Make ``db_path`` a DB from a checkpoint directory: SST files are hard-linked when the
    file system allows (they are immutable), everything else is copied. ``db_path`` must not
    exist or be empty unless ``replace``."""
    if not os.path.isfile(os.path.join(source_dir, "CURRENT")):
        msg = f"{source_dir} is not a RocksDB checkpoint (no CURRENT file)"
        raise StateAccessError(msg)
    if os.path.exists(db_path) and os.listdir(db_path):
        if not replace:
            msg = f"cannot restore RocksDB state into {db_path}: the directory is not empty"
            raise StateAccessError(msg)
        shutil.rmtree(db_path)
    tmp = db_path.rstrip(os.sep) + ".restoring"
    shutil.rmtree(tmp, ignore_errors=True)
    private_files.makedirs(tmp)
    for name in os.listdir(source_dir):
        src = os.path.join(source_dir, name)
        dst = os.path.join(tmp, name)
        if name.endswith((".sst", ".blob")):
            try:
                os.link(src, dst)
                continue
            except OSError:
                pass
        shutil.copy2(src, dst)
    if os.path.isdir(db_path):
        os.rmdir(db_path)
    os.replace(tmp, db_path)
