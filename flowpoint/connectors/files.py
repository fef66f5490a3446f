"""Files in and out: ``FileSource`` and ``FileSink``, as in PyFlink's file connector.

Reading::

    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), "/data/logs").build()
    rows = FileSource.for_format(FileFormat.csv(Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()])),
                                 "/data/in.csv").build()
    live = FileSource.for_format(FileFormat.json_lines(), "/data/incoming") \\
        .monitor_continuously(Duration.of_seconds(5)).build()
    env.from_source(source, WatermarkStrategy.no_watermarks(), "files")

A path is a file or a directory; a directory stands for every file below it, in name order,
except hidden files (names starting with ``.`` or ``_``) and files still being written
(``*.tmp``, ``*.inprogress``). Every file is one split; its position is the number of records
already read from it, so an epoch reads a record range of a file and replaying that range
reads the same records. Formats:

* ``StreamFormat.text_line_format()``: each line is a ``str`` (without the line break).
* ``FileFormat.csv(type_info=None, header=True, delimiter=",")``: one record per line (values
  must not contain line breaks); empty lines are skipped. With a ``type_info``
  (``Types.ROW_NAMED``) the columns are parsed to those types (matched by header name, or by
  position when ``header=False``); without it, types are inferred per file.
* ``FileFormat.json_lines(type_info=None)``: one JSON value per non-empty line. An object
  becomes a ``Row`` with the object's keys as field names (in the file's order); with a
  ``type_info`` the fields of that type are read (missing ones are null, others ignored).
* ``FileFormat.parquet(type_info=None)`` (also ``BulkFormat.parquet``): with a ``type_info``
  its columns are selected and cast.

A source is bounded by default: the job ends once every file is read. With
``monitor_continuously(interval)`` it is unbounded and lists its paths again at most once per
interval, reading files that appeared. Files must not change once they are visible: write a
file under a hidden or ``.inprogress`` name and rename it when it is complete (as Flink
expects, and as ``FileSink`` does).

Writing: ``FileSink`` (``flowpoint/connectors/file_sink.py``) writes part files that become
visible when a checkpoint completes (or the bounded job finishes), as Flink's does.
"""

from __future__ import annotations

import bisect
import csv
import datetime
import decimal
import io
import json
import os
import re
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.json as pajson
import pyarrow.parquet as pq

from flowpoint.api.row import Row
from flowpoint.api.time import Duration
from flowpoint.api.types import TypeInformation, Types, schema_of
from flowpoint.connectors.source import Batch, Source, SourceReader, SourceSplit, SplitPlan
from flowpoint.errors import ConfigurationError
from flowpoint.worker_resources import BoundedCache, worker

BATCH_SIZE = 8192
INDEX_EVERY = 4096  # the driver remembers the byte offset of every INDEX_EVERY-th record
_KINDS = ("text", "csv", "json", "parquet")
_EXTENSIONS = {"text": "txt", "csv": "csv", "json": "jsonl", "parquet": "parquet"}


# -- paths -------------------------------------------------------------------------------------


