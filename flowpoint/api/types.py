"""PyFlink-style type information: ``Types.LONG()``, ``Types.ROW_NAMED([...], [...])``, ...

A type describes the values of a stream or a state. It decides the Arrow schema used when a
stream is written to columnar files or moved between tasks as Arrow, and lets flowpoint check
values early. Without a type, values are pickled (``Types.PICKLED_BYTE_ARRAY()``).
"""

from __future__ import annotations

import datetime
import decimal
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import pyarrow as pa

from flowpoint.api.row import Row, row_class
from flowpoint.api.time import Instant
from flowpoint.errors import ConfigurationError


class TypeInformation:
    """Base of every type. ``arrow_type()`` maps it to Arrow; ``to_python`` converts Arrow values."""

    def arrow_type(self) -> pa.DataType:
        raise NotImplementedError

    def python_classes(self) -> tuple[type, ...]:
        return (object,)

    def from_arrow_values(self, values: list) -> list:
        """Convert a column of Arrow ``to_pylist`` values to the Python values of this type."""
        return values

    def to_arrow_value(self, value: Any) -> Any:
        return value

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash(repr(self))


class ResultTypeQueryable(ABC):
    """Something that knows the type of what it produces (a deserialization schema, a source)."""

    @abstractmethod
    def get_produced_type(self) -> Any: ...


@dataclass(frozen=True, eq=False)
class BasicType(TypeInformation):
    name: str
    _arrow: Any
    _py: tuple

    def arrow_type(self) -> pa.DataType:
        return self._arrow

    def python_classes(self) -> tuple[type, ...]:
        return self._py

    def __repr__(self) -> str:
        return f"Types.{self.name}()"


class PickledBytesType(TypeInformation):
    def arrow_type(self) -> pa.DataType:
        return pa.binary()

    def __repr__(self) -> str:
        return "Types.PICKLED_BYTE_ARRAY()"


class TupleType(TypeInformation):
    def __init__(self, field_types: list[TypeInformation]):
        self.field_types = list(field_types)

    @property
    def field_names(self) -> list[str]:
        return [f"f{i}" for i in range(len(self.field_types))]

    def arrow_type(self) -> pa.DataType:
        return pa.struct([pa.field(n, t.arrow_type()) for n, t in zip(self.field_names, self.field_types, strict=True)])

    def python_classes(self) -> tuple[type, ...]:
        return (tuple,)

    def from_arrow_values(self, values: list) -> list:
        names = self.field_names
        return [None if v is None else tuple(v[n] for n in names) for v in values]

    def to_arrow_value(self, value: Any) -> Any:
        return None if value is None else dict(zip(self.field_names, value, strict=True))

    def __repr__(self) -> str:
        return f"Types.TUPLE({self.field_types!r})"


class RowType(TypeInformation):
    def __init__(self, field_names: list[str] | None, field_types: list[TypeInformation]):
        self.field_types = list(field_types)
        self.field_names = list(field_names) if field_names else [f"f{i}" for i in range(len(field_types))]
        if len(self.field_names) != len(self.field_types):
            msg = f"ROW_NAMED got {len(self.field_names)} names and {len(self.field_types)} types; give one type per name"
            raise ConfigurationError(msg)

    def arrow_schema(self) -> pa.Schema:
        return pa.schema([pa.field(n, t.arrow_type()) for n, t in zip(self.field_names, self.field_types, strict=True)])

    def arrow_type(self) -> pa.DataType:
        return pa.struct(list(self.arrow_schema()))

    def python_classes(self) -> tuple[type, ...]:
        return (tuple,)

    def from_arrow_values(self, values: list) -> list:
        names = tuple(self.field_names)
        return [None if v is None else Row.of(names, [v[n] for n in names]) for v in values]

    def to_arrow_value(self, value: Any) -> Any:
        return None if value is None else dict(zip(self.field_names, value, strict=True))

    def __repr__(self) -> str:
        return f"Types.ROW_NAMED({self.field_names!r}, {self.field_types!r})"


