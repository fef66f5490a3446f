"""The Iceberg table's columns from the stream's declared type, the table's identity partition
spec, the check of an existing table against the stream, and partition values in Iceberg's
representation (a date as days since 1970-01-01, a timestamp as microseconds).

Arrow types become what Iceberg stores: timestamps in microseconds (UTC when zoned), times in
microseconds, large and view strings and binaries as plain ones, lists with an ``element``
field. pyiceberg is imported where it is used: ``import flowpoint`` works without the
``iceberg`` extra."""

from __future__ import annotations

import datetime
from typing import Any

import pyarrow as pa

from flowpoint.connectors.iceberg.errors import IcebergConfigurationError
from flowpoint.connectors.table_records import stream_fields

_FIELD_ID = b"PARQUET:field_id"
_EPOCH_DAY = datetime.date(1970, 1, 1)
_EPOCH_NAIVE = datetime.datetime(1970, 1, 1)
_EPOCH_UTC = datetime.datetime(1970, 1, 1, tzinfo=datetime.timezone.utc)
_MICROSECOND = datetime.timedelta(microseconds=1)
#: Iceberg types a partition column may have (identity partitions)
PARTITION_TYPES = ("string", "int", "long", "boolean", "date", "timestamp", "timestamptz")


def _arrow_type(t: pa.DataType) -> pa.DataType:
    """An Arrow type as Iceberg stores it."""
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC" if t.tz else None)
    if pa.types.is_time(t):
        return pa.time64("us")
    if pa.types.is_date64(t):
        return pa.date32()
    if pa.types.is_dictionary(t):
        return _arrow_type(t.value_type)
    if pa.types.is_large_string(t) or pa.types.is_string_view(t):
        return pa.string()
    if pa.types.is_large_binary(t) or pa.types.is_binary_view(t):
        return pa.binary()
    if pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t):
        return pa.list_(pa.field("element", _arrow_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(_arrow_type(t.key_type), _arrow_type(t.item_type))
    if pa.types.is_struct(t):
        return pa.struct([pa.field(f.name, _arrow_type(f.type)) for f in t])
    return t


def stream_columns(type_info: Any, where: str) -> pa.Schema:
    """The Arrow schema of the table a stream of ``type_info`` values is written to."""
    return pa.schema(stream_fields(type_info, where, IcebergConfigurationError, _arrow_type))


def _with_ids(field: pa.Field, ids: list[int]) -> pa.Field:
    """``field`` and the fields inside it numbered (pyiceberg converts numbered Arrow fields;
    the catalog numbers the table's columns afresh when it creates the table)."""
    ids[0] += 1
    meta = {_FIELD_ID: str(ids[0]).encode()}
    t = field.type
    if pa.types.is_list(t):
        t = pa.list_(_with_ids(t.value_field, ids))
    elif pa.types.is_map(t):
        t = pa.map_(_with_ids(t.key_field, ids), _with_ids(t.item_field, ids))
    elif pa.types.is_struct(t):
        t = pa.struct([_with_ids(f, ids) for f in t])
    return pa.field(field.name, t, nullable=field.nullable, metadata=meta)


def iceberg_schema(columns: pa.Schema, where: str) -> Any:
    """The pyiceberg ``Schema`` of ``columns``; a column Iceberg has no type for is refused,
    named."""
    from pyiceberg.io.pyarrow import pyarrow_to_schema

    ids = [0]
    fields = [_with_ids(f, ids) for f in columns]
    for f in fields:
        try:
            pyarrow_to_schema(pa.schema([f]))
        except (TypeError, ValueError, NotImplementedError) as e:
            msg = (f"{where}: column {f.name!r} of type {f.type} has no Iceberg type ({e}); map it to a supported "
                   f"type before sink_to")
            raise IcebergConfigurationError(msg) from None
    return pyarrow_to_schema(pa.schema(fields))


def type_text(t: Any) -> str:
    """An Iceberg type as text without its field ids (``list<string>``, ``struct<a: long>``)."""
    from pyiceberg.types import ListType, MapType, StructType

    if isinstance(t, ListType):
        return f"list<{type_text(t.element_type)}>"
    if isinstance(t, MapType):
        return f"map<{type_text(t.key_type)}, {type_text(t.value_type)}>"
    if isinstance(t, StructType):
        return "struct<" + ", ".join(f"{f.name}: {type_text(f.field_type)}" for f in t.fields) + ">"
    return str(t)


def check_partition_columns(schema: Any, columns: list[str], where: str) -> None:
    names = [f.name for f in schema.fields]
    for c in columns:
        if c not in names:
            msg = f"{where}: partition column {c!r} is not a column of the stream (columns: {names})"
            raise IcebergConfigurationError(msg)
        t = type_text(schema.find_field(c).field_type)
        if t not in PARTITION_TYPES:
            msg = (f"{where}: partition column {c!r} has Iceberg type {t}; partition by a string, integer, boolean, "
                   f"date or timestamp column")
            raise IcebergConfigurationError(msg)


def partition_spec(schema: Any, columns: list[str]) -> Any:
    """An identity partition spec of ``columns`` over ``schema``."""
    from pyiceberg.partitioning import PartitionField, PartitionSpec
    from pyiceberg.transforms import IdentityTransform

    return PartitionSpec(*[PartitionField(source_id=schema.find_field(c).field_id, field_id=1000 + i,
                                          transform=IdentityTransform(), name=c) for i, c in enumerate(columns)])


def spec_columns(spec: Any, schema: Any) -> list[str]:
    """A table's partitioning as text: ``day`` for an identity partition, ``bucket[16](user)``
    for another transform."""
    out = []
    for f in spec.fields:
        source = schema.find_field(f.source_id).name
        out.append(source if str(f.transform) == "identity" else f"{f.transform}({source})")
    return out


def check_existing(table_schema: Any, table_spec: Any, schema: Any, partitions: list[str], where: str) -> None:
    """The stream must have the existing table's columns (names and types, in any order) and
    its identity partitions; else IcebergConfigurationError naming the columns that differ."""
    have = {f.name: type_text(f.field_type) for f in table_schema.fields}
    want = {f.name: type_text(f.field_type) for f in schema.fields}
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
               f"and types), or write to a new table")
        raise IcebergConfigurationError(msg)
    existing = spec_columns(table_spec, table_schema)
    if existing != list(partitions):
        msg = (f"{where}: the table is partitioned by {existing}, the sink by {list(partitions)}; "
               f"set_partition_columns({existing!r}) if these are identity partitions, or write to a new table")
        raise IcebergConfigurationError(msg)


def partition_value(value: Any, iceberg_type: str) -> Any:
    """A partition column's value as Iceberg holds it in a partition tuple: days for a date,
    microseconds since 1970 (UTC when zoned) for a timestamp, the value itself otherwise."""
    if value is None:
        return None
    if iceberg_type == "date":
        return (value - _EPOCH_DAY).days
    if iceberg_type == "timestamptz":
        return (value - _EPOCH_UTC) // _MICROSECOND
    if iceberg_type == "timestamp":
        return (value - _EPOCH_NAIVE) // _MICROSECOND
    return value