def _local_path(path: Any, what: str) -> str:
    """An absolute local path from a path, ``pathlib.Path`` or ``file://`` URI."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str) or not path:
        msg = f"{what}: a path must be a non-empty string or path; got {path!r}"
        raise ConfigurationError(msg)
    if "://" in path or path.startswith("file:"):
        parsed = urlparse(path)
        if parsed.scheme != "file":
            msg = f"{what}: only local paths and file:// URIs are supported; got {path!r}"
            raise ConfigurationError(msg)
        if parsed.netloc not in ("", "localhost"):
            msg = f"{what}: file URI {path!r} names host {parsed.netloc!r}; use file:///absolute/path"
            raise ConfigurationError(msg)
        path = unquote(parsed.path)
    return os.path.abspath(os.path.expanduser(path))


def _is_hidden(name: str) -> bool:
    return name.startswith((".", "_")) or name.endswith((".tmp", ".inprogress"))


def _list_files(paths: list[str]) -> list[str]:
    """Every visible file of ``paths`` (directories recursively, each in name order)."""
    out: list[str] = []
    seen: set[str] = set()
    for p in paths:
        if os.path.isfile(p):
            found = [p]
        elif os.path.isdir(p):
            found = []
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not _is_hidden(d))
                found.extend(os.path.join(root, f) for f in sorted(files) if not _is_hidden(f))
        else:
            msg = (
                f"FileSource: path {p!r} does not exist (or is neither a file nor a directory); "
                f"create it or fix the path given to FileSource"
            )
            raise ConfigurationError(msg)
        for f in found:
            if f not in seen:
                seen.add(f)
                out.append(f)
    return out


# -- formats -----------------------------------------------------------------------------------


class FileFormat:
    """What the files hold: text lines, CSV, JSON lines or Parquet (see the module docs)."""

    def __init__(
        self,
        kind: str,
        type_info: TypeInformation | None = None,
        header: bool = True,
        delimiter: str = ",",
        charset: str = "utf-8",
    ):
        if kind not in _KINDS:
            msg = f"unknown file format {kind!r}; use one of {', '.join(_KINDS)}"
            raise ConfigurationError(msg)
        if type_info is not None:
            if not isinstance(type_info, TypeInformation):
                msg = f"FileFormat.{kind}: type_info must be a flowpoint type (Types.ROW_NAMED(...)); got {type_info!r}"
                raise ConfigurationError(msg)
            if schema_of(type_info) is None:
                msg = f"FileFormat.{kind}: {type_info!r} has no columnar form; use Types.ROW_NAMED(names, types)"
                raise ConfigurationError(msg)
        if not isinstance(delimiter, str) or len(delimiter) != 1 or delimiter in "\r\n\"":
            msg = f"FileFormat.csv: the delimiter must be one character (not a quote or line break); got {delimiter!r}"
            raise ConfigurationError(msg)
        try:
            newline_ok = "\n".encode(charset) == b"\n"
        except LookupError:
            msg = f"unknown charset {charset!r}"
            raise ConfigurationError(msg) from None
        if not newline_ok:
            msg = f"charset {charset!r} is not supported: lines are split on the byte 0x0A (use UTF-8, Latin-1, ...)"
            raise ConfigurationError(msg)
        self.kind = kind
        self.type_info = type_info
        self.header = bool(header)
        self.delimiter = delimiter
        self.charset = charset

    # factories
    @staticmethod
    def csv(type_info: TypeInformation | None = None, header: bool = True, delimiter: str = ",") -> FileFormat:
        return FileFormat("csv", type_info, header=header, delimiter=delimiter)

    @staticmethod
    def json_lines(type_info: TypeInformation | None = None) -> FileFormat:
        return FileFormat("json", type_info)

    @staticmethod
    def parquet(type_info: TypeInformation | None = None) -> FileFormat:
        return FileFormat("parquet", type_info)

    @staticmethod
    def text_lines(charset_name: str = "UTF-8") -> FileFormat:
        return FileFormat("text", charset=charset_name)

    @property
    def extension(self) -> str:
        return _EXTENSIONS[self.kind]

    @property
    def schema(self) -> pa.Schema | None:
        return schema_of(self.type_info) if self.type_info is not None else None

    def output_type(self) -> TypeInformation | None:
        return Types.STRING() if self.kind == "text" else self.type_info

    def __repr__(self) -> str:
        extra = f", type_info={self.type_info!r}" if self.type_info is not None else ""
        if self.kind == "csv":
            extra += f", header={self.header}, delimiter={self.delimiter!r}"
        return f"FileFormat.{self.kind}({extra.lstrip(', ')})"


class StreamFormat:
    """PyFlink's record formats: ``StreamFormat.text_line_format()``."""

    @staticmethod
    def text_line_format(charset_name: str = "UTF-8") -> FileFormat:
        return FileFormat.text_lines(charset_name)


class BulkFormat:
    """Columnar formats: ``BulkFormat.parquet(type_info)`` (for FileSink and FileSource)."""

    @staticmethod
    def parquet(type_info: TypeInformation | None = None) -> FileFormat:
        return FileFormat.parquet(type_info)


