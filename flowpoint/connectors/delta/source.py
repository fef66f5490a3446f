"""``DeltaSource``: a Delta Lake table read as a stream, with delta-rs (``deltalake``); no JVM.

    source = (DeltaSource.builder()
              .set_table_path("s3://bucket/clicks")
              .set_storage_options({"AWS_REGION": "eu-west-1"})
              .set_starting_version(12)                        # default: the latest version
              .monitor_continuously(Duration.of_seconds(2))    # default: bounded
              .set_columns(["user", "clicks"])                 # default: every column
              .build())
    env.from_source(source, WatermarkStrategy.no_watermarks(), "delta")

Bounded (the default), the source reads the table's snapshot at its starting version (the
latest when the job first starts) and ends. With ``monitor_continuously(interval)`` it then
follows the table: at most once per interval it reads the log's new versions and reads the
data files each version appends (connectors/delta/table_log.py says which versions are read,
skipped or refused).

Splits and positions, as the FileSource and the Kafka source keep them: every data file is a
split (payload: its version, path, size, record count and partition values; position: the
records read from it), and split ``_delta_log`` carries the snapshot's version. Split payloads
and positions go into checkpoint ``_metadata``, so the versions read so far and the records
read of each file are restored exactly (no duplicate, no gap), at any parallelism. After a
restore the source follows on from the newest version its restored splits hold: versions
after it that added nothing are read again and skipped again.

The stream's type is the table's columns as a ``Types.ROW_NAMED`` (connectors/delta/source_types.py):
records travel as Arrow batches and ``key_by("column")`` takes the columnar path.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from flowpoint.api.time import Duration
from flowpoint.connectors.delta.errors import (
    DeltaSourceConfigurationError,
    DeltaSourceUnavailableError,
)
from flowpoint.connectors.delta.file_reader import DeltaFileReader
from flowpoint.connectors.delta.source_types import output_schema, stream_type
from flowpoint.connectors.delta.table_log import TableLog, table_filesystem
from flowpoint.connectors.source import Source, SourceReader, SourceSplit, SplitPlan

log = logging.getLogger("flowpoint")

LOG_SPLIT = "_delta_log"


class DeltaSourceBuilder:
    def __init__(self) -> None:
        self._path: str | None = None
        self._options: dict[str, str] = {}
        self._version: int | None = None
        self._interval_ms: int | None = None
        self._columns: list[str] | None = None

    def set_table_path(self, path: Any) -> DeltaSourceBuilder:
        self._path = os.fspath(path) if isinstance(path, os.PathLike) else path
        return self

    def set_storage_options(self, options: dict[str, str]) -> DeltaSourceBuilder:
        if not isinstance(options, dict):
            msg = f"DeltaSource.set_storage_options needs a dict of delta-rs storage options; got {options!r:.80}"
            raise DeltaSourceConfigurationError(msg)
        self._options = {str(k): str(v) for k, v in options.items()}
        return self

    def set_starting_version(self, version: int) -> DeltaSourceBuilder:
        """Read the table's snapshot at ``version`` (then follow from there, when monitoring)."""
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            msg = f"DeltaSource.set_starting_version needs a table version (an int >= 0); got {version!r}"
            raise DeltaSourceConfigurationError(msg)
        self._version = version
        return self

    def monitor_continuously(self, discovery_interval: Duration) -> DeltaSourceBuilder:
        """Follow the table after its snapshot: look for new versions every ``discovery_interval`` (unbounded)."""
        if not isinstance(discovery_interval, Duration) or discovery_interval.to_milliseconds() <= 0:
            msg = f"DeltaSource.monitor_continuously takes a positive Duration (Duration.of_seconds(2)); got {discovery_interval!r}"
            raise DeltaSourceConfigurationError(msg)
        self._interval_ms = discovery_interval.to_milliseconds()
        return self

    def set_columns(self, columns: list[str]) -> DeltaSourceBuilder:
        """Read these columns only, in this order."""
        if isinstance(columns, str) or not columns or not all(isinstance(c, str) and c for c in columns) or len(set(columns)) != len(columns):
            msg = f"DeltaSource.set_columns needs a list of distinct column names; got {columns!r}"
            raise DeltaSourceConfigurationError(msg)
        self._columns = list(columns)
        return self

    def build(self) -> DeltaSource:
        if not isinstance(self._path, str) or not self._path:
            msg = "DeltaSource needs set_table_path(...): a local directory or a URI such as s3://bucket/table"
            raise DeltaSourceConfigurationError(msg)
        path = self._path if "://" in self._path else os.path.abspath(os.path.expanduser(self._path))
        return DeltaSource(path, self._options, self._version, self._interval_ms, self._columns)


