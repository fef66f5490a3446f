"""``DeltaSink``: a stream written into a Delta Lake table exactly once, with delta-rs
(``deltalake``) on the executors and the driver; no JVM package.

    stream.sink_to(DeltaSink.builder()
        .set_table_path("s3://bucket/clicks_per_minute")
        .set_partition_columns(["day"])
        .set_mode("append")              # or "overwrite_partitions"
        .set_storage_options({"AWS_REGION": "eu-west-1"})
        .build())

Two phases, as the other exactly-once sinks (connectors/file_sink.py, connectors/kafka/sink.py):

* write: each sink task writes its epoch's records as Parquet data files into the table's
  directory (connectors/delta/writer.py) and acknowledges the epoch with their paths and
  statistics. Nothing is visible: a Delta reader sees only files the log adds.
* pre-commit: the files of the epochs committed since the last checkpoint become a numbered
  batch in the checkpoint (``snapshot_driver_state``, in ``_metadata``).
* commit: when that checkpoint completes, the driver commits every batch up to it in one Delta
  transaction (add actions; in ``overwrite_partitions`` mode also remove actions for the files
  the table held in the partitions the transaction writes) with a ``txn`` action: app id = the
  sink's identity (kept in its checkpoints), version = the last batch number; the checkpoint id
  goes into the commit's info (``flowpoint.checkpointId``).
* recovery: a restore brings the checkpoint's uncommitted batches back; the driver reads the
  table's ``txn`` version for the checkpoint's app id and commits only batches above it, so a
  checkpoint committed just before a crash is never committed twice. Then the sink takes a new
  app id (``flowpoint.restoredFrom`` names the old one): two runs restored from one checkpoint
  or savepoint, or a run restored from an older checkpoint, never take each other's commits for
  their own.

A finished bounded job commits what is left at its end. See docs/lakehouse.md.
"""

from __future__ import annotations

import logging
import os
import time
import uuid
from typing import Any

import pyarrow as pa

from flowpoint import private_files
from flowpoint.connectors.batched_commits import BatchedCommitSink
from flowpoint.connectors.delta.errors import DeltaConfigurationError, DeltaSinkError
from flowpoint.connectors.delta.schema import (
    check_existing,
    check_partition_columns,
    partition_string,
    table_schema,
)
from flowpoint.connectors.delta.writer import DeltaFileWriter, local_table_dir, trust_hint
from flowpoint.connectors.sinks import SinkWriter

log = logging.getLogger("flowpoint")

MODES = ("append", "overwrite_partitions")


class DeltaSinkBuilder:
    def __init__(self) -> None:
        self._path: str | None = None
        self._partitions: list[str] = []
        self._mode = "append"
        self._options: dict[str, str] = {}

    def set_table_path(self, path: Any) -> DeltaSinkBuilder:
        self._path = os.fspath(path) if isinstance(path, os.PathLike) else path
        return self

    def set_partition_columns(self, columns: list[str]) -> DeltaSinkBuilder:
        if isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns):
            msg = f"DeltaSink.set_partition_columns needs a list of column names; got {columns!r}"
            raise DeltaConfigurationError(msg)
        self._partitions = list(columns)
        return self

    def set_mode(self, mode: str) -> DeltaSinkBuilder:
        if mode not in MODES:
            msg = f"DeltaSink.set_mode: {mode!r} is not a mode; use 'append' or 'overwrite_partitions'"
            raise DeltaConfigurationError(msg)
        self._mode = mode
        return self

    def set_storage_options(self, options: dict[str, str]) -> DeltaSinkBuilder:
        if not isinstance(options, dict):
            msg = f"DeltaSink.set_storage_options needs a dict of delta-rs storage options; got {options!r:.80}"
            raise DeltaConfigurationError(msg)
        self._options = {str(k): str(v) for k, v in options.items()}
        return self

    def build(self) -> DeltaSink:
        if not isinstance(self._path, str) or not self._path:
            msg = "DeltaSink needs set_table_path(...): a local directory or a URI such as s3://bucket/table"
            raise DeltaConfigurationError(msg)
        if self._mode == "overwrite_partitions" and not self._partitions:
            msg = (f"DeltaSink at {self._path!r}: mode 'overwrite_partitions' needs set_partition_columns([...]) "
                   f"(each checkpoint replaces the partitions it writes)")
            raise DeltaConfigurationError(msg)
        if len(set(self._partitions)) != len(self._partitions):
            msg = f"DeltaSink at {self._path!r}: partition columns {self._partitions} repeat a column"
            raise DeltaConfigurationError(msg)
        path = self._path if "://" in self._path else os.path.abspath(self._path)
        return DeltaSink(path, self._partitions, self._mode, self._options)


