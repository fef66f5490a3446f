"""``FileSink``: part files committed when a checkpoint completes, as Flink's FileSink.

    sink = FileSink.for_row_format("/data/out", Encoder.simple_string_encoder()) \
        .with_output_file_config(OutputFileConfig.builder().with_part_prefix("clicks").with_part_suffix(".txt").build()) \
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()) \
        .with_bucket_assigner(BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH")) \
        .build()

Layout, as Flink's: ``<base>/<bucket>/<prefix>-<uuid>-<n><suffix>``. The bucket is a directory
named by the bucket assigner: ``date_time_bucket_assigner(format, timezone)`` (the default,
``yyyy-MM-dd--HH`` of the processing time when the record was written, in the timezone given,
else the machine's) or ``base_path_bucket_assigner()`` (no directory). ``<uuid>`` names one
parallel instance of the sink (one per instance and job, kept across restores), ``<n>`` counts
that instance's part files in the bucket from 0; prefix and suffix come from
``OutputFileConfig`` (default ``part`` and none).

A part file goes through Flink's three states. *In progress*: each sink task writes the records
of an epoch to a hidden piece ``.<prefix>-<sink token>-<subtask>-e<epoch>.inprogress`` in the
bucket (a retried task rewrites the same piece; the token is new for every sink object, so two
sinks or jobs on one directory never share a piece). *Pending*: once the epoch commits, the driver adds its
pieces to the open part file of their instance and bucket; the rolling policy closes a part
file at a checkpoint: ``on_checkpoint_rolling_policy()`` at every one (bulk formats always),
``default_rolling_policy(part_size, rollover_interval, inactivity_interval)`` once the part holds
``part_size`` bytes, was opened ``rollover_interval`` ms ago or got nothing for
``inactivity_interval`` ms. *Finished*: when that checkpoint completes, the closed part files'
pieces are joined into ``<prefix>-<uuid>-<n><suffix>`` (written under a hidden name, renamed into
place) and the pieces deleted. Every piece is checked against the size and SHA-256 its task
recorded when it wrote it (kept with the part file in the checkpoint), twice: at the checkpoint
that pre-commits it (a piece changed, replaced or removed raises a recoverable
CorruptSinkFileError: the job restarts from its last completed checkpoint and writes it again),
and when its part file is committed (a piece changed after a checkpoint recorded it fails the
job, which keeps its checkpoints); nothing of a changed piece is ever committed. The base path
and every directory below it must be the job user's and writable by no one else (checked before
the job starts, and by the task writing into a bucket directory; ``security.trust-shared-directories``
accepts others); new directories are 0755, pieces and part files 0644. The open and closed part files are part of the checkpoint, so a
restore finishes what the checkpoint closed (once: a part file already finished is not written
again) and carries on with the open ones: output is exactly once. When a bounded job finishes,
every part file is finished. Without checkpointing, part files are finished only then (as in
Flink: a streaming job without checkpoints never finishes a part file).

The driver joins the pieces, so the base path must be a directory the driver and every
executor see (a local directory in local mode, a shared mount on a cluster); Parquet pieces
become part files one to one (Parquet files cannot be joined by appending).
"""

from __future__ import annotations

import csv
import datetime
import hashlib
import io
import json
import logging
import os
import time
import uuid
from typing import Any
from zoneinfo import ZoneInfo

import pyarrow as pa
import pyarrow.parquet as pq

from flowpoint import private_files
from flowpoint.api.row import Row
from flowpoint.api.typed_values import java_to_string
from flowpoint.api.types import RowType, TupleType, rows_to_arrow
from flowpoint.connectors.files import (
    FileFormat,
    _arrow_message,
    _conform,
    _csv_fields,
    _json_default,
    _jsonable,
    _local_path,
)
from flowpoint.connectors.sinks import Sink, SinkWriter
from flowpoint.errors import ConfigurationError, CorruptSinkFileError

log = logging.getLogger("flowpoint")

#: Sink directories flowpoint creates: readable by the output's readers, writable only by the
#: job's user; pieces and part files likewise. A umask only narrows these (077 keeps them
#: private), and none makes them writable by others.
OUTPUT_DIR_MODE = private_files.OUTPUT_DIR_MODE
OUTPUT_FILE_MODE = 0o644

