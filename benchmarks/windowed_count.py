"""Seed 000's windowed count: flowpoint vs Spark Structured Streaming, in one run.

Workload: ``--events`` (default 10,000,000) click events of ``ClickEventGenerator`` (5 ms apart,
each lagging a random 0..``--source-lateness-millis`` behind, default 30 s), counted per
1-minute tumbling event-time window and (channel, behavior), with a bounded out-of-orderness
watermark of 50 s; Spark ``local[2]``, 2 partitions for the keyed/shuffled stage on both sides.
With a source lateness under the 50 s bound no event is late, so every engine must produce the
exact counts (checked against a numpy computation of the same events).

Data path, the same for every engine: the events are written once, untimed, as parquet files, two
per epoch (``epoch-<e>-split-<s>.parquet``: epoch ``e``'s events in two contiguous halves, so the
two halves of an epoch are close in event time, as two partitions of a live stream would be).

* **Spark streaming** (the baseline the ratio is taken against):
  ``readStream.parquet(dir)`` with ``maxFilesPerTrigger=2`` (one epoch per micro-batch,
  ``trigger(availableNow=True)``), ``withWatermark("ts", "50 seconds")``,
  ``groupBy(window("ts", "1 minute"), "channel", "behavior").count()``, output mode ``append``
  (a window is written once the watermark passes its end, as Flink's event-time trigger fires),
  parquet sink; default (HDFS-backed, in-memory) state store. ``ts`` is converted with
  ``timestamp_millis``. Spark does not move its watermark to +infinity at the end of an
  ``availableNow`` run, so the last window or two per key are never written: we report how many
  events its written windows count.
* **Spark batch** (a second baseline, best of 3): ``read.parquet(dir)``, the same ``groupBy``, noop
  sink. No state, no watermark, no micro-batches: the floor for this aggregation on this machine.
* **flowpoint**: the same parquet files through a small source defined here (split ``s`` reads
  the files ``epoch-*-split-s`` in order; an epoch takes one file per split), the
  ``WatermarkStrategy`` on field ``ts``, ``key_by(["channel", "behavior"])`` (field names: the
  columnar exchange), a 1-minute
  ``TumblingEventTimeWindows`` and the window function of seed 000's example
  (``--function process``: a ``ProcessWindowFunction`` counting the buffered elements;
  ``--function aggregate``: an ``AggregateFunction`` count with that ``ProcessWindowFunction``
  on top, which keeps one number per window), ``CollectSink``.

Timed: each engine's job from submission to the end (Spark: ``start()`` .. ``awaitTermination()``;
flowpoint: ``env.execute()``), not the writing of the input files nor the checks. Before the
measured runs every engine runs once on 200,000 events (JVM code generation, Python workers),
flowpoint again right before each of its measured runs (Spark stops Python workers that were idle
for a minute, as they are during the Spark runs).

    python benchmarks/windowed_count.py [--events 10000000] [--epochs 20] [--skip-flowpoint]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flowpoint import (  # noqa: E402
    ClickEventGenerator,
    CollectSink,
    Duration,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    WatermarkStrategy,
)
from flowpoint.api.aggregates import Aggregates  # noqa: E402
from flowpoint.api.windows import TumblingEventTimeWindows  # noqa: E402
from flowpoint.connectors.source import Source, SourceReader, SourceSplit, SplitPlan  # noqa: E402

WINDOW_MS = 60_000
BOUND_MS = 50_000
EVENT_SCHEMA_DDL = "ts LONG, channel STRING, id STRING, behavior STRING"


# -- the input -------------------------------------------------------------------------------


def write_events(path: str, n_events: int, epochs: int, lateness_ms: int) -> str:
    """Events ``0 .. n_events-1`` as ``2 * epochs`` parquet files; reused when already there."""
    marker = os.path.join(path, "_DONE")
    tag = f"{n_events} {epochs} {lateness_ms}"
    if os.path.exists(marker):
        with open(marker) as f:
            if f.read() == tag:
                return path
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    gen = ClickEventGenerator(max_lateness_ms=lateness_ms)
    bounds = [n_events * e // epochs for e in range(epochs + 1)]
    for e in range(epochs):
        a, b = bounds[e], bounds[e + 1]
        for s, (lo, hi) in enumerate(((a, (a + b) // 2), ((a + b) // 2, b))):
            name = f"epoch-{e:05d}-split-{s}.parquet"
            tmp = os.path.join(path, "." + name + ".tmp")
            pq.write_table(pa.Table.from_batches([gen.batch(lo, hi)]), tmp)
            os.replace(tmp, os.path.join(path, name))
            # the streaming file source takes files oldest first: make that the epoch order
            t = 1_600_000_000 + e
            os.utime(os.path.join(path, name), (t, t))
    with open(marker, "w") as f:
        f.write(tag)
    return path


def expected_counts(path: str) -> dict[tuple[int, str, str], int]:
    """(window start, channel, behavior) -> count, straight from the files (numpy)."""
    table = pq.read_table(path, columns=["ts", "channel", "behavior"])
    ts = table.column("ts").to_numpy()
    start = ts - ts % WINDOW_MS
    ch = table.column("channel").to_numpy(zero_copy_only=False)
    be = table.column("behavior").to_numpy(zero_copy_only=False)
    import pandas as pd

    df = pd.DataFrame({"start": start, "channel": ch, "behavior": be})
    counts = df.groupby(["start", "channel", "behavior"]).size()
    return {(int(s), c, b): int(n) for (s, c, b), n in counts.items()}


# -- Spark -----------------------------------------------------------------------------------


def make_session(master: str = "local[2]", partitions: int = 2) -> Any:
    from flowpoint.spark.session import get_spark_session

    spark = get_spark_session(master, "windowed-count-bench")
    spark.conf.set("spark.sql.shuffle.partitions", str(partitions))
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    spark.conf.set("spark.sql.streaming.numRecentProgressUpdates", "10000")  # every micro-batch in recentProgress
    return spark


def measure_spark_streaming(spark: Any, data: str, n_events: int, epochs: int, workdir: str, expected: dict) -> dict:
    from pyspark.sql import functions as F

    out = os.path.join(workdir, f"spark-out-{time.time_ns()}")
    checkpoint = os.path.join(workdir, f"spark-ckpt-{time.time_ns()}")
    events = (
        spark.readStream.schema(EVENT_SCHEMA_DDL)
        .option("maxFilesPerTrigger", 2)
        .parquet(data)
        .withColumn("ts", F.timestamp_millis("ts"))
    )
    counts = (
        events.withWatermark("ts", "50 seconds")
        .groupBy(F.window("ts", "1 minute"), "channel", "behavior")
        .count()
        .select(
            F.unix_millis(F.col("window.start")).alias("start"),
            F.unix_millis(F.col("window.end")).alias("end"),
            "channel",
            "behavior",
            "count",
        )
    )
    query = (
        counts.writeStream.format("parquet")
        .outputMode("append")
        .option("path", out)
        .option("checkpointLocation", checkpoint)
        .trigger(availableNow=True)
    )
    t0 = time.perf_counter()
    q = query.start()
    q.awaitTermination()
    seconds = time.perf_counter() - t0
    if q.exception() is not None:
        msg = f"Spark query failed: {q.exception()}"
        raise RuntimeError(msg)
    progress = [p for p in q.recentProgress if p.get("numInputRows", 0) > 0]
    rows = spark.read.parquet(out).collect()
    got = {(r["start"], r["channel"], r["behavior"]): r["count"] for r in rows}
    wrong = {k: (v, expected.get(k)) for k, v in got.items() if expected.get(k) != v}
    if wrong or len(got) != len(rows):
        msg = f"Spark wrote wrong or repeated windows: {list(wrong.items())[:5]}"
        raise RuntimeError(msg)
    counted = sum(got.values())
    return {
        "engine": "spark-streaming",
        "events": n_events,
        "seconds": seconds,
        "events_per_s": n_events / seconds,
        "micro_batches": len(progress),
        "windows_written": len(got),
        "windows_expected": len(expected),
        "events_counted": counted,
        "batch_ms": [int(p["durationMs"]["triggerExecution"]) for p in progress],
        "load_avg_1m": os.getloadavg()[0],
    }


def measure_spark_batch(spark: Any, data: str, n_events: int, expected: dict, repeats: int = 3) -> dict:
    from pyspark.sql import functions as F

    def query():
        return (
            spark.read.schema(EVENT_SCHEMA_DDL)
            .parquet(data)
            .withColumn("ts", F.timestamp_millis("ts"))
            .groupBy(F.window("ts", "1 minute"), "channel", "behavior")
            .count()
        )

    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        query().write.format("noop").mode("overwrite").save()
        times.append(time.perf_counter() - t0)
    total = query().agg(F.sum("count").alias("n"), F.count("*").alias("w")).collect()[0]
    if int(total["n"]) != n_events or int(total["w"]) != len(expected):
        msg = f"Spark batch counted {total['n']} events in {total['w']} windows"
        raise RuntimeError(msg)
    seconds = min(times)
    return {"engine": "spark-batch", "events": n_events, "seconds": seconds, "events_per_s": n_events / seconds,
            "runs_s": times, "load_avg_1m": os.getloadavg()[0]}


# -- flowpoint -------------------------------------------------------------------------------



class _OrderedParquetReader(SourceReader):
    def read(self, split: SourceSplit, spec: Any) -> Iterator[pa.RecordBatch]:
        for path, lo, hi in spec:
            table = pq.read_table(path).slice(lo, hi - lo)
            yield from table.to_batches(max_chunksize=16384)


class OrderedParquetSource(Source):
    """Split ``s`` reads the files ``epoch-*-split-<s>.parquet`` one after the other; its
    position is the number of records it has read."""

    def __init__(self, path: str, splits: int = 2):
        from flowpoint.connectors.clicks import CLICK_EVENT_TYPE

        self.output_type = CLICK_EVENT_TYPE
        self.files = [
            sorted(os.path.join(path, f) for f in os.listdir(path) if f.endswith(f"-split-{s}.parquet"))
            for s in range(splits)
        ]
        self.sizes = [[pq.ParquetFile(f).metadata.num_rows for f in files] for files in self.files]

    def is_bounded(self) -> bool:
        return True

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [SourceSplit(f"ordered-{s}", s, 0) for s in range(len(self.files))]

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        total = sum(self.sizes[split.payload])
        end = min(total, position + budget)
        return SplitPlan(end, end - position, end >= total)

    def read_spec(self, split: SourceSplit, start: int, end: int) -> Any:
        spec, offset = [], 0
        for path, size in zip(self.files[split.payload], self.sizes[split.payload], strict=True):
            lo, hi = max(start, offset), min(end, offset + size)
            if lo < hi:
                spec.append((path, lo - offset, hi - offset))
            offset += size
        return spec

    def create_reader(self) -> SourceReader:
        return _OrderedParquetReader()


class CountElements(ProcessWindowFunction):
    """Seed 000's ``EventTimeWindowReduceFunction``: counts the window's buffered elements."""

    def process(self, key, context, elements):
        w = context.window()
        yield w.start, w.end, key[0], key[1], sum(1 for _ in elements)


class EmitCount(ProcessWindowFunction):
    """On top of ``Aggregates.count()``: the window's one accumulated count."""

    def process(self, key, context, counts):
        w = context.window()
        yield w.start, w.end, key[0], key[1], next(iter(counts))


