"""Local table directories, checked as FileSink's and the checkpoint directories are
(docs/architecture.md, section 10a): the embedded catalog's warehouse directory, the table's
directory and every directory below it must be the job user's and writable by no one else,
below directories no one else can replace; else InsecurePathError naming the directory.
``security.trust-shared-directories: true`` accepts them. A directory the sink creates is
0755 less the umask (readers of the table may read it; no one else may write it). Tables in
object stores (``s3://``, ``gs://``, ...) are not local: nothing to check."""

from __future__ import annotations

import os
import stat

from flowpoint import private_files
from flowpoint.errors import InsecurePathError

OUTPUT_DIR_MODE = private_files.OUTPUT_DIR_MODE


def local_dir(location: str) -> str | None:
    """The local directory of a location on this machine's disk (a plain path or ``file:``),
    or None for an object store."""
    if location.startswith("file://"):
        return os.path.normpath(location[len("file://"):])
    if location.startswith("file:"):
        return os.path.normpath(location[len("file:"):])
    return None if "://" in location else os.path.abspath(os.path.expanduser(location))


def trust_hint() -> str:
    return (f"use a directory only you can write for the table and its warehouse, or set "
            f"{private_files.TRUST_SHARED}: true if you trust every user who can write it with the table")


def check_warehouse(warehouse: str) -> str:
    """The embedded catalog's warehouse directory (created if missing) and its catalog
    database, if there is one: neither another user's nor writable by others."""
    path = private_files.check_dir(warehouse, "IcebergSink warehouse directory", trust_hint(), create=True,
                                   mode=OUTPUT_DIR_MODE, exact=False)
    catalog = os.path.join(path, "catalog.db")
    if private_files.POSIX and os.path.lexists(catalog):
        st = os.lstat(catalog)
        if stat.S_ISLNK(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o022:
            msg = (f"IcebergSink catalog database {catalog} is a link, belongs to another user or can be written by other "
                   f"users (mode {stat.S_IMODE(st.st_mode):04o}): they could point the table at their own files. Remove "
                   f"it, or {trust_hint()}")
            raise InsecurePathError(msg)
    return path


def check_table_tree(directory: str) -> None:
    """The table's local directory and every directory below it (metadata, data, partitions)."""
    private_files.check_output_tree(directory, "IcebergSink table directory", "IcebergSink table directory", trust_hint())


def data_dir(directory: str, data_location: str, trust: bool, checked: set[str]) -> None:
    """A task's data directory (a partition's, or the table's data location itself), when
    local: created if missing and, the first time for ``checked`` and unless ``trust``, refused
    if it or one between it and the data location belongs to another user or others can
    write it."""
    local = local_dir(directory)
    base = local_dir(data_location)
    if local is None or base is None or local in checked:
        return
    if trust:
        private_files.makedirs(local, OUTPUT_DIR_MODE, exact=False)
        checked.add(local)
        return
    private_files.output_subdir(base, local, "IcebergSink data directory", "IcebergSink data directory", trust_hint(), checked)
