"""A stream's records as an Arrow table of a lakehouse table's columns, for the sinks that write
data files (connectors/delta, connectors/iceberg): what the table's columns are, from the
stream's declared type, and an epoch's records (Python values or Arrow batches) converted to
them. Each sink passes its own configuration error class and its own type mapping."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pyarrow as pa

from flowpoint.api.types import PickledBytesType, RowType, TupleType, rows_to_arrow, schema_of


def stream_fields(type_info: Any, where: str, error: type[Exception], arrow_type: Callable[[pa.DataType], pa.DataType]) -> list[pa.Field]:
    """The table's columns for a stream of ``type_info`` values (nullable, each type through
    ``arrow_type``); ``error`` naming ``where`` when the stream has no declared type."""
    schema = None if type_info is None or isinstance(type_info, PickledBytesType) else schema_of(type_info)
    if schema is None:
        msg = (f"{where}: the stream has no declared type, so the table's columns are unknown; give the operator "
               f"before sink_to an output_type, e.g. .map(f, output_type=Types.ROW_NAMED(['user', 'clicks'], "
               f"[Types.STRING(), Types.LONG()]))")
        raise error(msg)
    return [pa.field(f.name, arrow_type(f.type), nullable=True) for f in schema]


def records_table(records: Any, type_info: Any, schema: pa.Schema, where: str, error: type[Exception]) -> pa.Table:
    """An epoch's records (Python values or Arrow batches) as a table of ``schema`` (its columns
    in its order, cast to its types); ``error`` naming ``where`` and the first record when they
    do not fit."""
    try:
        if isinstance(records, (pa.RecordBatch, pa.Table)):
            table = pa.Table.from_batches([records]) if isinstance(records, pa.RecordBatch) else records
            missing = [n for n in schema.names if n not in table.schema.names]
            if missing:
                msg = f"{where}: the stream's batches lack column(s) {missing} (they have {table.schema.names})"
                raise error(msg)
        else:
            if isinstance(type_info, (RowType, TupleType)) and isinstance(records[0], dict):
                names = schema_of(type_info).names
                records = [tuple(r.get(n) for n in names) for r in records]
            table = pa.Table.from_batches([rows_to_arrow(records, type_info)])
        table = table.select(schema.names)  # the table's column order
        # metadata too: Iceberg's field ids are field metadata, which must reach the data files
        return table if table.schema.equals(schema, check_metadata=True) else table.cast(schema)
    except error:
        raise
    except (pa.ArrowException, ValueError, TypeError) as e:
        first = records if isinstance(records, (pa.RecordBatch, pa.Table)) else records[0]
        msg = (f"{where}: cannot convert records (first: {first!r:.100}) to the table's columns {schema}: {e}; make the "
               f"stream's values match its declared type")
        raise error(msg) from None