class DeltaSink(BatchedCommitSink):
    """``stream.sink_to(DeltaSink.builder()...build())``: exactly once into a Delta table."""

    guarantee = "exactly-once"
    accepts_arrow = True  # Arrow batches reach the writers unconverted
    IDENTITY_KEY = "app_id"  # the txn action's app id

    def __init__(self, table_path: str, partition_columns: list[str], mode: str, storage_options: dict[str, str]):
        self.table_path = table_path
        self.partition_columns = list(partition_columns)
        self.mode = mode
        self.storage_options = dict(storage_options)
        self.input_type: Any = None  # the stream's type (sink_to sets it)
        self.schema: pa.Schema | None = None  # the table's columns (on_job_config), travels to the tasks
        self._driver_reset()

    @staticmethod
    def builder() -> DeltaSinkBuilder:
        return DeltaSinkBuilder()

    @property
    def where(self) -> str:
        return f"DeltaSink at {self.table_path!r}"

    def default_name(self) -> str:
        return "Delta Sink"

    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter:
        return DeltaFileWriter(self, subtask_index)

    # -- driver side ---------------------------------------------------------------------------

    def _driver_reset(self) -> None:
        super()._driver_reset()
        self._driver_table: Any = None

    def _options(self) -> dict[str, str] | None:
        return dict(self.storage_options) or None

    def on_job_config(self, config: Any) -> None:
        """Before the job starts: the table's columns from the stream's type; the table is
        created if missing, else its columns and partitioning must be the stream's."""
        from deltalake import DeltaTable

        schema = table_schema(self.input_type, self.where)
        check_partition_columns(schema, self.partition_columns, self.where)
        self.schema = schema
        self.trust_shared_dirs = bool(config is not None and config.get(private_files.TRUST_SHARED))
        directory = local_table_dir(self.table_path)
        if directory is not None and not self.trust_shared_dirs:
            # another user who can write the log could forge this sink's txn version (its commits
            # would be skipped) or replace a data file before the commit adds it
            private_files.check_output_tree(directory, "DeltaSink table directory", "DeltaSink table directory", trust_hint())
        try:
            if DeltaTable.is_deltatable(self.table_path, self._options()):
                table = DeltaTable(self.table_path, storage_options=self._options())
                existing = pa.schema(table.schema().to_arrow())
                check_existing(existing, table.metadata().partition_columns, schema, self.partition_columns, self.where)
                self.schema = pa.schema([pa.field(n, schema.field(n).type) for n in existing.names])  # the table's order
            else:
                if directory is not None:
                    private_files.makedirs(directory, private_files.OUTPUT_DIR_MODE, exact=False)
                DeltaTable.create(self.table_path, schema, mode="ignore", partition_by=self.partition_columns or None,
                                  storage_options=self._options())
                log.info("%s: created the table (columns %s, partitioned by %s)", self.where, schema.names, self.partition_columns)
        except DeltaConfigurationError:
            raise
        except Exception as e:  # delta-rs and object store errors
            msg = f"{self.where}: cannot open or create the table: {e}; check the path and set_storage_options(...)"
            raise DeltaSinkError(msg) from None

    def _new_identity(self) -> str:
        return f"flowpoint-delta-{uuid.uuid4().hex}"

    def _committed_batch(self) -> int | None:
        """The last batch number this sink committed to the table (its ``txn`` version), or None."""
        try:
            return self._table().transaction_version(self._driver_identity)
        except Exception as e:  # delta-rs and object store errors
            msg = f"{self.where}: cannot read the table's transaction log: {e}; check the path and set_storage_options(...)"
            raise DeltaSinkError(msg) from None

    def _table(self) -> Any:
        from deltalake import DeltaTable

        if self._driver_table is None:
            self._driver_table = DeltaTable(self.table_path, storage_options=self._options())
        else:
            self._driver_table.update_incremental()
        return self._driver_table

    def _commit(self) -> None:
        from deltalake import CommitProperties, Transaction

        batches = self._driver_batches
        try:
            table = self._table()
            done = table.transaction_version(self._driver_identity)
            if done is not None:
                skipped = [n for n, _ in batches if n <= done]
                if skipped:
                    log.info("%s: batches %s were committed before the restore (txn %s version %d); not committed again",
                             self.where, skipped, self._driver_identity, done)
                batches = [b for b in batches if b[0] > done]
            if batches:
                last = batches[-1][0]
                files = [f for _, fs in batches for f in fs]
                meta: dict[str, Any] = {"flowpoint.appId": self._driver_identity, "flowpoint.batches": [n for n, _ in batches]}
                if self._driver_checkpoint is not None:
                    meta["flowpoint.checkpointId"] = self._driver_checkpoint
                if self._driver_restored_from and self._driver_restored_from != self._driver_identity:
                    meta["flowpoint.restoredFrom"] = self._driver_restored_from
                table.create_write_transaction(
                    self._actions(table, files), "append", self.schema, partition_by=self.partition_columns or None,
                    commit_properties=CommitProperties(app_transactions=[Transaction(self._driver_identity, last)], custom_metadata=meta),
                )
                log.debug("%s: committed %d data files (batches up to %d)", self.where, len(files), last)
        except DeltaSinkError:
            raise
        except Exception as e:  # delta-rs: storage errors, conflicting commits
            msg = (f"{self.where}: committing the checkpoint's transaction failed: {e}; the job restarts from its last "
                   f"checkpoint, whose transaction is committed then (none twice)")
            raise DeltaSinkError(msg) from None
        self._driver_batches = []

    def _actions(self, table: Any, files: list) -> list:
        from deltalake._internal import RemoveAction
        from deltalake.transaction import AddAction

        now = int(time.time() * 1000)
        adds = [AddAction(rel, int(size), dict(values), now, True, stats) for rel, size, values, stats in files]
        if self.mode != "overwrite_partitions":
            return adds
        touched = {tuple(values.get(c) for c in self.partition_columns) for _, _, values, _ in files}
        existing = pa.table(table.get_add_actions(flatten=True)).to_pylist()
        removes = []
        for f in existing:
            values = {c: f.get(f"partition.{c}") for c in self.partition_columns}
            key = tuple(None if v is None else _log_string(v) for v in values.values())
            if key in touched:
                removes.append(RemoveAction(f["path"], True, now, int(f["size_bytes"]), {c: None if v is None else _log_string(v) for c, v in values.items()}))
        return [*removes, *adds]


def _log_string(value: Any) -> str:
    return value if isinstance(value, str) else partition_string(value)
