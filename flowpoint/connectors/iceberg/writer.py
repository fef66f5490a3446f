"""The Iceberg sink's task side: the records of an epoch become Parquet data files under the
table's data location, one per partition, under names no one else uses; ``finish`` hands the
driver their descriptions (paths, sizes, partition values and Iceberg's column statistics:
datafiles.py), never data.

A data file is invisible until a snapshot adds it: a reader plans its scan from the snapshot's
manifests, never by listing the directory, so the files of an epoch that never commits (a
failed task attempt, a run restarted from an earlier checkpoint) stay unreferenced, for an
orphan-file clean-up to remove. Files are written as pyiceberg's own writer writes them: the
table's Arrow schema with Iceberg field ids, the partition columns kept in the file, the
table's Parquet compression."""

from __future__ import annotations

import uuid
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from flowpoint.connectors.iceberg.datafiles import describe
from flowpoint.connectors.iceberg.directories import data_dir
from flowpoint.connectors.iceberg.errors import IcebergConfigurationError, IcebergSinkError
from flowpoint.connectors.iceberg.schema import partition_value, type_text
from flowpoint.connectors.sinks import SinkWriter
from flowpoint.connectors.table_records import records_table


def to_table(records: Any, type_info: Any, schema: pa.Schema, where: str) -> pa.Table:
    """An epoch's records (Python values or Arrow batches) as a table of the data files'
    ``schema`` (the table's columns, in its order, with their field ids)."""
    return records_table(records, type_info, schema, where, IcebergConfigurationError)


def split_partitions(table: pa.Table, columns: list[str]) -> list[tuple[tuple, pa.Table]]:
    """The table's rows by the values of its partition columns (Python values, sorted by their
    text so that a retried task writes its files in the same order)."""
    if not columns:
        return [((), table)]
    keys = table.select(columns).to_pylist()
    groups: dict[tuple, list[int]] = {}
    for i, k in enumerate(keys):
        groups.setdefault(tuple(k[c] for c in columns), []).append(i)
    return [(values, table.take(pa.array(idx, pa.int64()))) for values, idx in sorted(groups.items(), key=lambda g: repr(g[0]))]


class TableLayout:
    """What a task needs of the table, rebuilt from the sink's plain settings once per writer:
    the schema and partition spec, the data files' Arrow schema, the statistics plan, the
    table's FileIO."""

    def __init__(self, sink: Any):
        from pyiceberg.io import load_file_io
        from pyiceberg.io.pyarrow import (
            compute_statistics_plan,
            parquet_path_to_id_mapping,
            schema_to_pyarrow,
        )
        from pyiceberg.partitioning import PartitionSpec
        from pyiceberg.schema import Schema

        self.schema = Schema.model_validate_json(sink.schema_json)
        self.spec = PartitionSpec.model_validate_json(sink.spec_json)
        self.arrow_schema = schema_to_pyarrow(self.schema)
        self.partition_types = [type_text(self.schema.find_field(c).field_type) for c in sink.partition_columns]
        self.stats_plan = compute_statistics_plan(self.schema, sink.table_properties)
        self.id_mapping = parquet_path_to_id_mapping(self.schema)
        self.io = load_file_io(dict(sink.io_properties), sink.table_location)
        codec = sink.table_properties.get("write.parquet.compression-codec", "zstd")
        self.compression = "none" if codec == "uncompressed" else codec
        level = sink.table_properties.get("write.parquet.compression-level")
        self.compression_level = int(level) if level else None

    def partition_path(self, partition: list) -> str:
        from pyiceberg.typedef import Record

        return self.spec.partition_to_path(Record(*partition), self.schema) if partition else ""

    def statistics(self, metadata: pq.FileMetaData) -> dict[str, Any]:
        from pyiceberg.io.pyarrow import data_file_statistics_from_parquet_metadata

        return data_file_statistics_from_parquet_metadata(metadata, self.stats_plan, self.id_mapping).to_serialized_dict()


class IcebergFileWriter(SinkWriter):
    """Buffers an epoch's records; ``finish`` writes them as Parquet data files and returns
    their descriptions (datafiles.py)."""

    def __init__(self, sink: Any, subtask: int):
        self.sink = sink
        self.subtask = subtask
        self.chunks: list[pa.Table] = []
        self._layout: TableLayout | None = None
        self._checked: set[str] = set()  # local directories checked

    def layout(self) -> TableLayout:
        if self._layout is None:
            self._layout = TableLayout(self.sink)
        return self._layout

    def write(self, records: Any) -> None:
        if not len(records):
            return
        self.chunks.append(to_table(records, self.sink.input_type, self.layout().arrow_schema, self.sink.where))

    def finish(self, epoch: int) -> Any:
        if not self.chunks:
            return None
        chunks, self.chunks = self.chunks, []
        table = chunks[0] if len(chunks) == 1 else pa.concat_tables(chunks)
        layout = self.layout()
        out = []
        for values, data in split_partitions(table, self.sink.partition_columns):
            partition = [partition_value(v, t) for v, t in zip(values, layout.partition_types, strict=True)]
            directory = "/".join(p for p in (self.sink.data_location, layout.partition_path(partition)) if p)
            path = f"{directory}/{self.subtask:05d}-{epoch}-{uuid.uuid4()}.parquet"
            data_dir(directory, self.sink.data_location, self.sink.trust_shared_dirs, self._checked)
            size, statistics = self._write(layout, path, data)
            out.append(describe(path, size, layout.spec.spec_id, partition, statistics))
        return out

    def _write(self, layout: TableLayout, path: str, data: pa.Table) -> tuple[int, dict[str, Any]]:
        """Writes ``data`` to ``path``: its size and statistics."""
        try:
            output = layout.io.new_output(path)
            with output.create(overwrite=False) as stream, pq.ParquetWriter(
                    stream, schema=layout.arrow_schema, compression=layout.compression,
                    compression_level=layout.compression_level) as writer:
                writer.write_table(data)
            return len(output), layout.statistics(writer.writer.metadata)
        except Exception as e:  # the FileIO's and the object store's own errors
            msg = f"{self.sink.where}: writing data file {path!r} failed: {e}; the epoch is retried"
            raise IcebergSinkError(msg) from None
