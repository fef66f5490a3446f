"""Rows of task descriptions and results, and Spark jobs of one task per item, over DataFrames.

Every flowpoint DataFrame on Spark Connect has the columns ``dest int, edge bigint, blob
binary``. ``repartitionById(n, "dest")`` sends a row to partition ``dest`` exactly (Spark 4.1+),
as ``partitionBy(n, identity)`` does for the classic adapter's RDDs.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from flowpoint.errors import ConfigurationError
from flowpoint.pickles import dumps

SCHEMA = pa.schema([pa.field("dest", pa.int32()), pa.field("edge", pa.int64()), pa.field("blob", pa.binary())])
DDL = "dest int, edge bigint, blob binary"
SLICE = -2  # edge of a row holding a task's slice (and a source task's split reads)
ACK = -1  # edge of a row holding a TaskAck (or any task's answer)
BATCH_ROWS = 1024


def batches(rows: Iterable[tuple[int, int, bytes]]) -> Iterator[pa.RecordBatch]:
    """``(dest, edge, blob)`` rows as Arrow batches of :data:`SCHEMA`."""
    chunk: list[tuple[int, int, bytes]] = []
    for row in rows:
        chunk.append(row)
        if len(chunk) >= BATCH_ROWS:
            yield _batch(chunk)
            chunk = []
    if chunk:
        yield _batch(chunk)


def _batch(rows: list[tuple[int, int, bytes]]) -> pa.RecordBatch:
    dest, edge, blob = zip(*rows, strict=True)
    return pa.RecordBatch.from_arrays(
        [pa.array(dest, pa.int32()), pa.array(edge, pa.int64()), pa.array(blob, pa.binary())], schema=SCHEMA,
    )


def rows_of(batch: pa.RecordBatch) -> Iterator[tuple[int, int, bytes]]:
    return zip(batch.column(0).to_pylist(), batch.column(1).to_pylist(), batch.column(2).to_pylist(), strict=True)


def local_frame(spark: Any, rows: list[tuple[int, int, bytes]]) -> Any:
    """A DataFrame of these rows, built on this side (they travel inside the query's plan)."""
    table = pa.Table.from_batches(list(batches(rows)), schema=SCHEMA) if rows else SCHEMA.empty_table()
    return spark.createDataFrame(table)


def by_destination(df: Any, partitions: int) -> Any:
    """``df`` with row ``r`` in partition ``r.dest``."""
    return df.repartitionById(partitions, "dest")


def check_repartition_by_id(df_class: Any) -> None:
    if not hasattr(df_class, "repartitionById"):
        import pyspark

        msg = (
            f"flowpoint on Spark Connect places each task's rows with DataFrame.repartitionById, which PySpark "
            f"{pyspark.__version__} lacks (it came with Spark 4.1): use PySpark 4.1 or later, or a classic SparkSession"
        )
        raise ConfigurationError(msg)


def run_per_item(spark: Any, items: list, task: Callable[[Any], list]) -> list:
    """``task(item)`` for every item, one Spark task each (a DataFrame query of one
    ``mapInArrow``); the concatenated answers. Items and answers travel pickled."""
    if not items:
        return []
    frame = local_frame(spark, [(i, ACK, dumps(item)) for i, item in enumerate(items)])
    out = by_destination(frame, len(items)).mapInArrow(_per_item(task), DDL)
    answers: list = []
    for row in sorted(out.collect(), key=lambda r: r[0]):
        answers.extend(pickle.loads(row[2]))
    return answers


def _per_item(task: Callable[[Any], list]):
    def run(iterator: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        out = []
        for batch in iterator:
            for dest, _, blob in rows_of(batch):
                out.append((dest, ACK, dumps(list(task(pickle.loads(blob))))))
        yield from batches(out)

    return run
