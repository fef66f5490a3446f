"""Keyed state <-> Spark DataFrames for :mod:`flowpoint.state_io` (the only pyspark use there)."""

from __future__ import annotations

from typing import Any

COLUMNS = ("state_name", "key", "namespace", "user_key", "value")


def _spark_value(value: Any) -> Any:
    """Row-like values as tuples (Spark has no type for flowpoint's Row subclass)."""
    if isinstance(value, tuple) and type(value) is not tuple and not hasattr(value, "asDict"):
        return tuple(value)
    return value


def _column_type(values: list[Any]) -> tuple[Any, bool]:
    """The Spark type of a column of Python values, and whether they must become strings
    (mixed or unsupported types: shown with ``repr``)."""
    from pyspark.sql.types import DoubleType, LongType, StringType, _infer_type, _merge_type

    present = [v for v in values if v is not None]
    if not present:
        return StringType(), False
    if all(isinstance(v, bool) for v in present):
        return _infer_type(present[0]), False
    if all(isinstance(v, int) and not isinstance(v, bool) for v in present):
        return LongType(), False
    if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        return DoubleType(), False
    try:
        t = _infer_type(present[0])
        for v in present[1:]:
            t = _merge_type(t, _infer_type(v))
        return t, False
    except (TypeError, ValueError):
        return StringType(), True


def rows_to_dataframe(spark: Any, rows: list[tuple], with_state_name: bool) -> Any:
    """``(state_name, key, namespace, user_key, value)`` rows as a DataFrame of decoded values."""
    from pyspark.sql.types import DoubleType, StructField, StructType

    columns = list(COLUMNS) if with_state_name else list(COLUMNS[1:])
    offset = 0 if with_state_name else 1
    data = [[_spark_value(v) for v in r[offset:]] for r in rows]
    fields = []
    for i, name in enumerate(columns):
        t, as_text = _column_type([r[i] for r in data])
        if as_text:
            for r in data:
                if r[i] is not None:
                    r[i] = repr(r[i])
        elif isinstance(t, DoubleType):
            for r in data:
                if r[i] is not None:
                    r[i] = float(r[i])
        fields.append(StructField(name, t, True))
    return spark.createDataFrame([tuple(r) for r in data], StructType(fields))


def dataframe_rows(df: Any) -> list[tuple]:
    """A DataFrame's rows as tuples of Python values (structs as tuples)."""
    return [tuple(_struct_as_tuple(v) for v in row) for row in df.toLocalIterator()]


def _struct_as_tuple(value: Any) -> Any:
    from pyspark.sql import Row

    if isinstance(value, Row):
        return tuple(_struct_as_tuple(v) for v in value)
    return value