# -- the source (driver side) ------------------------------------------------------------------


class _FileInfo:
    """What the driver learned about one file: its record count and a sparse offset index."""

    __slots__ = ("count", "index")

    def __init__(self, count: int, index: list[tuple[int, int, int]]):
        self.count = count
        self.index = index  # [(record number, byte offset, lines before it)], ascending


class FileSourceBuilder:
    """``FileSource.for_format(fmt, *paths)``: ``.monitor_continuously(interval)``, ``.build()``."""

    def __init__(self, fmt: FileFormat, paths: tuple):
        if not isinstance(fmt, FileFormat):
            msg = (
                f"FileSource needs a format (StreamFormat.text_line_format(), FileFormat.csv(), "
                f"FileFormat.json_lines(), FileFormat.parquet()); got {fmt!r:.80}"
            )
            raise ConfigurationError(msg)
        flat: list = []
        for p in paths:
            flat.extend(p if isinstance(p, (list, tuple)) else [p])
        if not flat:
            msg = "FileSource needs at least one path (a file or a directory)"
            raise ConfigurationError(msg)
        self._format = fmt
        self._paths = [_local_path(p, "FileSource") for p in flat]
        self._interval_ms: int | None = None

    def monitor_continuously(self, discovery_interval: Duration) -> FileSourceBuilder:
        """Keep watching the paths: list them again every ``discovery_interval`` (unbounded)."""
        if not isinstance(discovery_interval, Duration):
            msg = f"monitor_continuously() takes a Duration (Duration.of_seconds(5)); got {discovery_interval!r}"
            raise ConfigurationError(msg)
        if discovery_interval.to_milliseconds() <= 0:
            msg = f"monitor_continuously() needs a positive interval; got {discovery_interval.to_milliseconds()} ms"
            raise ConfigurationError(msg)
        self._interval_ms = discovery_interval.to_milliseconds()
        return self

    def process_static_file_set(self) -> FileSourceBuilder:
        """Read the files present when the job starts, then end (the default)."""
        self._interval_ms = None
        return self

    def build(self) -> FileSource:
        return FileSource(self._format, self._paths, self._interval_ms)


class FileSource(Source):
    """Reads files: one split per file, the position is the number of records read from it."""

    def __init__(self, fmt: FileFormat, paths: list[str], monitor_interval_ms: int | None = None):
        self.format = fmt
        self.paths = list(paths)
        self.monitor_interval_ms = monitor_interval_ms
        self.output_type = fmt.output_type()
        self._infos: dict[str, _FileInfo] = {}
        self._last_scan = 0.0

    @staticmethod
    def for_format(fmt: FileFormat, *paths: Any) -> FileSourceBuilder:
        return FileSourceBuilder(fmt, paths)

    @staticmethod
    def for_record_stream_format(stream_format: FileFormat, *paths: Any) -> FileSourceBuilder:
        return FileSourceBuilder(stream_format, paths)

    @staticmethod
    def for_bulk_file_format(bulk_format: FileFormat, *paths: Any) -> FileSourceBuilder:
        return FileSourceBuilder(bulk_format, paths)

    def __getstate__(self) -> dict:
        state = dict(self.__dict__)
        state["_infos"] = {}  # driver-side caches stay on the driver
        return state

    def default_name(self) -> str:
        return "File Source"

    def is_bounded(self) -> bool:
        return self.monitor_interval_ms is None

    def _splits_for(self, files: list[str]) -> list[SourceSplit]:
        out = []
        for f in files:
            try:
                st = os.stat(f)
            except FileNotFoundError:
                continue  # removed between listing and stat
            out.append(SourceSplit(f, (st.st_size, st.st_mtime_ns), 0))
        return out

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        self._last_scan = time.monotonic()
        return self._splits_for(_list_files(self.paths))

    def discover_splits(self, known: list[SourceSplit]) -> list[SourceSplit]:
        if self.monitor_interval_ms is None:
            return []
        now = time.monotonic()
        if (now - self._last_scan) * 1000 < self.monitor_interval_ms:
            return []
        self._last_scan = now
        seen = {s.split_id for s in known}
        return self._splits_for([f for f in _list_files(self.paths) if f not in seen])

    def _info(self, split: SourceSplit) -> _FileInfo:
        info = self._infos.get(split.split_id)
        if info is None:
            info = _scan(split.split_id, self.format, split.payload[0])
            self._infos[split.split_id] = info
        return info

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        count = self._info(split).count
        end = min(count, position + budget)
        return SplitPlan(end, end - position, end >= count)

    def read_spec(self, split: SourceSplit, start: int, end: int) -> Any:
        info = self._info(split)
        if self.format.kind == "parquet" or (self.format.kind == "csv" and self.format.type_info is None):
            return (start, end, info.count)
        i = bisect.bisect_right(info.index, (start, float("inf"))) - 1
        record, offset, line = info.index[i] if i >= 0 else (0, 0, 0)
        return (start, end, info.count, offset, record, line)

    def create_reader(self) -> SourceReader:
        return _FileReader(self.format)


