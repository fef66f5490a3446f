"""Values as a declared type makes them, and as Flink prints them.

PyFlink serializes every record with its stream's type (``type_info`` of a source,
``output_type`` of an operator) and the next operator reads it back, so the type shapes the
values a function sees: ``Types.ROW_NAMED(...)`` turns tuples into :class:`Row` objects with
those field names, ``Types.TUPLE`` into tuples, ``Types.FLOAT()`` rounds to 32 bits.
:func:`converter` does the same in flowpoint (None when the type changes nothing).

``print()`` shows what Flink shows: a stream without a type prints ``str(value)``; a ROW stream
``+I[f0,f1,...]`` with each field's ``str``; any other typed stream Java's ``toString`` of the
value (``(hi,0,5,4)`` for a tuple, ``true``, ``[1, 2]``, ``1.0E7``): :func:`printer`.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable
from decimal import Decimal
from typing import Any

import numpy as np

from flowpoint.api.row import Row, RowKind
from flowpoint.api.types import (
    BasicType,
    ListType,
    MapType,
    PickledBytesType,
    RowType,
    TupleType,
    TypeInformation,
)


def _float32(v: Any) -> Any:
    return None if v is None else float(np.float32(v))


def _big_dec(v: Any) -> Any:
    # PyFlink's coder writes str(value) and reads it back as a Decimal
    return v if v is None or type(v) is Decimal else Decimal(str(v))


def _sql_date(v: Any) -> Any:
    return v if v is None or type(v) is datetime.date else datetime.date.fromordinal(v.toordinal())


def _sql_time(v: Any) -> Any:
    # milliseconds of the day, without zone (PyFlink's TimeCoder)
    return None if v is None else datetime.time(v.hour, v.minute, v.second, v.microsecond // 1000 * 1000)


def _sql_timestamp(v: Any) -> Any:
    # epoch milliseconds of the wall-clock time (PyFlink's TimestampCoder(3))
    return None if v is None else v.replace(tzinfo=None, microsecond=v.microsecond // 1000 * 1000)


_BASIC_CONVERTERS: dict[str, Callable[[Any], Any]] = {
    "FLOAT": _float32, "BIG_DEC": _big_dec, "SQL_DATE": _sql_date, "SQL_TIME": _sql_time, "SQL_TIMESTAMP": _sql_timestamp,
}


def converter(type_info: TypeInformation | None) -> Callable[[Any], Any] | None:
    """A function making a value what ``type_info`` makes it in PyFlink, or None if the type
    leaves values as they are."""
    if isinstance(type_info, BasicType):
        return _BASIC_CONVERTERS.get(type_info.name)
    if isinstance(type_info, (RowType, TupleType)):
        fields = [converter(t) for t in type_info.field_types]
        plain = all(f is None for f in fields)
        arity = len(fields)

        def field_values(v: Any) -> tuple:
            if len(v) != arity:
                msg = f"{len(v)} fields for {type_info!r}, which has {arity}"
                raise ValueError(msg)
            return tuple(v) if plain else tuple(f(x) if f else x for f, x in zip(fields, v, strict=True))

        if isinstance(type_info, RowType):
            names = tuple(type_info.field_names)

            def to_row(v: Any) -> Any:
                if v is None:
                    return None
                if plain and isinstance(v, Row) and v._fields == names:
                    return v
                if isinstance(v, dict):  # a record by field name
                    v = [v.get(n) for n in names]
                elif not isinstance(v, (tuple, list)):
                    return v  # not a row: left for the sink or the next operator to refuse
                out = Row.of(names, field_values(v))
                if isinstance(v, Row) and v.get_row_kind() is not RowKind.INSERT:
                    out.set_row_kind(v.get_row_kind())
                return out

            return to_row

        def to_tuple(v: Any) -> Any:
            if v is None or (plain and type(v) is tuple and len(v) == arity) or not isinstance(v, (tuple, list)):
                return v
            return field_values(v)

        return to_tuple
    if isinstance(type_info, ListType):
        element = converter(type_info.element_type)
        if element is None:
            return None
        return lambda v: None if v is None else [element(x) for x in v]
    if isinstance(type_info, MapType):
        k, val = converter(type_info.key_type), converter(type_info.value_type)
        if k is None and val is None:
            return None
        return lambda v: None if v is None else {(k(a) if k else a): (val(b) if val else b) for a, b in v.items()}
    return None


# -- printing ---------------------------------------------------------------------------------


def printer(type_info: TypeInformation | None) -> Callable[[Any], str]:
    """How ``print()`` shows a value of ``type_info``, as PyFlink does (see the module docstring)."""
    if type_info is None or isinstance(type_info, PickledBytesType):
        return lambda v: v if isinstance(v, str) else str(v)
    if isinstance(type_info, RowType):
        return lambda v: _kind(v) + "[" + ",".join(str(x) for x in v) + "]"
    return _java(type_info)


def java_to_string(type_info: TypeInformation | None) -> Callable[[Any], str]:
    """Java's ``toString`` of a value of ``type_info`` (``str`` of an untyped value): what Flink's
    ``SimpleStringEncoder`` writes. Unlike :func:`printer`, a ROW prints as Java's ``Row``
    (``+I[a, 1]``)."""
    if type_info is None or isinstance(type_info, PickledBytesType):
        return str
    return _java(type_info)


def _java(t: TypeInformation) -> Callable[[Any], str]:
    """Java's ``toString`` of a value of ``t`` as Flink holds it."""
    if isinstance(t, BasicType):
        if t.name == "STRING":
            return lambda v: "null" if v is None else v
        if t.name == "BOOLEAN":
            return lambda v: "null" if v is None else ("true" if v else "false")
        if t.name == "FLOAT":
            return lambda v: "null" if v is None else java_float_string(v)
        if t.name == "DOUBLE":
            return lambda v: "null" if v is None else java_double_string(v)
        if t.name in _JAVA_TIME:
            return lambda v, f=_JAVA_TIME[t.name]: "null" if v is None else f(v)
        if t.name in ("CHAR", "BIG_DEC"):
            return lambda v: "null" if v is None else str(v)
        return lambda v: "null" if v is None else str(int(v))
    if isinstance(t, TupleType):
        fields = [_java(f) for f in t.field_types]
        return lambda v: "null" if v is None else "(" + ",".join(f(x) for f, x in zip(fields, v, strict=True)) + ")"
    if isinstance(t, RowType):
        fields = [_java(f) for f in t.field_types]
        return lambda v: "null" if v is None else _kind(v) + "[" + ", ".join(f(x) for f, x in zip(fields, v, strict=True)) + "]"
    if isinstance(t, ListType):
        element = _java(t.element_type)
        return lambda v: "null" if v is None else "[" + ", ".join(element(x) for x in v) + "]"
    if isinstance(t, MapType):
        k, val = _java(t.key_type), _java(t.value_type)
        return lambda v: "null" if v is None else "{" + ", ".join(f"{k(a)}={val(b)}" for a, b in v.items()) + "}"
    return lambda v: "null" if v is None else str(v)


