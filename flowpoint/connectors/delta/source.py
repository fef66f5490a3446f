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

Splits and positions, as the Kafka source keeps them: the splits are *lanes*, one per source
subtask when the job first starts (connectors/delta/lanes.py). Each data file belongs to one
lane; a lane reads its files version by version, and its position ``[version, file, records]``
says how far: the version read up to, the file being read in it and the records read of that
file. Positions go into checkpoint ``_metadata``, so a restore continues exactly (no duplicate,
no gap), at any parallelism (a lane is read by subtask ``lane % parallelism``). A lane of a
followed table never finishes, so its watermark never jumps to +infinity: the rows of a
version appended later are never late for that reason.

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
from flowpoint.connectors.delta.lanes import advance, lane_of, pieces
from flowpoint.connectors.delta.source_types import output_schema, stream_type
from flowpoint.connectors.delta.table_log import TableLog, table_filesystem
from flowpoint.connectors.source import Source, SourceReader, SourceSplit, SplitPlan

log = logging.getLogger("flowpoint")


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
        state["_driver_log"] = None  # the driver's table handle and file lists stay on the driver
        state["_driver_snapshots"] = {}
        state["_driver_appended"] = {}
        return state

    def create_reader(self) -> SourceReader:
        return DeltaFileReader(self.table_path, self._options(), self.schema, self.where)

    # -- driver side ---------------------------------------------------------------------------

    def _driver_reset(self) -> None:
        self._driver_log: TableLog | None = None
        self._driver_pinned: int | None = None  # the snapshot's version, fixed at the first start
        self._driver_snapshots: dict[int, list[dict]] = {}  # version -> its snapshot's data files
        self._driver_appended: dict[int, list[dict]] = {}  # version -> the data files it appended
        self._driver_latest = -1  # the newest version looked at
        self._driver_checked = 0.0  # when the log was last asked for new versions
        self._driver_total: int | None = None

    def _log(self) -> TableLog:
        if self._driver_log is None:
            self._driver_log = TableLog(self.table_path, self._options(), self.where)
        return self._driver_log

    def total_records(self) -> int | None:
        return self._driver_total if self.is_bounded() else None

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        """One lane per source subtask (connectors/delta/lanes.py), each at the snapshot's start."""
        version = self._load_snapshot(self._driver_pinned if self._driver_pinned is not None else self.starting_version)
        self._driver_pinned = version
        self._driver_latest = max(self._driver_latest, version)
        self._driver_checked = time.monotonic()
        files = self._driver_snapshots[version]
        self._driver_total = sum(int(f["records"]) for f in files)
        lanes = max(1, parallelism)
        log.info("%s: reading the snapshot of version %d (%d data files) in %d lanes", self.where, version, len(files), lanes)
        return [SourceSplit(f"lane-{i}", {"lane": i, "lanes": lanes, "snapshot": version}, [version, 0, 0]) for i in range(lanes)]

    def _load_snapshot(self, version: int | None) -> int:
        if version is None or version not in self._driver_snapshots:
            version, _, _, files = self._log().snapshot(version)
            self._driver_snapshots[version] = self._with_counts(sorted(files, key=lambda f: f["path"]))
        return version

    def _lane_files(self, payload: dict, version: int) -> list[dict]:
        """The files lane ``payload`` reads at ``version`` (the snapshot's, or those it appended)."""
        if version == int(payload["snapshot"]):
            self._load_snapshot(version)
            files = self._driver_snapshots[version]
        else:
            files = self._driver_appended.get(version)
            if files is None:
                change = self._log().change(version, self.table_schema, self.schema.names)
                if change.skipped:
                    log.debug("%s: version %d skipped: %s", self.where, version, change.skipped)
                files = self._with_counts(sorted(change.files, key=lambda f: f["path"]))
                if len(self._driver_appended) > 4096:
                    self._driver_appended.clear()
                self._driver_appended[version] = files
        lanes = int(payload["lanes"])
        return [f for f in files if lane_of(f["path"], lanes) == int(payload["lane"])]

    def _with_counts(self, files: list[dict]) -> list[dict]:
        # a file the log has no statistics for: its footer says how many records it holds
        return [f if f["records"] is not None else {**f, "records": self._footer_count(f)} for f in files]

    def _footer_count(self, f: dict) -> int:
        try:
            with table_filesystem(self.table_path, self._options()).open_input_file(f["path"]) as stream:
                return int(pq.ParquetFile(stream).metadata.num_rows)
        except (OSError, pa.ArrowException) as e:
            msg = f"{self.where}: cannot read the footer of data file {f['path']!r} (version {f['version']}): {e}"
            raise DeltaSourceUnavailableError(msg) from None

    def _last_version(self, payload: dict) -> int:
        """The newest version a lane may read up to: the snapshot's, when bounded; else the
        table's latest, asked at most once per monitoring interval."""
        if self.monitor_interval_ms is None:
            return int(payload["snapshot"])
        now = time.monotonic()
        if (now - self._driver_checked) * 1000 >= self.monitor_interval_ms:
            self._driver_checked = now
            latest = self._log().latest()
            if latest > self._driver_latest:
                log.debug("%s: versions up to %d to read", self.where, latest)
            self._driver_latest = max(self._driver_latest, latest)
        return max(self._driver_latest, int(payload["snapshot"]))

    def plan(self, split: SourceSplit, position: Any, budget: int, elapsed_s: float) -> SplitPlan:
        payload = split.payload
        end, records, done = advance(lambda v: self._lane_files(payload, v), position, budget, self._last_version(payload))
        return SplitPlan(end, records, done and self.is_bounded())

    def read_spec(self, split: SourceSplit, start: Any, end: Any) -> Any:
        return pieces(lambda v: self._lane_files(split.payload, v), start, end)


__all__ = ["DeltaSource", "DeltaSourceBuilder"]