def _changed(path: str, size: int) -> ConfigurationError:
    msg = (
        f"FileSource: file {path!r} changed after it was discovered (it had {size} bytes). "
        f"Files must not change once visible: write to a hidden or .inprogress name and rename "
        f"the file when it is complete"
    )
    return ConfigurationError(msg)


def _is_blank(raw: bytes, kind: str) -> bool:
    if kind == "text":
        return False
    if kind == "csv":
        return raw in (b"\n", b"\r\n", b"\r", b"")
    return not raw.strip()


def _scan(path: str, fmt: FileFormat, size: int) -> _FileInfo:
    """Count the records of a file (driver side, once per file)."""
    try:
        if fmt.kind == "parquet":
            try:
                return _FileInfo(pq.ParquetFile(path).metadata.num_rows, [])
            except (pa.ArrowException, OSError) as e:
                if not os.path.exists(path):
                    raise
                msg = f"FileSource: {path!r} is not a readable Parquet file ({e}); read it with the right format"
                raise ConfigurationError(msg) from e
        if os.path.getsize(path) != size:
            raise _changed(path, size)
        kind = fmt.kind
        header = kind == "csv" and fmt.header
        index: list[tuple[int, int, int]] = []
        records = offset = lines = 0
        with open(path, "rb") as f:
            for raw in f:
                lines += 1
                if _is_blank(raw, kind):
                    pass
                elif header:
                    header = False
                else:
                    if records % INDEX_EVERY == 0:
                        index.append((records, offset, lines - 1))
                    records += 1
                offset += len(raw)
        return _FileInfo(records, index)
    except FileNotFoundError:
        msg = f"FileSource: file {path!r} disappeared after it was discovered; files must stay until they are read"
        raise ConfigurationError(msg) from None


# -- the reader (executor side) ----------------------------------------------------------------

_TABLE_CACHE_ENTRIES = 4
_TABLE_CACHE_MAX_BYTES = 256 << 20


def _tables() -> BoundedCache:
    """This worker's parsed CSV files (LRU, at most 4 and 256 MiB; a larger file is not kept):
    the splits of one file read by one worker parse it once."""
    return worker().cache("files.csv-tables", _TABLE_CACHE_ENTRIES, weigh=lambda t: t.nbytes, max_weight=_TABLE_CACHE_MAX_BYTES)


