"""The Delta table's schema from the stream's declared type, the check against an existing
table, and partition values as Delta writes them (strings in the log, ``col=value``
directories for the data files)."""

from __future__ import annotations

import datetime
import hashlib
import re
from typing import Any

import pyarrow as pa

from flowpoint.connectors.delta.errors import DeltaConfigurationError
from flowpoint.connectors.table_records import stream_fields

_SAFE = re.compile(r"[A-Za-z0-9_.\-]{1,64}")
NULL_PARTITION = "__HIVE_DEFAULT_PARTITION__"


def _delta_type(t: pa.DataType) -> pa.DataType:
    """Arrow types as Delta stores them: timestamps in microseconds (UTC when zoned)."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return pa.list_(pa.field("element", _delta_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(_delta_type(t.key_type), _delta_type(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _delta_type(f.type)) for f in t])
    return t


def table_schema(type_info: Any, where: str) -> pa.Schema:
    """The Arrow schema of the table a stream of ``type_info`` values is written to."""
    fields = stream_fields(type_info, where, DeltaConfigurationError, _delta_type)
    out = pa.schema(fields)
    from deltalake import Schema as DeltaSchema

    for f in fields:
        try:
            DeltaSchema.from_arrow(pa.schema([f]))
        except Exception as e:  # delta-rs raises its own exception types
            msg = f"{where}: column {f.name!r} of type {f.type} has no Delta Lake type ({e}); map it to a supported type"
            raise DeltaConfigurationError(msg) from None
    return out


def check_partition_columns(schema: pa.Schema, columns: list[str], where: str) -> None:
    for c in columns:
        if c not in schema.names:
            msg = f"{where}: partition column {c!r} is not a column of the stream (columns: {schema.names})"
            raise DeltaConfigurationError(msg)
        t = schema.field(c).type
        if pa.types.is_nested(t) or pa.types.is_floating(t) or pa.types.is_binary(t):
            msg = f"{where}: partition column {c!r} has type {t}; partition by a string, integer, boolean, date or timestamp column"
            raise DeltaConfigurationError(msg)
    if len(columns) == len(schema.names):
        msg = f"{where}: every column ({schema.names}) is a partition column; a Delta table needs at least one data column"
        raise DeltaConfigurationError(msg)


def _comparable(t: pa.DataType) -> str:
    return str(_delta_type(t))


def check_existing(existing: pa.Schema, existing_partitions: list[str], schema: pa.Schema, partitions: list[str], where: str) -> None:
    """The stream must have the existing table's columns (names and types, in any order) and
    its partition columns; else DeltaConfigurationError naming the columns that differ."""
    have = {f.name: _comparable(f.type) for f in existing}
    want = {f.name: _comparable(f.type) for f in schema}
    problems = []
    missing = [n for n in have if n not in want]
    extra = [n for n in want if n not in have]
    differ = [f"{n} ({want[n]} in the stream, {have[n]} in the table)" for n in want if n in have and want[n] != have[n]]
    if missing:
        problems.append(f"the stream lacks the table's columns {missing}")
    if extra:
        problems.append(f"the table has no columns {extra}")
    if differ:
        problems.append("types differ: " + ", ".join(differ))
    if problems:
        table_cols = ", ".join(f"{n} {t}" for n, t in have.items())
        msg = (f"{where}: the stream does not match the existing table: {'; '.join(problems)}. The table's columns: "
               f"{table_cols}. Give the stream the table's columns (an output_type of Types.ROW_NAMED with these names "
               f"and types), or write to a new table path")
        raise DeltaConfigurationError(msg)
    if list(existing_partitions) != list(partitions):
        msg = (f"{where}: the table is partitioned by {list(existing_partitions)}, the sink by {list(partitions)}; "
               f"set_partition_columns({list(existing_partitions)!r}) or write to a new table path")
        raise DeltaConfigurationError(msg)


def partition_string(value: Any) -> str | None:
    """A partition value as the Delta log holds it."""
    if value is None:
        return None
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime.datetime):
        if value.tzinfo is not None:
            value = value.astimezone(datetime.timezone.utc).replace(tzinfo=None)
        return value.isoformat(sep=" ", timespec="microseconds")
    if isinstance(value, datetime.date):
        return value.isoformat()
    return str(value)


def partition_dir(columns: list[str], values: dict[str, str | None]) -> str:
    """``col=value/...`` for the data files of a partition; a value that is not a plain name
    gets a digest instead (readers take partition values from the log, not from the path)."""
    parts = []
    for c in columns:
        v = values[c]
        if v is None:
            v = NULL_PARTITION
        elif not _SAFE.fullmatch(v):
            v = "_h" + hashlib.sha256(v.encode("utf-8")).hexdigest()[:16]
        parts.append(f"{c}={v}")
    return "/".join(parts)
