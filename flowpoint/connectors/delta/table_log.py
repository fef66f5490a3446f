"""What a ``DeltaSource`` learns from a Delta table's log, on the driver: the data files of a
snapshot, the latest version, and what one version did (the files it appended, or why it is
skipped, or why the source cannot follow it).

A data file is described as plain data (it travels to the tasks in read specs):
``{"version", "path", "size", "records", "partition"}``, where ``path`` is
relative to the table (percent-decoded once, as the log encodes it) and ``partition`` maps the
partition columns to the strings the log holds (None for null).

A version is read from its commit file ``_delta_log/<version, 20 digits>.json``: every
``add`` with ``dataChange=true`` is appended data; a ``remove`` with ``dataChange=true``
(DELETE, UPDATE, MERGE, an overwrite) fails the source, which reads append-only tables; a
version whose actions all have ``dataChange=false`` (OPTIMIZE compaction, Z-order) or that
holds no files (metadata, properties) is skipped. A version's commit file never changes, so
the driver keeps what it learned per version.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import unquote

import pyarrow as pa

from flowpoint.connectors.delta.errors import (
    DeltaSourceConfigurationError,
    DeltaSourceError,
    DeltaSourceUnavailableError,
)
from flowpoint.connectors.delta.schema import partition_string

_RESTART_HINT = ("start a new job, without restoring this one's checkpoint, with set_starting_version(n) at a version "
                 "after it (it reads that version's snapshot, then follows)")


@dataclass(frozen=True)
class VersionChange:
    """What version ``version`` did, for a source following the table."""

    version: int
    files: list[dict] = field(default_factory=list)  # data files it appended
    skipped: str | None = None  # why nothing is read (compaction, metadata only)


def table_filesystem(path: str, options: dict[str, str] | None) -> pa.fs.FileSystem:
    """The table's storage as a pyarrow filesystem rooted at the table (delta-rs's object store:
    the same storage options as the table)."""
    from deltalake.fs import DeltaStorageHandler

    return pa.fs.PyFileSystem(DeltaStorageHandler(path, options))


def commit_file(version: int) -> str:
    return f"_delta_log/{version:020d}.json"


def file_path(log_path: str, where: str) -> str:
    """A data file's path relative to the table, from the log's (percent-encoded) one."""
    if "://" in log_path or log_path.startswith("/"):
        msg = (f"{where}: data file {log_path!r} lies outside the table (an absolute path, as shallow clones write); "
               f"DeltaSource reads files inside the table's directory only")
        raise DeltaSourceError(msg)
    return unquote(log_path)


class TableLog:
    """The driver's view of one table (a delta-rs ``DeltaTable``, refreshed incrementally)."""

    def __init__(self, path: str, options: dict[str, str] | None, where: str):
        self.path = path
        self.options = options
        self.where = where
        self._table: Any = None
        self._fs: Any = None
        self._changes: dict[int, VersionChange] = {}

    def table(self) -> Any:
        from deltalake import DeltaTable
        from deltalake.exceptions import TableNotFoundError

        try:
            if self._table is None:
                self._table = DeltaTable(self.path, storage_options=self.options)
            else:
                self._table.update_incremental()
        except TableNotFoundError:
            msg = f"{self.where}: there is no Delta table at {self.path!r}; check the path (and set_storage_options for object stores)"
            raise DeltaSourceConfigurationError(msg) from None
        except Exception as e:  # delta-rs and object store errors
            msg = f"{self.where}: cannot read the table's log: {e}; check the path and set_storage_options(...)"
            raise DeltaSourceUnavailableError(msg) from None
        return self._table

    def latest(self) -> int:
        return int(self.table().version())

    def snapshot(self, version: int | None) -> tuple[int, pa.Schema, list[str], list[dict]]:
        """``(version, Arrow schema, partition columns, data files)`` of the table at ``version``
        (the latest when None)."""
        from deltalake import DeltaTable

        latest = self.latest()
        if version is None:
            version = latest
        if version > latest or version < 0:
            msg = f"{self.where}: the table has no version {version} (its latest is {latest}); give set_starting_version a version from 0 to {latest}"
            raise DeltaSourceConfigurationError(msg)
        try:
            table = DeltaTable(self.path, version=version, storage_options=self.options)
        except Exception as e:  # delta-rs: the log of that version was cleaned up
            msg = (f"{self.where}: version {version} of the table cannot be loaded ({e}); its log entries were probably "
                   f"removed by log retention (delta.logRetentionDuration). Start at a later version with "
                   f"set_starting_version(n), or without one to read the latest snapshot")
            raise DeltaSourceConfigurationError(msg) from None
        check_readable(table.metadata().configuration, f"{self.where}, version {version}")
        schema = pa.schema(table.schema().to_arrow())
        partitions = list(table.metadata().partition_columns)
        files = []
        for a in pa.table(table.get_add_actions(flatten=False)).to_pylist():
            if a.get("deletionVector"):
                raise _deletion_vector(self.where, version, a["path"])
            values = a.get("partition") or {}
            files.append(data_file(version, file_path(a["path"], self.where), int(a["size_bytes"]),
                                   a.get("num_records"), {c: partition_string(values.get(c)) for c in partitions}))
        return version, schema, partitions, files

    def change(self, version: int, schema: pa.Schema, columns: list[str]) -> VersionChange:
        """What ``version`` did (cached: a commit file never changes)."""
        done = self._changes.get(version)
        if done is None:
            done = self._read_change(version, schema, columns)
            if len(self._changes) > 4096:
                self._changes.clear()
            self._changes[version] = done
        return done

    def _actions(self, version: int) -> list[dict]:
        if self._fs is None:
            self._fs = table_filesystem(self.path, self.options)
        try:
            with self._fs.open_input_stream(commit_file(version)) as f:
                text = f.read().decode("utf-8")
        except FileNotFoundError:
            msg = (f"{self.where}: the log entry of version {version} ({commit_file(version)}) is gone: log retention "
                   f"(delta.logRetentionDuration) removed it before the source read it, so which files it added is "
                   f"unknown. Keep the log longer than the job may lag; to go on, {_RESTART_HINT}")
            raise DeltaSourceError(msg) from None
        except OSError as e:
            msg = f"{self.where}: cannot read {commit_file(version)}: {e}"
            raise DeltaSourceUnavailableError(msg) from None
        return [json.loads(line) for line in text.splitlines() if line.strip()]

    def _read_change(self, version: int, schema: pa.Schema, columns: list[str]) -> VersionChange:
        actions = self._actions(version)
        operation = next((a["commitInfo"].get("operation") for a in actions if "commitInfo" in a), None)
        what = f"version {version}" + (f" ({operation})" if operation else "")
        for a in actions:
            if "metaData" in a:
                _check_metadata(a["metaData"], schema, columns, f"{self.where}: {what}")
        removed = [a["remove"]["path"] for a in actions if "remove" in a and a["remove"].get("dataChange", True)]
        if removed:
            msg = (f"{self.where}: {what} removes or rewrites data ({len(removed)} file(s) removed with dataChange=true, "
                   f"e.g. {unquote(removed[0])!r}); DeltaSource follows append-only tables (appends, and compactions, "
                   f"which it skips) and never reads a row twice nor drops one silently. To go on, {_RESTART_HINT}")
            raise DeltaSourceError(msg)
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        if not adds:
            rewritten = any("add" in a or "remove" in a for a in actions)
            return VersionChange(version, skipped="a compaction (dataChange=false)" if rewritten else "no data files")
        files = []
        for add in adds:
            if add.get("deletionVector"):
                raise _deletion_vector(self.where, version, add["path"])
            stats = add.get("stats")
            records = json.loads(stats).get("numRecords") if stats else None
            files.append(data_file(version, file_path(add["path"], self.where), int(add["size"]), records,
                                   dict(add.get("partitionValues") or {})))
        return VersionChange(version, files)