class _FileReader(SourceReader):
    def __init__(self, fmt: FileFormat):
        self.format = fmt

    def read(self, split: SourceSplit, spec: Any) -> Iterator[Batch]:
        path = split.split_id
        size = split.payload[0]
        try:
            actual = os.path.getsize(path)
        except OSError:
            msg = f"FileSource: file {path!r} disappeared after it was discovered; files must stay until they are read"
            raise ConfigurationError(msg) from None
        if actual != size:
            raise _changed(path, size)
        kind = self.format.kind
        if kind == "parquet":
            yield from self._parquet(path, *spec)
        elif kind == "csv" and self.format.type_info is None:
            yield from self._csv_whole(path, *spec)
        else:
            start, end, _count, offset, record, line = spec
            lines = _read_lines(path, kind, offset, record, line, start, end)
            if kind == "text":
                yield from self._text(path, lines)
            elif kind == "json":
                yield from self._json(path, lines)
            else:
                yield from self._csv_typed(path, lines)

    # text lines
    def _text(self, path: str, lines: list[tuple[int, bytes]]) -> Iterator[Batch]:
        charset = self.format.charset
        out = []
        for n, raw in lines:
            if raw.endswith(b"\n"):
                raw = raw[:-2] if raw.endswith(b"\r\n") else raw[:-1]
            try:
                out.append(raw.decode(charset))
            except UnicodeDecodeError as e:
                msg = f"FileSource: {path!r} line {n} is not valid {charset} ({e.reason}); fix the file or give the right charset_name"
                raise ConfigurationError(msg) from None
        for i in range(0, len(out), BATCH_SIZE):
            yield out[i : i + BATCH_SIZE]

    # JSON lines
    def _json(self, path: str, lines: list[tuple[int, bytes]]) -> Iterator[Batch]:
        schema = self.format.schema
        if schema is not None:
            yield from _to_batches(self._json_arrow(path, lines, schema), path, schema)
            return
        out: list = []
        loads = json.loads
        for n, raw in lines:
            try:
                value = loads(raw)
            except ValueError as e:
                raise _json_error(path, n, raw, e) from None
            if isinstance(value, dict):
                value = Row.of(tuple(value), tuple(value.values()))
            out.append(value)
            if len(out) == BATCH_SIZE:
                yield out
                out = []
        if out:
            yield out

    def _json_arrow(self, path: str, lines: list[tuple[int, bytes]], schema: pa.Schema) -> pa.Table:
        def parse(part: list[tuple[int, bytes]]) -> pa.Table:
            data = b"\n".join(raw.rstrip(b"\r\n") for _, raw in part)
            opts = pajson.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")
            read = pajson.ReadOptions(block_size=max(1 << 20, len(data) + 1), use_threads=False)
            return pajson.read_json(io.BytesIO(data), read_options=read, parse_options=opts)

        try:
            return parse(lines)
        except (pa.ArrowException, ValueError) as e:
            n, raw, err = _locate(lines, parse, e)
            if raw is not None:
                try:
                    json.loads(raw)
                except ValueError as je:
                    raise _json_error(path, n, raw, je) from None
            where = f"line {n}" if n else "a line"
            msg = (
                f"FileSource: {path!r} {where} does not match {self.format.type_info!r}: {err}. "
                f"Line: {_show(raw)}. Fix the file or the type_info"
            )
            raise ConfigurationError(msg) from None

    # CSV
    def _csv_options(self, names: list[str] | None) -> tuple:
        fmt = self.format
        read = pacsv.ReadOptions(
            column_names=None if fmt.header else names,
            autogenerate_column_names=not fmt.header and names is None,
            use_threads=False,
        )
        parse = pacsv.ParseOptions(delimiter=fmt.delimiter, newlines_in_values=False, ignore_empty_lines=True)
        return read, parse

    def _csv_typed(self, path: str, lines: list[tuple[int, bytes]]) -> Iterator[Batch]:
        schema = self.format.schema
        names = schema.names
        header = b""
        if self.format.header:
            header = _first_line(path)
            if not header.endswith(b"\n"):
                header += b"\n"
            text = header.decode(self.format.charset, "replace").rstrip("\r\n")
            columns = next(csv.reader([text], delimiter=self.format.delimiter), [])
            missing = [n for n in names if n not in columns]
            if missing:
                msg = (
                    f"FileSource: CSV file {path!r} has no column(s) {missing} of {self.format.type_info!r}; "
                    f"its header is {columns}. Fix the header or the type_info (or use header=False to "
                    f"match columns by position)"
                )
                raise ConfigurationError(msg)
        read, parse_opts = self._csv_options(names)
        convert = pacsv.ConvertOptions(column_types=dict(zip(names, schema.types, strict=True)), include_columns=names)

        def parse(part: list[tuple[int, bytes]]) -> pa.Table:
            data = header + b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw in part)
            return pacsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse_opts, convert_options=convert)

        try:
            table = parse(lines)
        except (pa.ArrowException, ValueError) as e:
            n, raw, err = _locate(lines, parse, e)
            where = f"line {n}" if n else "a line"
            msg = (
                f"FileSource: {path!r} {where} cannot be read as CSV of {self.format.type_info!r}: {err}. "
                f"Line: {_show(raw)}. Fix the file or the type_info"
            )
            raise ConfigurationError(msg) from None
        if table.num_rows != len(lines):
            raise _csv_multiline(path)
        yield from _to_batches(table, path, schema)

    def _csv_whole(self, path: str, start: int, end: int, count: int) -> Iterator[Batch]:
        st = os.stat(path)
        key = (path, st.st_size, st.st_mtime_ns, self.format.delimiter, self.format.header)

        def parse() -> Any:
            read, parse_opts = self._csv_options(None)
            try:
                table = pacsv.read_csv(path, read_options=read, parse_options=parse_opts)
            except (pa.ArrowException, ValueError) as e:
                raise self._csv_whole_error(path, read, parse_opts, e) from None
            if table.num_rows != count:
                raise _csv_multiline(path)
            return table

        table = _tables().get_or_create(key, parse)
        yield from _to_batches(table.slice(start, end - start), path, None)

    def _csv_whole_error(self, path: str, read: Any, parse_opts: Any, e: Exception) -> ConfigurationError:
        lines = _read_lines(path, "csv", 0, 0, 0, 0, 1 << 62)
        header = b""
        if self.format.header and lines:
            header = lines.pop(0)[1]
            if not header.endswith(b"\n"):
                header += b"\n"

        def parse(part: list[tuple[int, bytes]]) -> pa.Table:
            data = header + b"".join(raw if raw.endswith(b"\n") else raw + b"\n" for _, raw in part)
            return pacsv.read_csv(io.BytesIO(data), read_options=read, parse_options=parse_opts)

        n, raw, err = _locate(lines, parse, e)
        where = f"line {n}" if n else "a line"
        msg = (
            f"FileSource: {path!r} {where} cannot be read as CSV: {err}. Line: {_show(raw)}. "
            f"Every line must have as many values as the first; fix the file"
        )
        return ConfigurationError(msg)

    # Parquet
    def _parquet(self, path: str, start: int, end: int, count: int) -> Iterator[Batch]:
        schema = self.format.schema
        try:
            pf = pq.ParquetFile(path)
            md = pf.metadata
            groups, first, offset = [], None, 0
            for g in range(md.num_row_groups):
                n = md.row_group(g).num_rows
                if offset + n > start and offset < end:
                    groups.append(g)
                    if first is None:
                        first = offset
                offset += n
            if offset != count:
                raise _changed(path, os.path.getsize(path))
            columns = None
            if schema is not None:
                present = set(pf.schema_arrow.names)
                missing = [n for n in schema.names if n not in present]
                if missing:
                    msg = (
                        f"FileSource: Parquet file {path!r} has no column(s) {missing} of "
                        f"{self.format.type_info!r}; its columns are {pf.schema_arrow.names}"
                    )
                    raise ConfigurationError(msg)
                columns = schema.names
            table = pf.read_row_groups(groups, columns=columns, use_threads=False)
        except (pa.ArrowException, OSError) as e:
            msg = f"FileSource: cannot read Parquet file {path!r}: {e}"
            raise ConfigurationError(msg) from e
        table = table.slice(start - (first or 0), end - start)
        yield from _to_batches(table, path, schema)


