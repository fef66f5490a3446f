"""Executor side of ``DeltaSource``: the pieces of a lane's read (records ``start``..``end``
of data files of the table), as Arrow batches of the stream's schema.

The file is opened through delta-rs's object store (the table's storage options), only the
row groups that hold the range are read, the partition columns (which Delta keeps in the log,
not in the file) are added from the split's payload, and the columns are cast to the stream's
types. A file whose size is not the one the log recorded, or that is gone (vacuumed), fails
the read naming the file and its version: reading the same range must give the same records.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from flowpoint.connectors.delta.errors import DeltaSourceError, DeltaSourceUnavailableError
from flowpoint.connectors.delta.source_types import has_timestamp
from flowpoint.connectors.delta.table_log import table_filesystem
from flowpoint.connectors.source import SourceReader, SourceSplit

BATCH_SIZE = 8192


class DeltaFileReader(SourceReader):
    def __init__(self, table_path: str, options: dict[str, str] | None, schema: pa.Schema, where: str):
        self.table_path = table_path
        self.options = options
        self.schema = schema  # the stream's: the columns read, in order, with their flowpoint types
        self.where = where

    def read(self, split: SourceSplit, spec: Any) -> Iterator[pa.RecordBatch]:
        """``spec``: ``[[file, from record, to record], ...]`` (connectors/delta/lanes.py), in order."""
        for f, start, end in spec:
            if end <= start:
                continue
            table = self._rows(f, start, end)
            table = _with_partitions(table, f["partition"], self.schema, self._describe(f))
            table = _conform(table, self.schema, self._describe(f))
            for batch in table.to_batches(max_chunksize=BATCH_SIZE):
                if batch.num_rows:
                    yield batch

    def _describe(self, f: dict) -> str:
        return f"{self.where}: data file {f['path']!r} (version {f['version']})"

    def _rows(self, f: dict, start: int, end: int) -> pa.Table:
        fs = table_filesystem(self.table_path, self.options)
        where = self._describe(f)
        try:
            size = fs.get_file_info(f["path"]).size
            if size is None:
                msg = (f"{where} is gone: VACUUM removed it (or it was deleted) before the source read it. Keep files "
                       f"longer than the job may lag (delta.deletedFileRetentionDuration, vacuum's retention)")
                raise DeltaSourceError(msg)
            if size != f["size"]:
                msg = f"{where} has {size} bytes, the table's log says {f['size']}: it changed after it was committed"
                raise DeltaSourceError(msg)
            pf = pq.ParquetFile(fs.open_input_file(f["path"]))
            names = set(pf.schema_arrow.names)
            columns = [n for n in self.schema.names if n in names and n not in f["partition"]]
            groups, first, offset = [], None, 0
            for g in range(pf.metadata.num_row_groups):
                n = pf.metadata.row_group(g).num_rows
                if offset + n > start and offset < end:
                    groups.append(g)
                    first = offset if first is None else first
                offset += n
            table = pf.read_row_groups(groups, columns=columns, use_threads=False)
        except DeltaSourceError:
            raise
        except (pa.ArrowException, ValueError) as e:
            msg = f"{where} cannot be read as Parquet: {e}"
            raise DeltaSourceError(msg) from None
        except OSError as e:
            msg = f"{where}: reading it failed: {e}"
            raise DeltaSourceUnavailableError(msg) from None
        return table.slice(start - (first or 0), end - start)


def _with_partitions(table: pa.Table, values: dict, schema: pa.Schema, where: str) -> pa.Table:
    """The partition columns read, filled from the log's strings."""
    for name in schema.names:
        if name not in values:
            continue
        t = schema.field(name).type
        raw = pa.array([values[name]] * table.num_rows, pa.string())
        try:
            if pa.types.is_timestamp(t):
                column = raw.cast(pa.timestamp("us")).cast(t, safe=False)  # the log's values are UTC wall-clock times
            else:
                column = raw.cast(t)
        except (pa.ArrowException, ValueError) as e:
            msg = f"{where}: partition value {values[name]!r} of column {name!r} is not a {t}: {e}"
            raise DeltaSourceError(msg) from None
        table = table.append_column(pa.field(name, t), column)
    return table


def _conform(table: pa.Table, schema: pa.Schema, where: str) -> pa.Table:
    """The stream's columns, in its order, cast to its types (timestamps to milliseconds)."""
    arrays = []
    for field in schema:
        if field.name not in table.schema.names:  # a column added to the table after this file was written
            arrays.append(pa.nulls(table.num_rows, field.type))
            continue
        column = table.column(field.name)
        if column.type != field.type:
            try:
                column = column.cast(field.type, safe=not has_timestamp(field.type))
            except (pa.ArrowException, ValueError) as e:
                msg = f"{where}: column {field.name!r} ({column.type}) cannot be read as {field.type}: {e}"
                raise DeltaSourceError(msg) from None
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)
