"""The Delta sink's task side: the records of an epoch become Parquet data files in the table's
directory, one per partition, under names no one else uses; ``finish`` hands the driver their
paths, sizes, partition values and statistics (never data). A data file is invisible until a
commit of the Delta log adds it: files of an epoch that never commits (a failed task attempt,
a run restarted from an earlier checkpoint) stay unreferenced, for ``VACUUM`` to remove."""

from __future__ import annotations

import datetime
import json
import os
import uuid
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flowpoint import private_files
from flowpoint.connectors.delta.errors import DeltaConfigurationError, DeltaSinkError
from flowpoint.connectors.delta.schema import partition_dir, partition_string
from flowpoint.connectors.sinks import SinkWriter
from flowpoint.connectors.table_records import records_table

_MAX_STAT_STRING = 32  # longer strings get no min/max (Delta readers skip files by them)


def table_filesystem(table_path: str, storage_options: dict[str, str]) -> Any:
    """A pyarrow filesystem rooted at the table (delta-rs's object store: local, s3://, ...)."""
    import pyarrow.fs as pafs
    from deltalake.fs import DeltaStorageHandler

    return pafs.PyFileSystem(DeltaStorageHandler(table_path, dict(storage_options) or None))


def local_table_dir(table_path: str) -> str | None:
    """The local directory of a table on this machine's disk (a plain path or ``file://``), or
    None for an object store."""
    if table_path.startswith("file://"):
        return table_path[len("file://"):]
    return None if "://" in table_path else os.path.abspath(os.path.expanduser(table_path))


def trust_hint() -> str:
    return (f"use a table directory only you can write, or set {private_files.TRUST_SHARED}: true if you trust every "
            f"user who can write it with the table")


def to_table(records: Any, type_info: Any, schema: pa.Schema, where: str) -> pa.Table:
    """An epoch's records (Python values or Arrow batches) as a table of ``schema``."""
    return records_table(records, type_info, schema, where, DeltaConfigurationError)


def _stat(value: Any) -> Any:
    if isinstance(value, (datetime.date, datetime.datetime)):
        return value.isoformat()
    return value


def file_stats(table: pa.Table) -> str:
    """Delta's per-file statistics: record count, null counts; min and max of integer, date and
    short string columns (others get none: a reader then never skips the file by them)."""
    mins: dict[str, Any] = {}
    maxs: dict[str, Any] = {}
    nulls: dict[str, int] = {}
    for name, column in zip(table.schema.names, table.columns, strict=True):
        t = column.type
        if pa.types.is_nested(t):
            continue
        nulls[name] = column.null_count
        if column.null_count == len(column):
            continue
        if pa.types.is_integer(t) or pa.types.is_date(t) or pa.types.is_string(t):
            mm = pc.min_max(column)
            lo, hi = mm["min"].as_py(), mm["max"].as_py()
            if isinstance(lo, str) and (len(lo) > _MAX_STAT_STRING or len(hi) > _MAX_STAT_STRING):
                continue
            mins[name], maxs[name] = _stat(lo), _stat(hi)
    return json.dumps({"numRecords": table.num_rows, "minValues": mins, "maxValues": maxs, "nullCount": nulls})


def split_partitions(table: pa.Table, columns: list[str]) -> list[tuple[dict[str, str | None], pa.Table]]:
    """The table's rows by partition (the partition columns left out, as Delta stores them)."""
    if not columns:
        return [({}, table)]
    keys = table.select(columns).to_pylist()
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(tuple(partition_string(k[c]) for c in columns), []).append(i)
    data = table.drop_columns(columns)
    return [(dict(zip(columns, values, strict=True)), data.take(pa.array(idx, pa.int64()))) for values, idx in sorted(groups.items(), key=lambda g: repr(g[0]))]


class DeltaFileWriter(SinkWriter):
    """Buffers an epoch's records; ``finish`` writes them as Parquet data files and returns
    ``[[path relative to the table, size, partition values, stats JSON]]``."""

    def __init__(self, sink: Any, subtask: int):
        self.sink = sink
        self.subtask = subtask
        self.chunks: list[pa.Table] = []
        self._fs: Any = None
        self._checked: set[str] = set()  # local directories checked (private_files.output_subdir)

    def write(self, records: Any) -> None:
        if not len(records):
            return
        self.chunks.append(to_table(records, self.sink.input_type, self.sink.schema, self.sink.where))

    def finish(self, epoch: int) -> Any:
        if not self.chunks:
            return None
        chunks, self.chunks = self.chunks, []
        table = chunks[0] if len(chunks) == 1 else pa.concat_tables(chunks)
        if self._fs is None:
            self._fs = table_filesystem(self.sink.table_path, self.sink.storage_options)
        out = []
        local = None if getattr(self.sink, "trust_shared_dirs", False) else local_table_dir(self.sink.table_path)
        for values, data in split_partitions(table, self.sink.partition_columns):
            directory = partition_dir(self.sink.partition_columns, values)
            if local is not None:  # refuse a partition directory another user made or can write
                private_files.output_subdir(local, os.path.join(local, directory), "DeltaSink table directory",
                                            "DeltaSink partition directory", trust_hint(), self._checked)
            name = f"part-{self.subtask:05d}-{uuid.uuid4()}-e{epoch}.c000.snappy.parquet"
            rel = f"{directory}/{name}" if directory else name
            try:
                pq.write_table(data, rel, filesystem=self._fs, compression="snappy")
                size = self._fs.get_file_info(rel).size
            except Exception as e:  # the object store's own errors
                msg = f"DeltaSink at {self.sink.table_path!r}: writing data file {rel!r} failed: {e}; the epoch is retried"
                raise DeltaSinkError(msg) from None
            out.append([rel, int(size), values, file_stats(data)])
        return out