class ListType(TypeInformation):
    def __init__(self, element_type: TypeInformation):
        self.element_type = element_type

    def arrow_type(self) -> pa.DataType:
        return pa.list_(self.element_type.arrow_type())

    def python_classes(self) -> tuple[type, ...]:
        return (list, tuple)

    def __repr__(self) -> str:
        return f"Types.LIST({self.element_type!r})"


class MapType(TypeInformation):
    def __init__(self, key_type: TypeInformation, value_type: TypeInformation):
        self.key_type, self.value_type = key_type, value_type

    def arrow_type(self) -> pa.DataType:
        return pa.map_(self.key_type.arrow_type(), self.value_type.arrow_type())

    def python_classes(self) -> tuple[type, ...]:
        return (dict,)

    def from_arrow_values(self, values: list) -> list:
        return [None if v is None else dict(v) for v in values]

    def __repr__(self) -> str:
        return f"Types.MAP({self.key_type!r}, {self.value_type!r})"


_INT = (int,)


class Types:
    """Factory of type information, named as in PyFlink."""

    @staticmethod
    def STRING() -> TypeInformation:
        return BasicType("STRING", pa.string(), (str,))

    @staticmethod
    def BOOLEAN() -> TypeInformation:
        return BasicType("BOOLEAN", pa.bool_(), (bool,))

    @staticmethod
    def BYTE() -> TypeInformation:
        return BasicType("BYTE", pa.int8(), _INT)

    @staticmethod
    def SHORT() -> TypeInformation:
        return BasicType("SHORT", pa.int16(), _INT)

    @staticmethod
    def INT() -> TypeInformation:
        return BasicType("INT", pa.int32(), _INT)

    @staticmethod
    def LONG() -> TypeInformation:
        return BasicType("LONG", pa.int64(), _INT)

    @staticmethod
    def FLOAT() -> TypeInformation:
        return BasicType("FLOAT", pa.float32(), (float, int))

    @staticmethod
    def DOUBLE() -> TypeInformation:
        return BasicType("DOUBLE", pa.float64(), (float, int))

    @staticmethod
    def CHAR() -> TypeInformation:
        """A character: a ``str``."""
        return BasicType("CHAR", pa.string(), (str,))

    @staticmethod
    def BIG_INT() -> TypeInformation:
        return BasicType("BIG_INT", pa.int64(), _INT)

    @staticmethod
    def BIG_DEC() -> TypeInformation:
        """A ``decimal.Decimal`` of any precision; other numbers become one through their ``str``,
        as PyFlink's coder does (``0.1`` -> ``Decimal('0.1')``). Columnar files hold it as
        DECIMAL(38, 18), Flink's SQL type for it."""
        return BasicType("BIG_DEC", pa.decimal128(38, 18), (decimal.Decimal,))

    @staticmethod
    def INSTANT() -> TypeInformation:
        """A point in time: a :class:`~flowpoint.api.time.Instant` (seconds and nanos)."""
        return BasicType("INSTANT", pa.struct([("seconds", pa.int64()), ("nanos", pa.int32())]), (Instant,))

    @staticmethod
    def SQL_DATE() -> TypeInformation:
        """A ``datetime.date`` (a ``datetime`` becomes its date)."""
        return BasicType("SQL_DATE", pa.date32(), (datetime.date,))

    @staticmethod
    def SQL_TIME() -> TypeInformation:
        """A ``datetime.time`` to the millisecond, without time zone (Flink's ``java.sql.Time``)."""
        return BasicType("SQL_TIME", pa.time32("ms"), (datetime.time,))

    @staticmethod
    def SQL_TIMESTAMP() -> TypeInformation:
        """A ``datetime.datetime`` to the millisecond, without time zone: an aware datetime keeps
        its wall-clock time and loses its zone, as in PyFlink."""
        return BasicType("SQL_TIMESTAMP", pa.timestamp("ms"), (datetime.datetime,))

    @staticmethod
    def PRIMITIVE_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ListType(element_type)

    @staticmethod
    def BASIC_ARRAY(element_type: TypeInformation) -> TypeInformation:
        return ListType(element_type)

    @staticmethod
    def OBJECT_ARRAY(element_type: TypeInformation) -> TypeInformation:
        """An array of non-primitive values (a list; elements may be None)."""
        return ListType(element_type)

    @staticmethod
    def LIST(element_type: TypeInformation) -> TypeInformation:
        return ListType(element_type)

    @staticmethod
    def MAP(key_type: TypeInformation, value_type: TypeInformation) -> TypeInformation:
        return MapType(key_type, value_type)

    @staticmethod
    def TUPLE(field_types: list[TypeInformation]) -> TypeInformation:
        return TupleType(field_types)

    @staticmethod
    def ROW(field_types: list[TypeInformation]) -> TypeInformation:
        return RowType(None, field_types)

    @staticmethod
    def ROW_NAMED(field_names: list[str], field_types: list[TypeInformation]) -> TypeInformation:
        return RowType(field_names, field_types)

    @staticmethod
    def PICKLED_BYTE_ARRAY() -> TypeInformation:
        return PickledBytesType()