def _java_fraction(nanos: int, groups: bool) -> str:
    """The fraction of a second as Java prints it: ``Timestamp`` trims trailing zeros (at least
    one digit), ``Instant`` prints 3, 6 or 9 digits (none for a whole second)."""
    digits = f"{nanos:09d}"
    if groups:
        return "" if nanos == 0 else "." + (digits[:3] if nanos % 1_000_000 == 0 else digits[:6] if nanos % 1000 == 0 else digits)
    return "." + (digits.rstrip("0") or "0")


def _java_instant(v: Any) -> str:
    moment = datetime.datetime(1970, 1, 1) + datetime.timedelta(seconds=v.seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + _java_fraction(v.nanos, True) + "Z"


_JAVA_TIME: dict[str, Callable[[Any], str]] = {
    "SQL_DATE": lambda v: v.isoformat(),  # java.sql.Date: 2024-01-31
    "SQL_TIME": lambda v: v.strftime("%H:%M:%S"),  # java.sql.Time: 13:45:00
    "SQL_TIMESTAMP": lambda v: v.strftime("%Y-%m-%d %H:%M:%S") + _java_fraction(v.microsecond * 1000, False),
    "INSTANT": _java_instant,  # java.time.Instant: 2024-01-31T13:45:00.250Z
}


def _kind(v: Any) -> str:
    return v.get_row_kind().short_string() if isinstance(v, Row) else "+I"


def java_double_string(d: float) -> str:
    """Java's ``Double.toString``: decimal between 10^-3 and 10^7, else ``1.0E7`` notation."""
    return _java_fp(float(d), repr(float(d)))


def java_float_string(f: float) -> str:
    """Java's ``Float.toString``: the shortest digits of the 32-bit value."""
    return _java_fp(float(np.float32(f)), str(np.float32(f)))


def _java_fp(value: float, shortest: str) -> str:
    if value != value:
        return "NaN"
    if value in (float("inf"), float("-inf")):
        return "Infinity" if value > 0 else "-Infinity"
    if value == 0:
        return "-0.0" if str(value).startswith("-") else "0.0"
    sign, digits, exponent = Decimal(shortest).normalize().as_tuple()
    text = "".join(map(str, digits))
    point = len(text) + int(exponent)  # digits before the decimal point
    minus = "-" if sign else ""
    if 1e-3 <= abs(value) < 1e7:
        if point <= 0:
            return f"{minus}0.{'0' * -point}{text}"
        if point >= len(text):
            return f"{minus}{text}{'0' * (point - len(text))}.0"
        return f"{minus}{text[:point]}.{text[point:]}"
    return f"{minus}{text[0]}.{text[1:] or '0'}E{point - 1}"