def build_job(spark: Any, source: Source, epoch_records: int, function: str, config: dict | None = None) -> tuple[Any, Any]:
    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.progress.interval": -1, "parallelism.default": 2, **(config or {})}, spark_session=spark
    )
    env.set_epoch_max_records(epoch_records)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS)).with_timestamp_assigner("ts")
    windowed = (
        env.from_source(source, strategy, "clicks")
        .key_by(["channel", "behavior"])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(WINDOW_MS)))
    )
    if function == "process":
        out = windowed.process(CountElements())
    else:
        out = windowed.aggregate(Aggregates.count(), window_function=EmitCount())
    out.sink_to(sink := CollectSink())
    return env, sink


def measure_flowpoint(spark: Any, data: str, n_events: int, epochs: int, expected: dict, function: str, config: dict | None = None) -> dict:
    env, sink = build_job(spark, OrderedParquetSource(data), n_events // epochs, function, config)
    t0 = time.perf_counter()
    result = env.execute(f"windowed-count-{function}")
    seconds = time.perf_counter() - t0
    got: dict = {}
    for start, _end, channel, behavior, n in sink.results:
        k = (start, channel, behavior)
        if k in got:
            msg = f"flowpoint fired window {k} twice"
            raise RuntimeError(msg)
        got[k] = n
    if got != expected:
        diff = [(k, got.get(k), expected.get(k)) for k in set(got) | set(expected) if got.get(k) != expected.get(k)]
        msg = f"flowpoint counts differ from the expected ones in {len(diff)} windows: {diff[:5]}"
        raise RuntimeError(msg)
    return {"engine": f"flowpoint-{function}", "events": n_events, "seconds": seconds, "events_per_s": n_events / seconds,
            "epochs": result.epochs, "windows": len(got), "load_avg_1m": os.getloadavg()[0]}


# -- main ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--epochs", type=int, default=20, help="epochs = Spark micro-batches")
    parser.add_argument("--source-lateness-millis", type=int, default=30_000)
    parser.add_argument("--function", choices=["process", "aggregate", "both"], default="both")
    parser.add_argument("--skip-flowpoint", action="store_true")
    parser.add_argument("--no-warmup", dest="warmup", action="store_false")
    parser.add_argument("--workdir", default=None)
    parser.add_argument("--results", default=os.path.join(HERE, "results", "windowed_count.json"))
    args = parser.parse_args()

    workdir = args.workdir or tempfile.mkdtemp(prefix="windowed-count-")
    spark = make_session()
    small = small_expected = None
    if args.warmup:
        # JVM code generation, Spark's streaming machinery and flowpoint's Python workers start
        # on a small data set first, so that no engine pays its start-up in the measured run
        small = write_events(os.path.join(workdir, "warmup"), 200_000, 4, args.source_lateness_millis)
        small_expected = expected_counts(small)
        measure_spark_streaming(spark, small, 200_000, 4, workdir, small_expected)
        measure_spark_batch(spark, small, 200_000, small_expected, repeats=1)
        if not args.skip_flowpoint:
            measure_flowpoint(spark, small, 200_000, 4, small_expected, "aggregate")
    data = write_events(os.path.join(workdir, f"events-{args.events}-{args.epochs}-{args.source_lateness_millis}"),
                        args.events, args.epochs, args.source_lateness_millis)
    expected = expected_counts(data)
    rows = []
    try:
        rows.append(measure_spark_streaming(spark, data, args.events, args.epochs, workdir, expected))
        print(json.dumps(rows[-1]), flush=True)
        rows.append(measure_spark_batch(spark, data, args.events, expected))
        print(json.dumps(rows[-1]), flush=True)
        if not args.skip_flowpoint:
            functions = ["process", "aggregate"] if args.function == "both" else [args.function]
            for fn in functions:
                if args.warmup:
                    # again, right before: Spark stops Python workers idle for a minute (its
                    # PythonWorkerFactory), which the Spark runs above take
                    measure_flowpoint(spark, small, 200_000, 4, small_expected, fn)
                rows.append(measure_flowpoint(spark, data, args.events, args.epochs, expected, fn))
                print(json.dumps(rows[-1]), flush=True)
    finally:
        if args.workdir is None:
            shutil.rmtree(workdir, ignore_errors=True)
    streaming = rows[0]["events_per_s"]
    for r in rows:
        r["ratio_to_spark_streaming"] = r["events_per_s"] / streaming
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    print()
    print(f"{'engine':<22}{'seconds':>10}{'events/s':>14}{'/ Spark streaming':>20}")
    for r in rows:
        print(f"{r['engine']:<22}{r['seconds']:>10.1f}{r['events_per_s']:>14,.0f}{r['ratio_to_spark_streaming']:>20.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