class DeltaSource(Source):
    """``env.from_source(DeltaSource.builder()...build(), strategy, name)``: a Delta table's rows."""

    def __init__(self, table_path: str, storage_options: dict[str, str], starting_version: int | None,
                 monitor_interval_ms: int | None, columns: list[str] | None):
        self.table_path = table_path
        self.storage_options = dict(storage_options)
        self.starting_version = starting_version
        self.monitor_interval_ms = monitor_interval_ms
        self._driver_reset()
        # the stream's type, from the table's schema at the starting version (the latest when none)
        _, table_schema, _, _ = self._log().snapshot(starting_version)
        self.table_schema = table_schema
        self.output_type = stream_type(table_schema, columns, self.where)
        self.schema = output_schema(self.output_type)

    @staticmethod
    def builder() -> DeltaSourceBuilder:
        return DeltaSourceBuilder()

    @property
    def where(self) -> str:
        return f"DeltaSource at {self.table_path!r}"

    def default_name(self) -> str:
        return "Delta Source"

    def is_bounded(self) -> bool:
        return self.monitor_interval_ms is None

    def _options(self) -> dict[str, str] | None:
        return dict(self.storage_options) or None

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_driver_log"] = None  # the driver's table handle stays on the driver
        return state

    def create_reader(self) -> SourceReader:
        return DeltaFileReader(self.table_path, self._options(), self.schema, self.where)

    # -- driver side ---------------------------------------------------------------------------

    def _driver_reset(self) -> None:
        self._driver_log: TableLog | None = None
        self._driver_pinned: int | None = None  # the snapshot's version, fixed at the first start
        self._driver_followed = -1  # the last version looked at
        self._driver_issued: tuple[int, str] | None = None  # (number of splits, last split id) handed out
        self._driver_scanned = 0.0
        self._driver_total: int | None = None

    def _log(self) -> TableLog:
        if self._driver_log is None:
            self._driver_log = TableLog(self.table_path, self._options(), self.where)
        return self._driver_log

    def total_records(self) -> int | None:
        return self._driver_total if self.is_bounded() else None

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        version, _, _, files = self._log().snapshot(self._driver_pinned if self._driver_pinned is not None else self.starting_version)
        self._driver_pinned = version
        splits = [SourceSplit(LOG_SPLIT, {"log": True, "version": version}, version), *self._file_splits(files)]
        self._driver_total = sum(s.payload["records"] for s in splits[1:])
        self._driver_followed = version
        self._driver_issued = (len(splits), splits[-1].split_id)
        self._driver_scanned = time.monotonic()
        log.info("%s: reading the snapshot of version %d (%d data files)", self.where, version, len(files))
        return splits

    def discover_splits(self, known: list[SourceSplit]) -> list[SourceSplit]:
        if self.monitor_interval_ms is None or not known:
            return []
        now = time.monotonic()
        if (now - self._driver_scanned) * 1000 < self.monitor_interval_ms:
            return []
        self._driver_scanned = now
        # the newest version the splits hold (restored ones, after a restore); the versions this
        # source looked at since, when the splits are the ones it handed out
        base = max(int(s.payload["version"]) for s in known)
        if (len(known), known[-1].split_id) == self._driver_issued:
            base = max(base, self._driver_followed)
        log_ = self._log()
        latest = log_.latest()
        files: list[dict] = []
        for v in range(base + 1, latest + 1):
            change = log_.change(v, self.table_schema, self.schema.names)
            if change.skipped:
                log.debug("%s: version %d skipped: %s", self.where, v, change.skipped)
            files.extend(change.files)
        new = self._file_splits(files)
        self._driver_followed = max(base, latest)
        self._driver_issued = (len(known) + len(new), new[-1].split_id if new else known[-1].split_id)
        if new:
            log.info("%s: versions %d to %d appended %d data files", self.where, base + 1, latest, len(new))
        return new

    def _file_splits(self, files: list[dict]) -> list[SourceSplit]:
        out = []
        for f in files:
            if f["records"] is None:  # the log has no statistics for it: the file's footer says
                f = {**f, "records": self._footer_count(f)}
            out.append(SourceSplit(f"{f['version']}/{f['path']}", f, 0))
        return out

    def _footer_count(self, f: dict) -> int:
        try:
            with table_filesystem(self.table_path, self._options()).open_input_file(f["path"]) as stream:
                return int(pq.ParquetFile(stream).metadata.num_rows)
        except (OSError, pa.ArrowException) as e:
            msg = f"{self.where}: cannot read the footer of data file {f['path']!r} (version {f['version']}): {e}"
            raise DeltaSourceUnavailableError(msg) from None

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        if split.payload.get("log"):
            return SplitPlan(position, 0, True)  # holds the snapshot's version; no records
        count = int(split.payload["records"])
        end = min(count, position + budget)
        return SplitPlan(end, end - position, end >= count)


__all__ = ["DeltaSource", "DeltaSourceBuilder"]