class Encoder:
    """How a row-format FileSink turns each record into a line of text."""

    def __init__(self, kind: str, charset: str = "utf-8", delimiter: str = ",", header: bool = False):
        if kind == "csv" and (not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n\""):
            msg = f"Encoder.csv: the delimiter must be one character (not a quote or line break); got {delimiter!r}"
            raise ConfigurationError(msg)
        try:
            "".encode(charset)
        except LookupError:
            msg = f"unknown charset {charset!r}"
            raise ConfigurationError(msg) from None
        self.kind = kind
        self.charset = charset
        self.delimiter = delimiter
        self.header = bool(header)

    @staticmethod
    def simple_string_encoder(charset_name: str = "UTF-8") -> Encoder:
        """A record's text per line, as Flink's ``SimpleStringEncoder`` writes it: Java's
        ``toString`` of a typed stream's values (``(a,1)`` for a tuple), ``str`` of untyped ones."""
        return Encoder("string", charset_name)

    @staticmethod
    def json_lines() -> Encoder:
        """One JSON value per line: named Rows and dicts as objects, tuples as arrays."""
        return Encoder("json")

    @staticmethod
    def csv(delimiter: str = ",", header: bool = False) -> Encoder:
        """One CSV line per record (a tuple, Row, list or dict's values). ``header=True`` starts
        every file with the field names of its first record (a Row with names or a dict)."""
        return Encoder("csv", delimiter=delimiter, header=header)

    @property
    def extension(self) -> str:
        return {"string": "txt", "json": "jsonl", "csv": "csv"}[self.kind]

    def encode(self, records: list, to_string: Any = str) -> list[str]:
        if self.kind == "string":
            return [to_string(r) for r in records]
        if self.kind == "json":
            dumps = json.dumps
            return [dumps(_jsonable(r), ensure_ascii=False, separators=(",", ":"), default=_json_default) for r in records]
        buf = io.StringIO()
        writer = csv.writer(buf, delimiter=self.delimiter, lineterminator="\n")
        writer.writerows(_csv_fields(r) for r in records)
        return buf.getvalue().split("\n")[:-1]

    def header_line(self, first: Any) -> str | None:
        if self.kind != "csv" or not self.header:
            return None
        if isinstance(first, Row) and first._fields:
            names = list(first._fields)
        elif isinstance(first, dict):
            names = [str(k) for k in first]
        else:
            msg = f"Encoder.csv(header=True) needs Rows with named fields or dicts to name the columns; got {first!r:.80}"
            raise ConfigurationError(msg)
        buf = io.StringIO()
        csv.writer(buf, delimiter=self.delimiter, lineterminator="\n").writerow(names)
        return buf.getvalue().rstrip("\n")

    def __repr__(self) -> str:
        return f"Encoder.{self.kind}"



def _infer_table(records: list) -> pa.Table:
    first = records[0]
    if isinstance(first, dict):
        return pa.Table.from_pylist(records)
    if isinstance(first, tuple):
        names = list(first._fields) if isinstance(first, Row) and first._fields else [f"f{i}" for i in range(len(first))]
        columns = list(zip(*records, strict=True))
        return pa.table([pa.array(list(c)) for c in columns], names=names)
    return pa.table([pa.array(records)], names=["value"])


