"""Built-in aggregate functions: ``Aggregates.count()``, ``.sum(field)``, ``.min(field)``,
``.max(field)``, ``.avg(field)``.

They are ordinary :class:`~flowpoint.api.functions.AggregateFunction` objects (use them with
``window(...).aggregate(Aggregates.sum("amount"))`` or through ``window(...).sum("amount")``).
Each has a ``builtin`` attribute, ``(name, field)``, by which the runtime may recognise it and
compute it vectorized instead of calling ``add`` per record.

``sum``, ``min`` and ``max`` follow Flink's ``WindowedStream.sum/min/max``: the result is the
window's first record with ``field`` replaced by the aggregate (a scalar record with field 0 is
the aggregate itself). ``count`` is the number of records, ``avg`` the mean of ``field`` as a
float. Accumulators are immutable tuples and all five merge (session windows).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from flowpoint.api.functions import AggregateFunction
from flowpoint.api.row import Row, get_field
from flowpoint.errors import ConfigurationError


def replace_field(record: Any, field: int | str, value: Any) -> Any:
    """A copy of ``record`` with ``field`` set to ``value`` (Row, namedtuple, tuple, list, dict,
    dataclass); a scalar record is replaced by ``value``."""
    if isinstance(record, Row):
        i = record._fields.index(field) if isinstance(field, str) else field  # type: ignore[union-attr]
        values = list(record)
        values[i] = value
        return Row.of(record._fields, values)
    if isinstance(record, tuple) and hasattr(record, "_fields"):
        name = record._fields[field] if isinstance(field, int) else field
        return record._replace(**{name: value})
    if isinstance(record, tuple):
        return record[:field] + (value,) + record[field + 1 :]  # type: ignore[operator]
    if isinstance(record, (list, dict)):
        copy = type(record)(record)
        copy[field] = value
        return copy
    if isinstance(field, str) and dataclasses.is_dataclass(record):
        return dataclasses.replace(record, **{field: value})  # type: ignore[type-var]
    return value


class BuiltinAggregate(AggregateFunction):
    """Base of the built-in aggregates; ``builtin`` is ``(name, field)``."""

    name = ""

    def __init__(self, field: int | str | None):
        if field is not None and (not isinstance(field, (int, str)) or isinstance(field, bool)):
            msg = f"Aggregates.{self.name}() takes a field position (int) or name (str); got {field!r}"
            raise ConfigurationError(msg)
        self.field = field

    @property
    def builtin(self) -> tuple[str, int | str | None]:
        return (self.name, self.field)

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.field == self.field  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self.builtin)

    def __repr__(self) -> str:
        return f"{self.name}()" if self.field is None else f"{self.name}({self.field!r})"


class CountAggregate(BuiltinAggregate):
    name = "count"

    def create_accumulator(self) -> int:
        return 0

    def add(self, value: Any, accumulator: int) -> int:
        return accumulator + 1

    def get_result(self, accumulator: int) -> int:
        return accumulator

    def merge(self, acc_a: int, acc_b: int) -> int:
        return acc_a + acc_b


class _FieldAggregate(BuiltinAggregate):
    """Accumulator ``(first record, aggregate of field)``, ``()`` before the first record."""

    def combine(self, a: Any, b: Any) -> Any:
        raise NotImplementedError

    def create_accumulator(self) -> tuple:
        return ()

    def add(self, value: Any, accumulator: tuple) -> tuple:
        x = get_field(value, self.field)  # type: ignore[arg-type]
        if not accumulator:
            return (value, x)
        return (accumulator[0], self.combine(accumulator[1], x))

    def get_result(self, accumulator: tuple) -> Any:
        if not accumulator:
            return None
        return replace_field(accumulator[0], self.field, accumulator[1])  # type: ignore[arg-type]

    def merge(self, acc_a: tuple, acc_b: tuple) -> tuple:
        if not acc_a:
            return acc_b
        if not acc_b:
            return acc_a
        return (acc_a[0], self.combine(acc_a[1], acc_b[1]))


class SumAggregate(_FieldAggregate):
    name = "sum"

    def combine(self, a: Any, b: Any) -> Any:
        return a + b


class MinAggregate(_FieldAggregate):
    name = "min"

    def combine(self, a: Any, b: Any) -> Any:
        return b if b < a else a


class MaxAggregate(_FieldAggregate):
    name = "max"

    def combine(self, a: Any, b: Any) -> Any:
        return b if b > a else a


class AvgAggregate(BuiltinAggregate):
    """Accumulator ``(sum, count)``; the result is ``sum / count`` (None for no records)."""

    name = "avg"

    def create_accumulator(self) -> tuple:
        return (0, 0)

    def add(self, value: Any, accumulator: tuple) -> tuple:
        return (accumulator[0] + get_field(value, self.field), accumulator[1] + 1)  # type: ignore[arg-type]

    def get_result(self, accumulator: tuple) -> float | None:
        total, n = accumulator
        return total / n if n else None

    def merge(self, acc_a: tuple, acc_b: tuple) -> tuple:
        return (acc_a[0] + acc_b[0], acc_a[1] + acc_b[1])


class Aggregates:
    """Factory of the built-in aggregate functions."""

    @staticmethod
    def count() -> CountAggregate:
        return CountAggregate(None)

    @staticmethod
    def sum(field: int | str = 0) -> SumAggregate:
        return SumAggregate(field)

    @staticmethod
    def min(field: int | str = 0) -> MinAggregate:
        return MinAggregate(field)

    @staticmethod
    def max(field: int | str = 0) -> MaxAggregate:
        return MaxAggregate(field)

    @staticmethod
    def avg(field: int | str = 0) -> AvgAggregate:
        return AvgAggregate(field)