def _read_lines(path: str, kind: str, offset: int, record: int, line: int, start: int, end: int) -> list[tuple[int, bytes]]:
    """Records ``start``..``end`` as ``(line number, raw line)``, seeking to ``offset`` first
    (the position of record ``record``, after ``line`` lines)."""
    out = []
    with open(path, "rb") as f:
        f.seek(offset)
        for raw in f:
            line += 1
            if _is_blank(raw, kind):
                continue
            if record >= end:
                break
            if record >= start:
                out.append((line, raw))
            record += 1
    return out


def _first_line(path: str) -> bytes:
    with open(path, "rb") as f:
        for raw in f:
            if not _is_blank(raw, "csv"):
                return raw
    return b""


def _locate(lines: list[tuple[int, bytes]], parse: Any, error: Exception) -> tuple[int, bytes | None, str]:
    """The first line that fails to parse on its own (bisecting): ``(line, raw, message)``."""
    lo, hi = 0, len(lines)
    err: Exception = error
    while hi - lo > 1:
        mid = (lo + hi) // 2
        try:
            parse(lines[lo:mid])
        except (pa.ArrowException, ValueError) as e:
            hi, err = mid, e
            continue
        try:
            parse(lines[mid:hi])
        except (pa.ArrowException, ValueError) as e:
            lo, err = mid, e
            continue
        break  # neither half fails alone
    if hi - lo == 1:
        try:
            parse(lines[lo:hi])
        except (pa.ArrowException, ValueError) as e:
            return lines[lo][0], lines[lo][1], _arrow_message(e)
    return 0, None, _arrow_message(err)


