"""Keyed state <-> Spark DataFrames for :mod:`flowpoint.state_io` (the only pyspark use there)."""

from __future__ import annotations

from typing import Any

from flowpoint.checkpoint.savepoint import load_subtask_state
from flowpoint.state.table_rows import state_rows

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
    offset = 0 if with_state_name else 1
    return values_dataframe(spark, [r[offset:] for r in rows], COLUMNS[offset:])


def values_dataframe(spark: Any, rows: list[tuple], columns: tuple[str, ...]) -> Any:
    """Rows of Python values as a DataFrame with these columns, each typed by its values (text,
    each value's repr, when they mix types)."""
    from pyspark.sql.types import DoubleType, StructField, StructType

    data = [[_spark_value(v) for v in r] for r in rows]
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


def _subtask_reader(access: Any, op: Any):
    def read(sub: Any) -> dict:
        return load_subtask_state(access, op, sub)

    return read


def keyed_state_dataframe(spark: Any, access: Any, op: Any, kinds: dict, state_name: str | None, sample: int = 1000) -> Any:
    """Operator ``op``'s keyed state as a DataFrame, read by one Spark task per parallel
    instance (the driver reads only a sample of rows to choose the column types)."""
    from pyspark.sql.types import DoubleType, StructField, StructType

    with_name = state_name is None
    columns = list(COLUMNS) if with_name else list(COLUMNS[1:])
    offset = 0 if with_name else 1
    read = _subtask_reader(access, op)
    rdd = spark.sparkContext.parallelize(op.subtasks, max(1, len(op.subtasks))).flatMap(
        lambda sub: ([_spark_value(v) for v in r[offset:]] for r in state_rows(read(sub), kinds, state_name))
    )
    head = rdd.take(sample)
    fields, convert = [], []
    for i, name in enumerate(columns):
        t, as_text = _column_type([r[i] for r in head])
        convert.append("text" if as_text else "float" if isinstance(t, DoubleType) else None)
        fields.append(StructField(name, t, True))

    def typed(r: list) -> tuple:
        return tuple(
            v if v is None or c is None else repr(v) if c == "text" else float(v)
            for v, c in zip(r, convert, strict=True)
        )

    return spark.createDataFrame(rdd.map(typed), StructType(fields))


def keyed_state_tables(spark: Any, access: Any, op: Any) -> dict:
    """``{state name: {key: value}}`` of operator ``op``, read by Spark tasks and merged here
    (the caller asked for the state in this process)."""
    read = _subtask_reader(access, op)
    merged: dict = {}
    for tables in spark.sparkContext.parallelize(op.subtasks, max(1, len(op.subtasks))).map(read).toLocalIterator():
        for name, table in tables.items():
            merged.setdefault(name, {}).update(table)
    return merged