def schema_of(type_info: TypeInformation | None) -> pa.Schema | None:
    """The Arrow schema of a stream of ``type_info`` values (rows become columns)."""
    if type_info is None or isinstance(type_info, PickledBytesType):
        return None
    if isinstance(type_info, RowType):
        return type_info.arrow_schema()
    if isinstance(type_info, TupleType):
        return pa.schema(list(type_info.arrow_type()))
    return pa.schema([pa.field("value", type_info.arrow_type())])


def rows_to_arrow(values: list, type_info: TypeInformation) -> pa.RecordBatch:
    """Convert Python values of ``type_info`` into an Arrow record batch."""
    schema = schema_of(type_info)
    if schema is None:
        msg = f"{type_info!r} has no columnar form; give the stream an output_type"
        raise ConfigurationError(msg)
    if isinstance(type_info, (RowType, TupleType)):
        columns = list(zip(*values, strict=True)) if values else [[] for _ in schema]
        arrays = [pa.array(list(c), type=f.type) for c, f in zip(columns, schema, strict=True)]
    else:
        arrays = [pa.array(values, type=schema.field(0).type)]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def arrow_to_rows(batch: pa.RecordBatch | pa.Table, type_info: TypeInformation | None = None, columns: list[list] | None = None) -> list:
    """Convert an Arrow batch to Python values: Rows for several columns, values for one.
    ``columns``: the batch's columns as Python lists already (``to_pylist``), if the caller has them."""
    names = tuple(batch.schema.names)
    if len(names) == 1 and names[0] == "value" and not isinstance(type_info, RowType):
        return batch.column(0).to_pylist() if columns is None else columns[0]
    return list(iter_arrow_rows(batch, type_info, columns))


def iter_arrow_rows(batch: pa.RecordBatch | pa.Table, type_info: TypeInformation | None = None, columns: list[list] | None = None) -> Iterator:
    """:func:`arrow_to_rows`'s values, built one at a time as they are iterated.

    A per-record operator that takes its records from this iterator never holds a batch's Rows
    all at once, and that is most of their cost: thousands of new tuples alive together cross
    CPython's gen-0 threshold (700 net allocations of tracked objects) again and again, and
    every collection traverses them and promotes them to older generations, where later
    collections traverse them again. Built one by one and dropped after their record, they
    leave the collector's count where it was (a keyed count over 8,192-row batches: 650 ns a
    Row in a list, 190 streamed)."""
    names = tuple(batch.schema.names)
    if len(names) == 1 and names[0] == "value" and not isinstance(type_info, RowType):
        return iter(batch.column(0).to_pylist() if columns is None else columns[0])
    if columns is None:
        columns = [c.to_pylist() for c in batch.columns]
    if isinstance(type_info, TupleType):
        return zip(*columns, strict=True)
    cls = row_class(names)
    if cls is not None:  # Row.of for every row without a call per row
        return map(tuple.__new__, repeat(cls), zip(*columns, strict=True))
    return (Row.of(names, values) for values in zip(*columns, strict=True))
