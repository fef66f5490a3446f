"""Baselines on plain Spark for the click-count benchmark.

* :func:`measure_tws` -- Spark Structured Streaming ``groupBy(...).transformWithStateInPandas``
  with a per-key count held in a ``ValueState`` (outputMode "Update", timeMode "None"), fed exactly
  ``epochs`` micro-batches from parquet files (one file per trigger, ``availableNow``).
* :func:`measure_spark_native` -- a plain batch ``groupBy(...).count()`` over the same parquet files
  (JVM hash aggregation; no Python on the data path).

Events come from ``flowpoint.connectors.clicks.ClickEventGenerator`` so every engine counts the same
records. Keys: ``"id"`` (per-user counts) or ``"channel_behavior"`` (``channel`` x ``behavior``,
28 keys).

Requirements (PySpark 4.3): ``pandas``, ``pyarrow`` and ``protobuf>=6.33.5`` (the Python TWS worker
talks to the JVM state server with protobuf messages; pyspark does not declare it), and
``spark.sql.streaming.stateStore.providerClass`` set to the RocksDB provider before the query
starts (:func:`measure_tws` sets it on the session).

Run: ``cd /work/main && python benchmarks/baselines/spark_tws.py`` (prints JSON).
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

_REPO_ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
if _REPO_ROOT not in sys.path:
    sys.path.insert(0, _REPO_ROOT)

import pandas as pd  # noqa: E402
import pyarrow as pa  # noqa: E402
import pyarrow.parquet as pq  # noqa: E402

ROCKSDB_PROVIDER = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
EVENT_SCHEMA_DDL = "ts LONG, channel STRING, id STRING, behavior STRING"
KEYS: dict[str, tuple[str, ...]] = {
    "id": ("id",),
    "channel_behavior": ("channel", "behavior"),
}


def key_columns(key: str) -> tuple[str, ...]:
    try:
        return KEYS[key]
    except KeyError:
        msg = f"unknown key {key!r}; expected one of {sorted(KEYS)}"
        raise ValueError(msg) from None


def write_events(path: str, n_events: int, num_users: int | None, epochs: int) -> str:
    """Write events ``0 .. n_events-1`` as ``epochs`` parquet files under ``path`` (one per
    micro-batch). Reuses ``path`` if it already holds the same data set (a ``_DONE`` marker)."""
    from flowpoint.connectors.clicks import ClickEventGenerator

    marker = os.path.join(path, "_DONE")
    tag = f"{n_events} {num_users} {epochs}"
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read() == tag:
                return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    gen = ClickEventGenerator(num_users=num_users)
    bounds = [n_events * e // epochs for e in range(epochs + 1)]
    for e in range(epochs):
        batch = gen.batch(bounds[e], bounds[e + 1])
        # Hidden temp name + rename: the file source never sees a half-written file.
        tmp = os.path.join(path, f".part-{e:05d}.parquet.tmp")
        pq.write_table(pa.Table.from_batches([batch]), tmp)
        os.replace(tmp, os.path.join(path, f"part-{e:05d}.parquet"))
        # FileStreamSource orders files by modification time; make the order explicit.
        t = 1_600_000_000 + e
        os.utime(os.path.join(path, f"part-{e:05d}.parquet"), (t, t))
    with open(marker, "w") as f:
        f.write(tag)
    return path


def _data_dir(workdir: str, n_events: int, num_users: int | None, epochs: int) -> str:
    return os.path.join(workdir, f"events-n{n_events}-u{num_users}-e{epochs}")


# --------------------------------------------------------------------------------------------
# transformWithStateInPandas
# --------------------------------------------------------------------------------------------


def _make_processor(cols: tuple[str, ...]) -> Any:
    from pyspark.sql.streaming import StatefulProcessor, StatefulProcessorHandle

    class CountProcessor(StatefulProcessor):
        """Per-key event count in a ValueState; emits (key..., count) for each updated key."""

        def init(self, handle: StatefulProcessorHandle) -> None:
            self.count_state = handle.getValueState("count", "value LONG")

        def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
            n = 0
            for pdf in rows:
                n += len(pdf)
            current = self.count_state.get() if self.count_state.exists() else None
            total = (current[0] if current is not None else 0) + n
            self.count_state.update((total,))
            out = {c: [k] for c, k in zip(cols, key, strict=True)}
            out["count"] = [total]
            yield pd.DataFrame(out)

        def close(self) -> None:
            pass

    return CountProcessor()


def _tws_state_total(spark: Any, checkpoint: str) -> tuple[int, int]:
    """(sum of counts, number of keys) read back from the TWS ValueState via the state data source."""
    from pyspark.sql import functions as F

    df = spark.read.format("statestore").option("stateVarName", "count").load(checkpoint)
    row = df.agg(F.sum("value.value").alias("s"), F.count("*").alias("k")).collect()[0]
    return int(row["s"] or 0), int(row["k"])


def measure_tws(
    spark: Any,
    n_events: int,
    num_users: int | None,
    key: str,
    epochs: int = 10,
    workdir: str | None = None,
    *,
    shuffle_partitions: int | None = None,
    verify: bool = True,
) -> dict:
    """Time Spark's ``groupBy(key cols).transformWithStateInPandas`` per-key count over ``n_events``
    click events fed as exactly ``epochs`` micro-batches.

    Only the streaming query (``start()`` .. ``awaitTermination()``) is timed; writing the parquet
    input and the correctness check are not. ``shuffle_partitions`` (default: the session's
    ``spark.sql.shuffle.partitions``) fixes the number of state partitions of the new checkpoint.
    With ``verify`` the final state is read back (``statestore`` data source) and its counts must
    sum to ``n_events``.
    """
    cols = key_columns(key)
    own_workdir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="tws-bench-")
    try:
        data = write_events(_data_dir(workdir, n_events, num_users, epochs), n_events, num_users, epochs)
        checkpoint = os.path.join(workdir, f"ckpt-tws-{key}-{time.time_ns()}")

        conf_backup = {
            k: spark.conf.get(k, None)
            for k in ("spark.sql.streaming.stateStore.providerClass", "spark.sql.shuffle.partitions")
        }
        spark.conf.set("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        if shuffle_partitions is not None:
            spark.conf.set("spark.sql.shuffle.partitions", str(shuffle_partitions))
        partitions = int(spark.conf.get("spark.sql.shuffle.partitions"))
        out_schema = ", ".join(f"{c} STRING" for c in cols) + ", count LONG"
        try:
            stream = (
                spark.readStream.schema(EVENT_SCHEMA_DDL)
                .option("maxFilesPerTrigger", 1)
                .parquet(data)
            )
            counted = stream.groupBy(*cols).transformWithStateInPandas(
                statefulProcessor=_make_processor(cols),
                outputStructType=out_schema,
                outputMode="Update",
                timeMode="None",
            )
            writer = (
                counted.writeStream.format("noop")
                .outputMode("update")
                .option("checkpointLocation", checkpoint)
                .trigger(availableNow=True)
            )
            t0 = time.perf_counter()
            query = writer.start()
            query.awaitTermination()
            seconds = time.perf_counter() - t0
            if query.exception() is not None:
                msg = f"TWS query failed: {query.exception()}"
                raise RuntimeError(msg)
            progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
        finally:
            for k, v in conf_backup.items():
                if v is None:
                    spark.conf.unset(k)
                else:
                    spark.conf.set(k, v)

        batch_ms = [int(p["durationMs"]["triggerExecution"]) for p in progress]
        batch_rows = [int(p["numInputRows"]) for p in progress]
        result: dict[str, Any] = {
            "engine": "spark-tws",
            "key": key,
            "num_users": num_users,
            "events": n_events,
            "load_avg_1m": os.getloadavg()[0],
            "seconds": seconds,
            "events_per_s": n_events / seconds,
            "epochs": len(progress),
            "shuffle_partitions": partitions,
            "batch_ms": batch_ms,
        }
        if len(progress) > 1:
            # Rate without the first micro-batch (JVM/Python worker warm-up, RocksDB instance creation).
            rest_ms = sum(batch_ms[1:])
            result["steady_events_per_s"] = sum(batch_rows[1:]) / (rest_ms / 1000) if rest_ms else None
        if len(progress) != epochs:
            msg = f"expected {epochs} micro-batches with data, got {len(progress)}"
            raise RuntimeError(msg)
        if sum(batch_rows) != n_events:
            msg = f"query read {sum(batch_rows)} rows, expected {n_events}"
            raise RuntimeError(msg)
        if verify:
            total, nkeys = _tws_state_total(spark, checkpoint)
            if total != n_events:
                msg = f"TWS counts sum to {total}, expected {n_events}"
                raise RuntimeError(msg)
            result["keys"] = nkeys
            result["verified"] = True
        return result
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


# --------------------------------------------------------------------------------------------
# plain batch groupBy().count()
# --------------------------------------------------------------------------------------------


def measure_spark_native(
    spark: Any,
    n_events: int,
    key: str,
    num_users: int | None = 200_000,
    epochs: int = 10,
    workdir: str | None = None,
    *,
    repeats: int = 3,
    verify: bool = True,
) -> dict:
    """Time a plain batch ``spark.read.parquet(dir).groupBy(key cols).count()`` (written to the noop
    sink) over the same parquet files as :func:`measure_tws`. Best of ``repeats`` runs."""
    from pyspark.sql import functions as F

    cols = key_columns(key)
    own_workdir = workdir is None
    workdir = workdir or tempfile.mkdtemp(prefix="native-bench-")
    try:
        data = write_events(_data_dir(workdir, n_events, num_users, epochs), n_events, num_users, epochs)
        times = []
        for _ in range(max(1, repeats)):
            counted = spark.read.schema(EVENT_SCHEMA_DDL).parquet(data).groupBy(*cols).count()
            t0 = time.perf_counter()
            counted.write.format("noop").mode("overwrite").save()
            times.append(time.perf_counter() - t0)
        seconds = min(times)
        result: dict[str, Any] = {
            "engine": "spark-native",
            "key": key,
            "num_users": num_users,
            "events": n_events,
            "load_avg_1m": os.getloadavg()[0],
            "seconds": seconds,
            "events_per_s": n_events / seconds,
            "runs_s": times,
        }
        if verify:
            counted = spark.read.schema(EVENT_SCHEMA_DDL).parquet(data).groupBy(*cols).count()
            row = counted.agg(F.sum("count").alias("s"), F.count("*").alias("k")).collect()[0]
            if int(row["s"]) != n_events:
                msg = f"native counts sum to {row['s']}, expected {n_events}"
                raise RuntimeError(msg)
            result["keys"] = int(row["k"])
            result["verified"] = True
        return result
    finally:
        if own_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def make_session(master: str = "local[2]", shuffle_partitions: int = 2) -> Any:
    from pyspark.sql import SparkSession

    return (
        SparkSession.builder.master(master)
        .appName("flowpoint-baselines")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        .config("spark.sql.streaming.stateStore.providerClass", ROCKSDB_PROVIDER)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.adaptive.enabled", "false")
        .getOrCreate()
    )


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--master", default="local[2]")
    p.add_argument("--shuffle-partitions", type=int, default=2)
    p.add_argument("--epochs", type=int, default=10)
    p.add_argument("--n-user", type=int, default=20_000, help="events for the per-user (id) workload")
    p.add_argument("--n-small", type=int, default=200_000, help="events for the channel_behavior workload")
    p.add_argument("--num-users", type=int, default=200_000)
    p.add_argument("--workdir", default=None)
    args = p.parse_args(argv)

    spark = make_session(args.master, args.shuffle_partitions)
    spark.sparkContext.setLogLevel("ERROR")
    workdir = args.workdir or tempfile.mkdtemp(prefix="baselines-")
    results = []
    try:
        for key, n in (("id", args.n_user), ("channel_behavior", args.n_small)):
            for fn in (measure_tws, measure_spark_native):
                if fn is measure_tws:
                    r = fn(spark, n, args.num_users, key, epochs=args.epochs, workdir=workdir)
                else:
                    r = fn(spark, n, key, num_users=args.num_users, epochs=args.epochs, workdir=workdir)
                r["master"] = args.master
                print(json.dumps(r), flush=True)
                results.append(r)
    finally:
        spark.stop()
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