def _arrow_message(e: Exception) -> str:
    # row numbers in Arrow's messages count within the parsed piece, not the file: drop them
    text = re.sub(r"Row #\d+: |,? in row \d+", "", " ".join(str(e).split()))
    return text[:300]


def _show(raw: bytes | None) -> str:
    if raw is None:
        return "(unknown)"
    text = raw.rstrip(b"\r\n").decode("utf-8", "replace")
    return repr(text if len(text) <= 200 else text[:200] + "...")


def _json_error(path: str, n: int, raw: bytes, e: ValueError) -> ConfigurationError:
    reason = f"{e.msg} at column {e.colno}" if isinstance(e, json.JSONDecodeError) else str(e)
    msg = (
        f"FileSource: {path!r} line {n} is not valid JSON ({reason}): {_show(raw)}. "
        f"Each non-empty line of a JSON lines file must hold one JSON value; fix or remove the line"
    )
    return ConfigurationError(msg)


def _csv_multiline(path: str) -> ConfigurationError:
    msg = (
        f"FileSource: CSV file {path!r} has values with line breaks (or changed while read); "
        f"FileFormat.csv reads one record per line"
    )
    return ConfigurationError(msg)


def _conform(table: pa.Table | pa.RecordBatch, schema: pa.Schema, where: str) -> Any:
    """Select the columns of ``schema`` by name and cast them to its types."""
    names = table.schema.names
    missing = [n for n in schema.names if n not in names]
    if missing:
        msg = f"{where}: no column(s) {missing} (columns: {names}); they are required by the type"
        raise ConfigurationError(msg)
    if names != schema.names:
        table = table.select(schema.names)
    if table.schema != schema:
        try:
            table = table.cast(schema)
        except (pa.ArrowException, ValueError) as e:
            msg = f"{where}: columns {table.schema} cannot be cast to {schema}: {_arrow_message(e)}"
            raise ConfigurationError(msg) from None
    return table


def _to_batches(table: pa.Table, path: str, schema: pa.Schema | None) -> Iterator[pa.RecordBatch]:
    if schema is not None:
        table = _conform(table, schema, f"FileSource: {path!r}")
    for batch in table.to_batches(max_chunksize=BATCH_SIZE):
        if batch.num_rows:
            yield batch


# -- encoders and the sink ---------------------------------------------------------------------


def _jsonable(value: Any) -> Any:
    if isinstance(value, Row) and value._fields:
        return {k: _jsonable(v) for k, v in zip(value._fields, value, strict=True)}
    if isinstance(value, (tuple, list)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {k if isinstance(k, str) else str(k): _jsonable(v) for k, v in value.items()}
    return value


def _json_default(value: Any) -> Any:
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value, key=repr)
    if isinstance(value, (bytes, bytearray)):
        return value.decode("utf-8", "replace")
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    return str(value)


def _csv_fields(value: Any) -> list:
    if isinstance(value, dict):
        return list(value.values())
    if isinstance(value, (tuple, list)):
        return list(value)
    return [value]


__all__ = ["BulkFormat", "FileFormat", "FileSource", "StreamFormat"]
