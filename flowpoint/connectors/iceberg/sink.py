"""``IcebergSink``: a stream written into an Apache Iceberg table exactly once, with pyiceberg on
the executors and the driver; no JVM package.

    stream.sink_to(IcebergSink.builder()
        .set_table("db.clicks_per_minute")
        .set_warehouse("/data/lake")               # the embedded SQL catalog on SQLite, or
        # .set_catalog_properties({"type": "rest", "uri": "http://...", ...})
        .set_partition_columns(["day"])
        .set_mode("append")                        # or "overwrite_partitions"
        .build())

Two phases, as the other exactly-once sinks (connectors/file_sink.py, connectors/delta/):

* write: each sink task writes its epoch's records as Parquet data files under the table's
  data location (connectors/iceberg/writer.py) and acknowledges the epoch with their paths and
  statistics. Nothing is visible: a reader sees only files a snapshot adds.
* pre-commit: the files of the epochs committed since the last checkpoint become a numbered
  batch in the checkpoint (``snapshot_driver_state``, in ``_metadata``).
* commit: when that checkpoint completes, the driver commits every batch up to it in one
  snapshot (connectors/iceberg/commits.py) whose summary names the sink's identity, the
  batches and the checkpoint.
* recovery: a restore brings the checkpoint's uncommitted batches back; the driver walks the
  table's snapshots for the highest batch committed under the checkpoint's identity and commits
  only the batches above it, so a checkpoint committed just before a crash is never committed
  twice. Then the sink takes a new identity (``flowpoint.restored-from`` names the old one):
  two runs restored from one checkpoint or savepoint, or a run restored from an older
  checkpoint, never take each other's commits for their own.

A finished bounded job commits what is left at its end. See docs/lakehouse.md.
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

from flowpoint import private_files
from flowpoint.connectors.batched_commits import BatchedCommitSink
from flowpoint.connectors.iceberg.catalog import CatalogSettings, open_table
from flowpoint.connectors.iceberg.commits import commit, committed_batch, summary
from flowpoint.connectors.iceberg.directories import (
    OUTPUT_DIR_MODE,
    check_table_tree,
    check_warehouse,
    local_dir,
)
from flowpoint.connectors.iceberg.errors import IcebergConfigurationError, IcebergSinkError
from flowpoint.connectors.iceberg.schema import (
    check_partition_columns,
    iceberg_schema,
    stream_columns,
)
from flowpoint.connectors.iceberg.writer import IcebergFileWriter
from flowpoint.connectors.sinks import SinkWriter

log = logging.getLogger("flowpoint")

MODES = ("append", "overwrite_partitions")


class IcebergSinkBuilder:
    def __init__(self) -> None:
        self._table: str | None = None
        self._partitions: list[str] = []
        self._mode = "append"
        self._catalog_name = "default"
        self._catalog_properties: dict[str, str] | None = None
        self._warehouse: str | None = None

    def set_table(self, table: str) -> IcebergSinkBuilder:
        namespace, _, name = table.rpartition(".") if isinstance(table, str) else ("", "", "")
        if not namespace or not name or any(not part for part in namespace.split(".")):
            msg = f"IcebergSink.set_table needs 'namespace.table' (e.g. 'db.clicks_per_minute'); got {table!r}"
            raise IcebergConfigurationError(msg)
        self._table = table
        return self

    def set_partition_columns(self, columns: list[str]) -> IcebergSinkBuilder:
        if isinstance(columns, str) or not all(isinstance(c, str) and c for c in columns):
            msg = f"IcebergSink.set_partition_columns needs a list of column names; got {columns!r}"
            raise IcebergConfigurationError(msg)
        self._partitions = list(columns)
        return self

    def set_mode(self, mode: str) -> IcebergSinkBuilder:
        if mode not in MODES:
            msg = f"IcebergSink.set_mode: {mode!r} is not a mode; use 'append' or 'overwrite_partitions'"
            raise IcebergConfigurationError(msg)
        self._mode = mode
        return self

    def set_warehouse(self, directory: Any) -> IcebergSinkBuilder:
        """The embedded catalog: a pyiceberg SQL catalog on SQLite in this local directory."""
        path = os.fspath(directory) if isinstance(directory, os.PathLike) else directory
        if not isinstance(path, str) or not path or local_dir(path) is None:
            msg = (f"IcebergSink.set_warehouse needs a local directory for the embedded catalog; got {directory!r} "
                   f"(for a warehouse in an object store, configure a catalog with set_catalog_properties)")
            raise IcebergConfigurationError(msg)
        self._warehouse = local_dir(path)
        return self

    def set_catalog_properties(self, properties: dict[str, str]) -> IcebergSinkBuilder:
        """Any pyiceberg catalog: ``pyiceberg.catalog.load_catalog(name, **properties)``."""
        if not isinstance(properties, dict):
            msg = f"IcebergSink.set_catalog_properties needs a dict of pyiceberg catalog properties; got {properties!r:.80}"
            raise IcebergConfigurationError(msg)
        self._catalog_properties = {str(k): str(v) for k, v in properties.items()}
        return self

    def set_catalog_name(self, name: str) -> IcebergSinkBuilder:
        """The name ``load_catalog`` gets (it reads that catalog's settings from ~/.pyiceberg.yaml)."""
        if not isinstance(name, str) or not name:
            msg = f"IcebergSink.set_catalog_name needs a name; got {name!r}"
            raise IcebergConfigurationError(msg)
        self._catalog_name = name
        return self

    def build(self) -> IcebergSink:
        if self._table is None:
            msg = "IcebergSink needs set_table('namespace.table')"
            raise IcebergConfigurationError(msg)
        where = f"IcebergSink of table {self._table!r}"
        if self._warehouse is not None and self._catalog_properties is not None:
            msg = (f"{where}: set either set_warehouse (the embedded catalog) or set_catalog_properties (any pyiceberg "
                   f"catalog), not both")
            raise IcebergConfigurationError(msg)
        if self._warehouse is None and self._catalog_properties is None:
            msg = (f"{where} needs a catalog: set_warehouse(dir) for the embedded SQL catalog on SQLite, or "
                   f"set_catalog_properties({{...}}) for any pyiceberg catalog")
            raise IcebergConfigurationError(msg)
        if self._mode == "overwrite_partitions" and not self._partitions:
            msg = (f"{where}: mode 'overwrite_partitions' needs set_partition_columns([...]) (each checkpoint replaces "
                   f"the partitions it writes)")
            raise IcebergConfigurationError(msg)
        if len(set(self._partitions)) != len(self._partitions):
            msg = f"{where}: partition columns {self._partitions} repeat a column"
            raise IcebergConfigurationError(msg)
        settings = CatalogSettings(self._catalog_name, dict(self._catalog_properties or {}), self._warehouse)
        return IcebergSink(self._table, settings, self._partitions, self._mode)


class IcebergSink(BatchedCommitSink):
    """``stream.sink_to(IcebergSink.builder()...build())``: exactly once into an Iceberg table."""

    guarantee = "exactly-once"
    accepts_arrow = True  # Arrow batches reach the writers unconverted
    IDENTITY_KEY = "sink_id"  # in each snapshot's summary as flowpoint.sink-id
    LINEAGE_KEY = "restored_from"

    def __init__(self, table: str, catalog: CatalogSettings, partition_columns: list[str], mode: str):
        self.table = table
        self.catalog = catalog
        self.partition_columns = list(partition_columns)
        self.mode = mode
        self.input_type: Any = None  # the stream's type (sink_to sets it)
        # what the tasks need of the table (on_job_config): plain data, no catalog
        self.table_location = ""
        self.data_location = ""
        self.io_properties: dict[str, str] = {}
        self.table_properties: dict[str, str] = {}
        self.schema_json = ""
        self.spec_json = ""
        self.trust_shared_dirs = False
        self._driver_reset()

    @staticmethod
    def builder() -> IcebergSinkBuilder:
        return IcebergSinkBuilder()

    @property
    def where(self) -> str:
        return f"IcebergSink of table {self.table!r}"

    def default_name(self) -> str:
        return "Iceberg Sink"

    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter:
        return IcebergFileWriter(self, subtask_index)

    # -- driver side ---------------------------------------------------------------------------

    def on_job_config(self, config: Any) -> None:
        """Before the job starts: the table's columns from the stream's type; the table is
        created if missing, else its columns and partitioning must be the stream's; local
        directories are checked (connectors/iceberg/directories.py)."""
        self.trust_shared_dirs = bool(config.get(private_files.TRUST_SHARED)) if config is not None else False
        schema = iceberg_schema(stream_columns(self.input_type, self.where), self.where)
        check_partition_columns(schema, self.partition_columns, self.where)
        if self.catalog.warehouse is not None:
            if self.trust_shared_dirs:
                private_files.makedirs(self.catalog.warehouse, OUTPUT_DIR_MODE, exact=False)
            else:
                check_warehouse(self.catalog.warehouse)
        catalog = self.catalog.load(self.where)
        table = open_table(self.catalog, catalog, self.table, schema, self.partition_columns, self.where)
        location = table.location().rstrip("/")
        data_location = table.properties.get("write.data.path", f"{location}/data").rstrip("/")
        if not self.trust_shared_dirs:
            for directory in (location, data_location):
                if local_dir(directory) is not None and (directory == location or not directory.startswith(location + "/")):
                    check_table_tree(local_dir(directory))
        self.table_location = location
        self.data_location = data_location
        self.io_properties = dict(table.io.properties)
        self.table_properties = dict(table.properties)
        self.schema_json = table.schema().model_dump_json()
        self.spec_json = table.spec().model_dump_json()
        self._driver_table = table

    def _new_identity(self) -> str:
        return f"flowpoint-iceberg-{uuid.uuid4().hex}"

    def _committed_batch(self) -> int | None:
        return committed_batch(self._table(), self._driver_identity)

    @staticmethod
    def _file_entry(f: Any) -> Any:
        return dict(f)

    def _table(self) -> Any:
        """The table as the catalog has it now."""
        try:
            table = getattr(self, "_driver_table", None)
            if table is None:
                table = self._driver_table = self.catalog.load(self.where).load_table(self.table)
            else:
                table.refresh()
            return table
        except IcebergSinkError:
            raise
        except Exception as e:  # pyiceberg's and the catalog's own errors
            msg = f"{self.where}: cannot read the table from {self.catalog.describe()}: {type(e).__name__}: {e}"
            raise IcebergSinkError(msg) from None

    def _commit(self) -> None:
        batches = self._driver_batches
        try:
            table = self._table()
            done = committed_batch(table, self._driver_identity)
            if done is not None:
                skipped = [n for n, _ in batches if n <= done]
                if skipped:
                    log.info("%s: batches %s were committed before the restore (sink id %s, batch %d); not committed "
                             "again", self.where, skipped, self._driver_identity, done)
                batches = [b for b in batches if b[0] > done]
            if batches:
                files = [f for _, fs in batches for f in fs]
                props = summary(self._driver_identity, [n for n, _ in batches], self._driver_checkpoint, self._driver_restored_from)
                removed = commit(table, files, props, self.mode == "overwrite_partitions")
                log.debug("%s: committed %d data files (batches up to %d), removed %d", self.where, len(files),
                          batches[-1][0], removed)
        except IcebergSinkError:
            raise
        except Exception as e:  # pyiceberg: storage errors, a concurrent commit (CommitFailedException)
            msg = (f"{self.where}: committing the checkpoint's snapshot failed: {type(e).__name__}: {e}; the job restarts "
                   f"from its last checkpoint, whose snapshot is committed then (none twice)")
            raise IcebergSinkError(msg) from None
        self._driver_batches = []
