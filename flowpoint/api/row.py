"""``Row``: PyFlink's record type with named fields (a tuple you can also read by name)."""

from __future__ import annotations

from enum import Enum
from typing import Any


class RowKind(Enum):
    """What a row means in a changelog (PyFlink's ``RowKind``); printed as ``+I``, ``-U``, ``+U``, ``-D``."""

    INSERT = 0
    UPDATE_BEFORE = 1
    UPDATE_AFTER = 2
    DELETE = 3

    def short_string(self) -> str:
        return ("+I", "-U", "+U", "-D")[self.value]

    def __str__(self) -> str:
        return self.short_string()


_ROW_CLASSES: dict[tuple[str, ...] | None, type] = {}
MAX_ROW_CLASSES = 4096  # schemas; a Row of yet another keeps its field names in a dict of its own


def row_class(fields: tuple[str, ...] | None) -> type | None:
    """The Row class of rows with these field names: one class per schema, whose ``_fields`` is
    a class attribute, so that a Row allocates no dict of its own (building the dict cost a
    fifth of a keyed per-record job's time). ``type(row).__name__`` is still ``"Row"`` and
    ``isinstance(row, Row)`` holds; ``type(row) is Row`` does not. None past MAX_ROW_CLASSES."""
    cls = _ROW_CLASSES.get(fields)
    if cls is None:
        if len(_ROW_CLASSES) >= MAX_ROW_CLASSES:
            return None
        namespace = {"__slots__": (), "_fields": fields, "__module__": __name__, "__qualname__": "Row", "__doc__": Row.__doc__}
        cls = _ROW_CLASSES.setdefault(fields, type("Row", (Row,), namespace))
    return cls


def _make_row(fields: tuple[str, ...] | None, values: tuple, kind: RowKind | None = None) -> Row:
    if fields is not None and type(fields) is not tuple:
        fields = tuple(fields)
    cls = _ROW_CLASSES.get(fields) or row_class(fields)
    if cls is None:
        row = tuple.__new__(Row, values)
        row._fields = fields
    else:
        row = tuple.__new__(cls, values)
    if kind is not None and kind is not RowKind.INSERT:
        row._row_kind = kind
    return row


class Row(tuple):
    """A record: ``Row(ts=1, channel="a")`` or ``Row(1, "a")``.

    Read a field as ``row.channel``, ``row["channel"]`` or ``row[1]``. Rows are tuples, so they
    compare, hash and unpack like tuples and can be used as keys.
    """

    _fields: tuple[str, ...] | None = None  # a class attribute of each schema's class (row_class)
    _row_kind: RowKind = RowKind.INSERT  # set on a row of another kind

    def __new__(cls, *args: Any, **kwargs: Any) -> Row:
        if args and kwargs:
            msg = "Row takes either positional values or named values, not both"
            raise TypeError(msg)
        if kwargs:
            return _make_row(tuple(kwargs), tuple(kwargs.values()))
        return _make_row(None, args)

    @staticmethod
    def of(fields: tuple[str, ...] | None, values: tuple | list) -> Row:
        """Build a row from field names and values without keyword-argument overhead."""
        return _make_row(fields, tuple(values))

    def get_row_kind(self) -> RowKind:
        return self._row_kind

    def set_row_kind(self, row_kind: RowKind) -> None:
        if not isinstance(row_kind, RowKind):
            msg = f"set_row_kind() takes a RowKind; got {row_kind!r}"
            raise TypeError(msg)
        if row_kind is RowKind.INSERT:
            self.__dict__.pop("_row_kind", None)
        else:
            self._row_kind = row_kind

    def as_dict(self) -> dict[str, Any]:
        if self._fields is None:
            msg = "as_dict() needs a Row with named fields"
            raise TypeError(msg)
        return dict(zip(self._fields, self, strict=True))

    def get_fields_by_names(self, names: list[str]) -> list[Any]:
        return [self[n] for n in names]

    def __getitem__(self, item: Any) -> Any:  # type: ignore[override]
        if isinstance(item, str):
            try:
                return tuple.__getitem__(self, self._fields.index(item))  # type: ignore[union-attr]
            except (ValueError, AttributeError):
                msg = f"Row has no field {item!r}; fields: {self._fields}"
                raise KeyError(msg) from None
        return tuple.__getitem__(self, item)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name == "_fields":
            raise AttributeError(name)
        fields = self._fields
        if fields and name in fields:
            return tuple.__getitem__(self, fields.index(name))
        msg = f"Row has no field {name!r}; fields: {fields}"
        raise AttributeError(msg)

    def __reduce__(self):  # type: ignore[override]
        kind = self._row_kind
        return (_make_row, (self._fields, tuple(self)) if kind is RowKind.INSERT else (self._fields, tuple(self), kind))

    def __repr__(self) -> str:
        if self._fields:
            inner = ", ".join(f"{k}={v!r}" for k, v in zip(self._fields, self, strict=True))
        else:
            inner = ", ".join(repr(v) for v in self)
        return f"Row({inner})"


def get_field(record: Any, field: int | str) -> Any:
    """Field ``field`` of a record, as ``key_by(field)`` and the rolling aggregations read it: an
    index into a tuple, Row or list (a scalar is its own field 0), a name of a Row, dict,
    namedtuple, dataclass or object attribute."""
    if isinstance(field, int):
        if isinstance(record, (tuple, list, dict)):
            return record[field]
        if field != 0:
            msg = f"field {field} of a scalar record {record!r:.80}: scalars have only field 0"
            raise IndexError(msg)
        return record
    if isinstance(record, (Row, dict)):
        return record[field]
    try:
        return getattr(record, field)
    except AttributeError:
        msg = f"record {record!r:.80} of type {type(record).__name__} has no field {field!r}"
        raise KeyError(msg) from None
