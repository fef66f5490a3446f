"""The stream type a ``DeltaSource`` produces, from the table's Delta schema: a
``Types.ROW_NAMED`` of the columns read, so the stream is columnar (Arrow batches) and
``key_by("column")`` takes the columnar path. Delta's types map to flowpoint's:

====================  ==================================================================
Delta                 flowpoint
====================  ==================================================================
byte, short, int,     BYTE, SHORT, INT, LONG
long
float, double         FLOAT, DOUBLE
string, boolean       STRING, BOOLEAN
date                  SQL_DATE
timestamp,            SQL_TIMESTAMP (to the millisecond; a zoned timestamp keeps its UTC
timestamp_ntz         wall-clock time)
decimal(p, s)         BIG_DEC (DECIMAL(38, 18); p - s must be at most 20)
array, map, struct    LIST, MAP, ROW_NAMED of the above
====================  ==================================================================

``binary`` has no flowpoint type: leave such columns out with ``set_columns``.
"""

from __future__ import annotations

import pyarrow as pa

from flowpoint.api.types import RowType, TypeInformation, Types, schema_of
from flowpoint.connectors.delta.errors import DeltaSourceConfigurationError

_SIMPLE = {
    pa.int8(): Types.BYTE,
    pa.int16(): Types.SHORT,
    pa.int32(): Types.INT,
    pa.int64(): Types.LONG,
    pa.float32(): Types.FLOAT,
    pa.float64(): Types.DOUBLE,
    pa.string(): Types.STRING,
    pa.large_string(): Types.STRING,
    pa.string_view(): Types.STRING,
    pa.bool_(): Types.BOOLEAN,
    pa.date32(): Types.SQL_DATE,
}


def _type_of(t: pa.DataType, column: str, where: str) -> TypeInformation:
    simple = _SIMPLE.get(t)
    if simple is not None:
        return simple()
    if pa.types.is_timestamp(t):
        return Types.SQL_TIMESTAMP()
    if pa.types.is_decimal(t):
        if t.precision - t.scale > 20:
            msg = (f"{where}: column {column!r} is {t}, whose integer digits do not fit BIG_DEC (DECIMAL(38, 18)); "
                   f"leave it out with set_columns([...])")
            raise DeltaSourceConfigurationError(msg)
        return Types.BIG_DEC()
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return Types.LIST(_type_of(t.value_type, column, where))
    if pa.types.is_map(t):
        return Types.MAP(_type_of(t.key_type, column, where), _type_of(t.item_type, column, where))
    if pa.types.is_struct(t):
        return Types.ROW_NAMED([f.name for f in t], [_type_of(f.type, f"{column}.{f.name}", where) for f in t])
    msg = f"{where}: column {column!r} has type {t}, which has no flowpoint type; leave it out with set_columns([...])"
    raise DeltaSourceConfigurationError(msg)


def stream_type(table_schema: pa.Schema, columns: list[str] | None, where: str) -> RowType:
    """The ``Types.ROW_NAMED`` of ``columns`` (all the table's, in its order, when None)."""
    names = list(table_schema.names) if columns is None else list(columns)
    missing = [c for c in names if c not in table_schema.names]
    if missing:
        msg = f"{where}: the table has no column(s) {missing}; its columns are {table_schema.names}"
        raise DeltaSourceConfigurationError(msg)
    types = [_type_of(table_schema.field(n).type, n, where) for n in names]
    out = Types.ROW_NAMED(names, types)
    assert isinstance(out, RowType)
    return out


def output_schema(type_info: TypeInformation) -> pa.Schema:
    schema = schema_of(type_info)
    assert schema is not None
    return schema


def has_timestamp(t: pa.DataType) -> bool:
    """Whether ``t`` holds timestamps (cast to milliseconds: sub-millisecond digits are dropped)."""
    if pa.types.is_timestamp(t):
        return True
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return has_timestamp(t.value_type)
    if pa.types.is_map(t):
        return has_timestamp(t.key_type) or has_timestamp(t.item_type)
    if pa.types.is_struct(t):
        return any(has_timestamp(f.type) for f in t)
    return False