class OutputFileConfig:
    """Part file names: ``<prefix>-<uuid>-<n><suffix>`` (``OutputFileConfig.builder()
    .with_part_prefix("p").with_part_suffix(".txt").build()``)."""

    def __init__(self, part_prefix: str = "part", part_suffix: str = ""):
        for what, value in (("prefix", part_prefix), ("suffix", part_suffix)):
            if not isinstance(value, str) or "/" in value or os.sep in value:
                msg = f"OutputFileConfig: the part {what} must be a string without '/'; got {value!r}"
                raise ConfigurationError(msg)
        if not part_prefix or part_prefix.startswith((".", "_")):
            msg = f"OutputFileConfig: the part prefix must be non-empty and not start with '.' or '_' (readers skip such files); got {part_prefix!r}"
            raise ConfigurationError(msg)
        self.part_prefix = part_prefix
        self.part_suffix = part_suffix

    def get_part_prefix(self) -> str:
        return self.part_prefix

    def get_part_suffix(self) -> str:
        return self.part_suffix

    @staticmethod
    def builder() -> OutputFileConfig.OutputFileConfigBuilder:
        return OutputFileConfig.OutputFileConfigBuilder()

    class OutputFileConfigBuilder:
        def __init__(self) -> None:
            self._prefix = "part"
            self._suffix = ""

        def with_part_prefix(self, prefix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self._prefix = prefix
            return self

        def with_part_suffix(self, suffix: str) -> OutputFileConfig.OutputFileConfigBuilder:
            self._suffix = suffix
            return self

        def build(self) -> OutputFileConfig:
            return OutputFileConfig(self._prefix, self._suffix)


class RollingPolicy:
    """When an open part file is closed (it is finished when the next checkpoint completes)."""

    def __init__(self, on_checkpoint: bool, part_size: int = 128 << 20, rollover_interval: int = 60_000, inactivity_interval: int = 60_000):
        for what, value in (("part_size", part_size), ("rollover_interval", rollover_interval), ("inactivity_interval", inactivity_interval)):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                msg = f"RollingPolicy: {what} must be a positive int; got {value!r}"
                raise ConfigurationError(msg)
        self.on_checkpoint = on_checkpoint
        self.part_size = part_size
        self.rollover_interval = rollover_interval
        self.inactivity_interval = inactivity_interval

    @staticmethod
    def default_rolling_policy(part_size: int = 1024 * 1024 * 128, rollover_interval: int = 60 * 1000,
                               inactivity_interval: int = 60 * 1000) -> RollingPolicy:
        return RollingPolicy(False, part_size, rollover_interval, inactivity_interval)

    @staticmethod
    def on_checkpoint_rolling_policy() -> RollingPolicy:
        return RollingPolicy(True)

    def should_roll(self, size: int, opened_ms: int, last_ms: int, now_ms: int) -> bool:
        return (self.on_checkpoint or size >= self.part_size or now_ms - opened_ms >= self.rollover_interval
                or now_ms - last_ms >= self.inactivity_interval)

    def __repr__(self) -> str:
        if self.on_checkpoint:
            return "RollingPolicy.on_checkpoint_rolling_policy()"
        return f"RollingPolicy.default_rolling_policy({self.part_size}, {self.rollover_interval}, {self.inactivity_interval})"


_JAVA_DATE = [("yyyy", "%Y"), ("yy", "%y"), ("MM", "%m"), ("dd", "%d"), ("HH", "%H"), ("mm", "%M"), ("ss", "%S"), ("SSS", "%f")]


def _strftime_pattern(java: str) -> str:
    """Java's ``DateTimeFormatter`` letters (y, M, d, H, m, s, S; text in '...') as strftime."""
    out, i = [], 0
    while i < len(java):
        if java[i] == "'":
            j = java.find("'", i + 1)
            if j < 0:
                msg = f"date_time_bucket_assigner: unclosed quote in {java!r}"
                raise ConfigurationError(msg)
            out.append(java[i + 1 : j].replace("%", "%%"))
            i = j + 1
            continue
        for token, code in _JAVA_DATE:
            if java.startswith(token, i):
                out.append(code)
                i += len(token)
                break
        else:
            if java[i].isalpha():
                msg = f"date_time_bucket_assigner: pattern letter {java[i]!r} in {java!r} is not supported (use y, M, d, H, m, s, S)"
                raise ConfigurationError(msg)
            out.append(java[i].replace("%", "%%"))
            i += 1
    return "".join(out)


class BucketAssigner:
    """Which directory under the base path a record goes to."""

    def __init__(self, kind: str, format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None):
        self.kind = kind
        self.format_str = format_str
        self.timezone_id = timezone_id
        if kind == "date_time":
            self._pattern = _strftime_pattern(format_str)
            if timezone_id is not None:
                try:
                    ZoneInfo(timezone_id)
                except Exception:  # noqa: BLE001 - ZoneInfo raises several kinds
                    msg = f"date_time_bucket_assigner: unknown timezone {timezone_id!r} (use an IANA name such as 'UTC' or 'Europe/Berlin')"
                    raise ConfigurationError(msg) from None

    @staticmethod
    def base_path_bucket_assigner() -> BucketAssigner:
        """Every part file directly under the base path."""
        return BucketAssigner("base_path")

    @staticmethod
    def date_time_bucket_assigner(format_str: str = "yyyy-MM-dd--HH", timezone_id: str | None = None) -> BucketAssigner:
        """A directory per processing-time period (Flink's default: one per hour)."""
        return BucketAssigner("date_time", format_str, timezone_id)

    def bucket_id(self, processing_time_ms: int) -> str:
        if self.kind == "base_path":
            return ""
        zone = ZoneInfo(self.timezone_id) if self.timezone_id else None
        when = datetime.datetime.fromtimestamp(processing_time_ms / 1000, tz=zone or datetime.timezone.utc)
        if zone is None:
            when = when.astimezone()  # the machine's timezone, as Java's ZoneId.systemDefault()
        return when.strftime(self._pattern).replace("%f", "")

    def __repr__(self) -> str:
        if self.kind == "base_path":
            return "BucketAssigner.base_path_bucket_assigner()"
        return f"BucketAssigner.date_time_bucket_assigner({self.format_str!r}, {self.timezone_id!r})"


# -- task side: pieces -----------------------------------------------------------------------


def _write_piece(path: str, write: Any) -> tuple[int, str]:
    """``write(f)`` into a hidden temporary file beside ``path``, synced, then renamed to
    ``path`` (readers never see a partial file). Returns the file's size and SHA-256, read
    back from the temporary file before the rename."""
    directory, name = os.path.split(path)
    private_files.makedirs(directory, OUTPUT_DIR_MODE, exact=False)
    tmp = os.path.join(directory, f".{name}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_BINARY", 0)
        fd = os.open(tmp, flags, OUTPUT_FILE_MODE)  # the umask only narrows it: never writable by others
        with os.fdopen(fd, "w+b") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
            f.seek(0)
            digest, size = hashlib.sha256(), 0
            while chunk := f.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise
    return size, digest.hexdigest()


class _CheckedPiece:
    """Reads a piece as recorded when it was written (``[path, size, sha256]``): :meth:`problem`
    says how the bytes read differ from both (None: they match), :meth:`check` raises
    CorruptSinkFileError naming the file and the part file ``final`` it was to be joined into."""

    def __init__(self, base: str, piece: list, final: str):
        rel, self.size, self.sha256 = piece
        self.path = os.path.join(base, rel)
        self.final = final
        self.read = 0
        self.hash = hashlib.sha256()
        self.f = open(self.path, "rb")  # noqa: SIM115 - closed by the with statement

    def __enter__(self) -> _CheckedPiece:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.f.close()

    def chunks(self, skip_first_line: bool = False) -> Any:
        if skip_first_line:
            self._seen(self.f.readline())
        while chunk := self.f.read(1 << 20):
            yield self._seen(chunk)

    def _seen(self, data: bytes) -> bytes:
        self.read += len(data)
        self.hash.update(data)
        return data

    def problem(self) -> str | None:
        if self.read == self.size and self.hash.hexdigest() == self.sha256:
            return None
        return (f"has {self.read} bytes, {self.size} were written" if self.read != self.size
                else "does not match the SHA-256 recorded when it was written")

    def check(self) -> None:
        """At the commit: the piece is part of a completed checkpoint."""
        problem = self.problem()
        if problem is None:
            return
        msg = (f"FileSink in-progress piece {self.path} {problem}: it was changed after a checkpoint recorded it (its "
               f"pre-commit), so part file {self.final} is not finished from it (nothing of it is committed). No restart "
               f"from that checkpoint can write the piece again: the job fails and keeps its checkpoints. Restore it from "
               f"a checkpoint taken before the piece's epoch (`flowpoint checkpoints <its checkpoint directory>` lists them), "
               f"or rerun it; and find out who else writes into the sink's directory")
        raise CorruptSinkFileError(msg, path=self.path)


def _piece_problem(base: str, piece: list) -> str | None:
    """How the piece ``[path, size, sha256]`` differs from what its task wrote (None: it does not)."""
    try:
        with _CheckedPiece(base, piece, "") as checked:
            for _ in checked.chunks():
                pass
            return checked.problem()
    except FileNotFoundError:
        return "is gone"


class _PieceWriter(SinkWriter):
    """Buffers an epoch's records per bucket; ``finish`` writes one hidden piece per bucket and
    returns ``[(bucket, piece path relative to the base, size, sha256)]`` for the driver."""

    def __init__(self, sink: FileSink, subtask: int, context: Any):
        self.sink = sink
        self.subtask = subtask
        self.context = context  # its clock (the sink operator) gives the epoch's processing time
        self.buckets: dict[str, list] = {}
        self.checked_dirs: set[str] = set()  # bucket directories created or checked (FileSink.bucket_dir)

    def _bucket(self) -> str:
        clock = getattr(self.context, "clock", None)
        now = int(clock.processing_time) if clock is not None and clock.processing_time else int(time.time() * 1000)
        return self.sink.bucket_assigner.bucket_id(now)

    def write(self, records: Any) -> None:
        if not len(records):
            return
        self.buckets.setdefault(self._bucket(), []).append(records)

    def finish(self, epoch: int) -> Any:
        if not self.buckets:
            return None
        buckets, self.buckets = self.buckets, {}
        out = []
        prefix = self.sink.output_file_config.part_prefix
        for bucket, chunks in sorted(buckets.items()):
            rel = os.path.join(bucket, f".{prefix}-{self.sink.piece_token}-{self.subtask}-e{epoch}.inprogress")
            path = os.path.join(self.sink.bucket_dir(bucket, self.checked_dirs), os.path.basename(rel))
            size, sha256 = _write_piece(path, self._writer(chunks, epoch))
            out.append((bucket, rel, size, sha256))
        return out

    def _writer(self, chunks: list, epoch: int) -> Any:
        raise NotImplementedError


class _RowPieceWriter(_PieceWriter):
    def _writer(self, chunks: list, epoch: int) -> Any:
        encoder = self.sink.encoder
        to_string = self.sink.to_string()
        lines: list[str] = []
        header = None
        for records in chunks:
            if header is None and encoder.header:
                header = encoder.header_line(records[0])
            lines.extend(encoder.encode(records, to_string))
        if header is not None:
            lines.insert(0, header)
        data = ("\n".join(lines) + "\n").encode(encoder.charset)
        return lambda f: f.write(data)


class _ParquetPieceWriter(_PieceWriter):
    def _table(self, records: Any) -> pa.Table:
        fmt = self.sink.bulk_format
        schema = fmt.schema
        where = f"FileSink (Parquet) at {self.sink.base_path!r}"
        if isinstance(records, (pa.RecordBatch, pa.Table)):
            table = pa.Table.from_batches([records]) if isinstance(records, pa.RecordBatch) else records
            return _conform(table, schema, where) if schema is not None else table
        try:
            if schema is None:
                return _infer_table(records)
            ti = fmt.type_info
            if isinstance(ti, (RowType, TupleType)) and isinstance(records[0], dict):
                records = [tuple(r.get(n) for n in schema.names) for r in records]
            return pa.Table.from_batches([rows_to_arrow(records, ti)])
        except ConfigurationError:
            raise
        except (pa.ArrowException, ValueError, TypeError) as e:
            hint = "give BulkFormat.parquet a type_info" if schema is None else f"make the records match {fmt.type_info!r}"
            msg = f"{where}: cannot convert records (first: {records[0]!r:.100}) to Arrow: {_arrow_message(e)}; {hint}"
            raise ConfigurationError(msg) from None

    def _writer(self, chunks: list, epoch: int) -> Any:
        tables = [self._table(c) for c in chunks]
        try:
            table = tables[0] if len(tables) == 1 else pa.concat_tables(tables, promote_options="permissive")
        except (pa.ArrowException, ValueError) as e:
            msg = (
                f"FileSink (Parquet) at {self.sink.base_path!r}: the records of epoch {epoch} have different "
                f"column types ({_arrow_message(e)}); give BulkFormat.parquet a type_info"
            )
            raise ConfigurationError(msg) from None
        return lambda f: pq.write_table(table, f)


# -- driver side: part files -------------------------------------------------------------------


class FileSinkBuilder:
    """``FileSink.for_row_format(...)`` / ``for_bulk_format(...)``, then ``with_...`` and ``build()``."""

    def __init__(self, base_path: Any, encoder: Encoder | None = None, bulk_format: FileFormat | None = None):
        self._base_path = base_path
        self._encoder = encoder
        self._bulk_format = bulk_format
        self._bucket_assigner: BucketAssigner | None = None  # None: FileSink's defaults
        self._rolling_policy: RollingPolicy | None = None
        self._output_file_config: OutputFileConfig | None = None

    def with_bucket_assigner(self, bucket_assigner: BucketAssigner) -> FileSinkBuilder:
        if not isinstance(bucket_assigner, BucketAssigner):
            msg = f"with_bucket_assigner() takes BucketAssigner.date_time_bucket_assigner(...) or base_path_bucket_assigner(); got {bucket_assigner!r:.80}"
            raise ConfigurationError(msg)
        self._bucket_assigner = bucket_assigner
        return self

    def with_bucket_check_interval(self, interval: int) -> FileSinkBuilder:
        """Accepted for PyFlink programs: rolling is checked at every checkpoint."""
        return self

    def with_rolling_policy(self, rolling_policy: RollingPolicy) -> FileSinkBuilder:
        if not isinstance(rolling_policy, RollingPolicy):
            msg = f"with_rolling_policy() takes RollingPolicy.default_rolling_policy(...) or on_checkpoint_rolling_policy(); got {rolling_policy!r:.80}"
            raise ConfigurationError(msg)
        if self._bulk_format is not None and not rolling_policy.on_checkpoint:
            msg = "a bulk-format FileSink rolls on every checkpoint (as in Flink): use RollingPolicy.on_checkpoint_rolling_policy()"
            raise ConfigurationError(msg)
        self._rolling_policy = rolling_policy
        return self

    def with_output_file_config(self, output_file_config: OutputFileConfig) -> FileSinkBuilder:
        if not isinstance(output_file_config, OutputFileConfig):
            msg = f"with_output_file_config() takes an OutputFileConfig; got {output_file_config!r:.80}"
            raise ConfigurationError(msg)
        self._output_file_config = output_file_config
        return self

    def build(self) -> FileSink:
        cls = _BulkFileSink if self._bulk_format is not None else FileSink
        return cls(self._base_path, self._encoder, self._bulk_format, self._bucket_assigner, self._rolling_policy, self._output_file_config)


class FileSink(Sink):
    """Part files committed on checkpoints (see the module docstring)."""

    guarantee = "exactly-once"
    accepts_arrow = False

    def __init__(self, base_path: Any, encoder: Encoder | None = None, bulk_format: FileFormat | None = None,
                 bucket_assigner: BucketAssigner | None = None, rolling_policy: RollingPolicy | None = None,
                 output_file_config: OutputFileConfig | None = None):
        self.base_path = _local_path(base_path, "FileSink")
        if os.path.exists(self.base_path) and not os.path.isdir(self.base_path):
            msg = f"FileSink: base path {self.base_path!r} is a file; give a directory (it is created if missing)"
            raise ConfigurationError(msg)
        self.encoder = encoder
        self.bulk_format = bulk_format
        self.bucket_assigner = bucket_assigner or BucketAssigner.date_time_bucket_assigner()
        self.rolling_policy = rolling_policy or (RollingPolicy.on_checkpoint_rolling_policy() if bulk_format else RollingPolicy.default_rolling_policy())
        self.output_file_config = output_file_config or OutputFileConfig()
        self.input_type: Any = None  # the stream's type (sink_to sets it): how simple_string_encoder writes values
        # names this sink's pieces: two sinks (or jobs) on one directory never write the same piece
        self.piece_token = uuid.uuid4().hex[:8]
        self._driver_reset()

    @staticmethod
    def for_row_format(base_path: Any, encoder: Encoder) -> FileSinkBuilder:
        if not isinstance(encoder, Encoder):
            msg = (
                f"FileSink.for_row_format needs an Encoder (Encoder.simple_string_encoder(), "
                f"Encoder.json_lines(), Encoder.csv()); got {encoder!r:.80}"
            )
            raise ConfigurationError(msg)
        _local_path(base_path, "FileSink")
        return FileSinkBuilder(base_path, encoder=encoder)

    @staticmethod
    def for_bulk_format(base_path: Any, bulk_format: FileFormat) -> FileSinkBuilder:
        if not isinstance(bulk_format, FileFormat) or bulk_format.kind != "parquet":
            msg = f"FileSink.for_bulk_format needs BulkFormat.parquet(type_info); got {bulk_format!r:.80}"
            raise ConfigurationError(msg)
        _local_path(base_path, "FileSink")
        return FileSinkBuilder(base_path, bulk_format=bulk_format)

    def default_name(self) -> str:
        return "File Sink"

    def to_string(self) -> Any:
        """How ``simple_string_encoder`` writes a value: Java's ``toString`` of the stream's type,
        as Flink's SimpleStringEncoder does (``str`` for an untyped stream)."""
        return java_to_string(self.input_type)

    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter:
        if self.bulk_format is not None:
            return _ParquetPieceWriter(self, subtask_index, context)
        return _RowPieceWriter(self, subtask_index, context)

    # -- driver side ---------------------------------------------------------------------------

    def _driver_reset(self) -> None:
        self._driver_pending: list[list] = []  # [subtask, bucket, piece, size, epoch ms, sha256] of committed epochs
        self._driver_open: dict[str, dict] = {}  # "<subtask>/<bucket>" -> the open part file
        self._driver_closed: list[dict] = []  # part files closed at the last checkpoint, finished when it completes
        self._driver_counters: dict[str, int] = {}  # "<subtask>/<bucket>" -> next part number
        self._driver_uuids: dict[str, str] = {}  # subtask -> the instance's uuid

    def on_job_config(self, config: Any) -> None:
        """Before the job starts: the base path (created if missing) and every directory below it
        must be the job user's, writable by no one else, below directories no one else can
        replace, as checkpoint directories are (docs/architecture.md, section 10a); else
        InsecurePathError naming the directory. ``security.trust-shared-directories: true``
        accepts them (here and in the tasks, which check each bucket directory they write to)."""
        self.trust_shared_dirs = bool(config.get(private_files.TRUST_SHARED))
        if self.trust_shared_dirs:
            return
        private_files.check_output_tree(self.base_path, "FileSink directory", "FileSink bucket directory", self._trust_hint())

    @staticmethod
    def _trust_hint() -> str:
        return (f"use a sink directory only you can write (the FileSink's base path), or set "
                f"{private_files.TRUST_SHARED}: true if you trust every user who can write it with the job's output")

    def bucket_dir(self, bucket: str, checked: set[str]) -> str:
        """The directory of ``bucket``, created if missing (mode 0755, whatever the umask) and, the
        first time for ``checked``, refused with InsecurePathError if it or a directory between
        it and the base path belongs to another user or others can write it (unless
        ``security.trust-shared-directories``): the tasks write their pieces there, the driver
        the part files."""
        base = os.path.normpath(self.base_path)
        directory = os.path.normpath(os.path.join(base, bucket)) if bucket else base
        if getattr(self, "trust_shared_dirs", False):
            if directory not in checked:
                private_files.makedirs(directory, OUTPUT_DIR_MODE, exact=False)
                checked.add(directory)
            return directory
        return private_files.output_subdir(base, directory, "FileSink directory", "FileSink bucket directory",
                                           self._trust_hint(), checked)

    def on_job_start(self, checkpoint_interval_ms: int | None) -> None:
        if checkpoint_interval_ms is None:
            log.info("FileSink at %s: checkpointing is off, so part files are finished only when the bounded job finishes", self.base_path)

    def on_epoch_committed(self, epoch: int, payloads: list[tuple[int, Any]], parallelism: int) -> None:
        now = int(time.time() * 1000)
        for subtask, pieces in payloads:
            for bucket, rel, size, sha256 in pieces:
                self._driver_pending.append([subtask, bucket, rel, size, now, sha256])

    def _verify_pending(self, at_end: bool = False) -> None:
        """Flink's pre-commit: the pieces of the epochs committed since the last checkpoint must
        still be as their tasks wrote them (size and SHA-256) before a checkpoint records them.
        A piece changed, replaced or removed meanwhile raises CorruptSinkFileError naming it:
        at a checkpoint a recoverable one (the job restarts from its last completed checkpoint,
        which does not hold the piece, and writes its records again); ``at_end`` (a finishing job
        commits the pieces after its last checkpoint) one that fails the job, which keeps its
        checkpoints. None of the pieces visible: the driver does not see the executors' files."""
        pending = self._driver_pending
        if not pending:
            return
        if not any(os.path.exists(os.path.join(self.base_path, p[2])) for p in pending):
            names = [p[2] for p in pending[:3]]
            msg = (f"FileSink at {self.base_path!r}: the driver cannot see the in-progress pieces {names} its tasks wrote "
                   f"(the driver must see the executors' files: use a shared directory)")
            raise ConfigurationError(msg)
        for _subtask, _bucket, rel, size, _at, sha256 in pending:
            problem = _piece_problem(self.base_path, [rel, size, sha256])
            if problem is None:
                continue
            path = os.path.join(self.base_path, rel)
            if at_end:
                msg = (f"FileSink in-progress piece {path} {problem}: it was changed after its task wrote it, so nothing of "
                       f"it is committed and the job fails, keeping its checkpoints. Restore it from its latest checkpoint "
                       f"(`flowpoint run --resume`, or -s <chk-n>): the piece's records are written again; and find out who "
                       f"else writes into the sink's directory")
                raise CorruptSinkFileError(msg, path=path)
            msg = (f"FileSink in-progress piece {path} {problem}: it was changed after its task wrote it, before a "
                   f"checkpoint recorded it, so nothing of it is committed. The job restarts from its last completed "
                   f"checkpoint (as its restart strategy allows) and writes the piece's records again; find out who else "
                   f"writes into the sink's directory")
            raise CorruptSinkFileError(msg, path=path, recoverable=True)

    def _stage(self, now: int) -> None:
        """Committed pieces join their open part file; the rolling policy closes part files."""
        for subtask, bucket, rel, size, at, sha256 in self._driver_pending:
            self._driver_uuids.setdefault(str(subtask), str(uuid.uuid4()))  # in the snapshot from the start
            key = f"{subtask}/{bucket}"
            part = self._driver_open.setdefault(key, {"subtask": subtask, "bucket": bucket, "pieces": [], "size": 0, "opened": at, "last": at})
            part["pieces"].append([rel, size, sha256])  # checked when the part file is finished
            part["size"] += size
            part["last"] = at
        self._driver_pending = []
        policy = self.rolling_policy
        for key in sorted(self._driver_open):
            part = self._driver_open[key]
            if policy.should_roll(part["size"], part["opened"], part["last"], now):
                self._close(key)

    def _close(self, key: str) -> None:
        part = self._driver_open.pop(key)
        uid = self._driver_uuids[str(part["subtask"])]  # set when the part file opened (_stage)
        # a row-format part file joins its pieces; Parquet pieces are part files of their own
        groups = [part["pieces"]] if self.bulk_format is None else [[p] for p in part["pieces"]]
        for group in groups:
            n = self._driver_counters.get(key, 0)
            self._driver_counters[key] = n + 1
            name = f"{self.output_file_config.part_prefix}-{uid}-{n}{self.output_file_config.part_suffix}"
            self._driver_closed.append({"bucket": part["bucket"], "pieces": list(group), "name": name})

    def snapshot_driver_state(self) -> Any:
        self._verify_pending()
        self._stage(int(time.time() * 1000))
        return {"open": dict(self._driver_open), "closed": list(self._driver_closed),
                "counters": dict(self._driver_counters), "uuids": dict(self._driver_uuids)}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._finish_closed()

    def restore_driver_state(self, state: Any) -> None:
        self._driver_reset()
        if state is None:
            return
        self._driver_open = {k: dict(v) for k, v in state["open"].items()}
        self._driver_closed = [dict(c) for c in state["closed"]]
        self._driver_counters = {k: int(v) for k, v in state["counters"].items()}
        self._driver_uuids = dict(state["uuids"])
        for part in [*self._driver_open.values(), *self._driver_closed]:
            if any(not isinstance(p, list) or len(p) != 3 for p in part["pieces"]):
                msg = (f"FileSink at {self.base_path!r}: the checkpoint's part file state has pieces without a recorded size "
                       f"and SHA-256 (written by an older flowpoint); restore from a newer checkpoint or rerun the job")
                raise ConfigurationError(msg)
        # the restored checkpoint completed: what it closed is finished now (Flink's commit on
        # restore); a part file finished before the crash is not written again
        self._finish_closed()
        # a part file the checkpoint holds open but whose pieces are gone was finished after it
        # (a job stopped with this savepoint finishes its open part files): close it again under
        # the same name, which _finish then finds done
        for key in sorted(self._driver_open):
            part = self._driver_open[key]
            if not all(os.path.exists(os.path.join(self.base_path, p[0])) for p in part["pieces"]):
                self._close(key)
        self._finish_closed()

    def on_job_end(self, status: str) -> None:
        if status != "FINISHED":
            return  # in-progress pieces stay hidden; a restore finishes what its checkpoint closed
        self._verify_pending(at_end=True)
        self._stage(0)
        for key in sorted(self._driver_open):
            self._close(key)
        self._finish_closed()

    def _finish_closed(self) -> None:
        """Finish every closed part file whose pieces verify; then raise the first error (a
        part file with a changed piece is not finished, the others are: the checkpoint that
        closed them finds them done when it is restored)."""
        closed, self._driver_closed = self._driver_closed, []
        first: Exception | None = None
        for part in closed:
            try:
                self._finish(part)
            except (CorruptSinkFileError, ConfigurationError) as e:
                if first is None:
                    first = e  # raised below
                else:
                    log.error("%s", e)
        if first is not None:
            raise first

    def _finish(self, part: dict) -> None:
        if not hasattr(self, "_driver_dirs"):
            self._driver_dirs: set[str] = set()
        bucket_dir = self.bucket_dir(part["bucket"], self._driver_dirs)
        final = os.path.join(bucket_dir, part["name"])
        pieces = [os.path.join(self.base_path, p[0]) for p in part["pieces"]]
        present = [p for p in pieces if os.path.exists(p)]
        if os.path.exists(final):
            # finished before a crash, restored from the checkpoint that closed it (pieces a crash
            # left after the rename are removed now)
            for piece in present:
                os.remove(piece)
            return
        if not present:
            msg = (f"FileSink at {self.base_path!r}: part file {final!r} cannot be finished: its in-progress pieces "
                   f"{part['pieces']} are gone (the driver must see the executors' files: use a shared directory)")
            raise ConfigurationError(msg)
        if len(present) != len(pieces):
            missing = sorted(set(pieces) - set(present))
            msg = f"FileSink at {self.base_path!r}: part file {final!r} lost pieces {missing}; not finishing it"
            raise ConfigurationError(msg)
        if len(pieces) == 1:
            with _CheckedPiece(self.base_path, part["pieces"][0], final) as piece:
                for _ in piece.chunks():
                    pass
                piece.check()
            os.replace(pieces[0], final)
            return
        skip_header = self.encoder is not None and self.encoder.kind == "csv" and self.encoder.header

        def join(out: Any) -> None:
            for i, entry in enumerate(part["pieces"]):
                with _CheckedPiece(self.base_path, entry, final) as piece:
                    for chunk in piece.chunks(skip_header and i > 0):
                        out.write(chunk)
                    piece.check()

        _write_piece(final, join)
        for piece in pieces:
            os.remove(piece)


# PyFlink's nested builder names: one builder here serves row and bulk formats
FileSink.BaseBuilder = FileSink.RowFormatBuilder = FileSink.BulkFormatBuilder = FileSinkBuilder  # type: ignore[attr-defined]


class _BulkFileSink(FileSink):
    """A Parquet FileSink: Arrow batches reach its writers unconverted."""

    accepts_arrow = True