def data_file(version: int, path: str, size: int, records: int | None, partition: dict) -> dict:
    return {"version": int(version), "path": path, "size": int(size),
            "records": None if records is None else int(records), "partition": partition}


def check_readable(configuration: dict, where: str) -> None:
    """Refuse table settings this source cannot read file by file (deletion vectors are
    refused per file: a table may allow them and have none)."""
    mode = (configuration or {}).get("delta.columnMapping.mode", "none")
    if mode != "none":
        msg = (f"{where}: the table uses column mapping (delta.columnMapping.mode={mode}), whose data files name "
               f"columns differently from the schema; DeltaSource reads tables without column mapping")
        raise DeltaSourceError(msg)


def _deletion_vector(where: str, version: int, path: str) -> DeltaSourceError:
    msg = (f"{where}: data file {unquote(path)!r} (version {version}) has a deletion vector (rows deleted in place); "
           f"DeltaSource reads tables without deletion vectors: disable them (delta.enableDeletionVectors=false) "
           f"and purge them (REORG TABLE ... APPLY (PURGE))")
    return DeltaSourceError(msg)


def _check_metadata(meta: dict, schema: pa.Schema, columns: list[str], where: str) -> None:
    """A version that changes the table's metadata: the columns read must keep their types."""
    from deltalake import Schema

    check_readable(meta.get("configuration") or {}, where)
    text = meta.get("schemaString")
    if not text:
        return
    new = pa.schema(Schema.from_json(text).to_arrow())
    changed = [c for c in columns if c not in new.names or new.field(c).type != schema.field(c).type]
    if changed:
        desc = ", ".join(f"{c}: {schema.field(c).type} -> {new.field(c).type if c in new.names else 'dropped'}" for c in changed)
        msg = (f"{where} changes the type of columns the source reads ({desc}); the stream's type was fixed when the "
               f"job was built. To go on, {_RESTART_HINT}")
        raise DeltaSourceError(msg)
