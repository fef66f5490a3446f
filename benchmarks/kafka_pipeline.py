"""Seed 000's windowed count with Kafka in and out, against the same pipeline on files.

Workload: ``--events`` (default 2,000,000) click events of ``ClickEventGenerator`` (5 ms apart,
lagging up to 30 s), as text lines ``ts,channel,id,behavior``, counted per 1-minute tumbling
event-time window and (channel, behavior) with a 50 s bounded out-of-orderness watermark. No
event is late, so every run must give the exact counts (checked against pandas).

The same lines are written once, untimed, to two places:

* a Kafka topic of 4 partitions on the embedded broker (Tansu, memory storage; or
  ``--bootstrap-servers``), event ``i`` in partition ``i % 4``, its event time as the Kafka
  timestamp;
* 40 text files, ``chunk-<c>-part-<p>.txt``: partition ``p``'s lines cut into 10 chunks in
  order (so Spark's file stream has micro-batches; modification times in chunk order).

Runs (``local[2]``, parallelism 2, ``execution.epoch.max-records`` = events / 10, checkpoints
every 2 s, the same job otherwise: a timestamp assigner parsing the line, ``map`` to
``(channel, behavior)``, ``key_by``, the window, ``Aggregates.count()`` with a
``ProcessWindowFunction`` emitting ``start, end, channel, behavior, count`` lines):

* **flowpoint files**: ``FileSource`` text lines over the 40 files -> ``FileSink`` (part files
  committed on checkpoints). The baseline of the target (Kafka >= 70% of it).
* **flowpoint Kafka EXACTLY_ONCE**: ``KafkaSource`` (bounded at the topic's end) -> ``KafkaSink``
  with ``DeliveryGuarantee.EXACTLY_ONCE`` (a Kafka transaction per completed checkpoint).
* **flowpoint Kafka AT_LEAST_ONCE**: the same with ``AT_LEAST_ONCE`` (records produced by the
  tasks, flushed at every epoch's end).
* **Spark streaming, files**: Spark has no Kafka connector in the PySpark wheel (its jars cannot
  be fetched here), so Spark reads the same 40 text files: ``readStream.text`` with
  ``maxFilesPerTrigger=4``, ``withWatermark(50 s)``, the same ``groupBy(window, channel,
  behavior).count()``, append mode, ``trigger(availableNow=True)``, parquet sink. (Spark does not
  move its watermark to the end at the end of an ``availableNow`` run, so its last windows are
  never written; it is timed all the same.)

Timed: each job from submission to its end (flowpoint: ``env.execute()``, which includes the
sink's last commit), not writing the input or checking the output. Every run goes once on a
small input first (JVM and Python workers warm), then ``--reps`` rounds alternate the engines;
the table gives each engine's best rate and the per-round ratios against flowpoint files.

    python benchmarks/kafka_pipeline.py [--events 2000000] [--reps 2] [--bootstrap-servers h:p]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flowpoint import (  # noqa: E402
    ClickEventGenerator,
    DeliveryGuarantee,
    Duration,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    ProcessWindowFunction,
    SimpleStringSchema,
    StreamExecutionEnvironment,
    TimestampAssigner,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)
from flowpoint.api.aggregates import Aggregates  # noqa: E402
from flowpoint.connectors.file_sink import Encoder, FileSink  # noqa: E402
from flowpoint.connectors.files import FileSource, StreamFormat  # noqa: E402

WINDOW_MS = 60_000
BOUND_MS = 50_000
PARTITIONS = 4
CHUNKS = 10


# -- the input -------------------------------------------------------------------------------


def event_lines(n: int, lateness_ms: int) -> tuple[list[str], list[int]]:
    b = ClickEventGenerator(max_lateness_ms=lateness_ms).batch(0, n).to_pydict()
    lines = [f"{t},{c},{u},{x}" for t, c, u, x in zip(b["ts"], b["channel"], b["id"], b["behavior"], strict=False)]
    return lines, [int(t) for t in b["ts"]]


def expected_counts(lines: list[str]) -> dict[tuple[int, str, str], int]:
    import pandas as pd

    parts = [line.split(",") for line in lines]
    df = pd.DataFrame({"ts": [int(p[0]) for p in parts], "channel": [p[1] for p in parts], "behavior": [p[3] for p in parts]})
    df["start"] = df["ts"] // WINDOW_MS * WINDOW_MS
    return {(int(s), c, b): int(n) for (s, c, b), n in df.groupby(["start", "channel", "behavior"]).size().items()}


def write_files(path: str, lines: list[str]) -> str:
    os.makedirs(path)
    per_part = [lines[p::PARTITIONS] for p in range(PARTITIONS)]
    for c in range(CHUNKS):
        for p, part in enumerate(per_part):
            lo, hi = len(part) * c // CHUNKS, len(part) * (c + 1) // CHUNKS
            name = os.path.join(path, f"chunk-{c:02d}-part-{p}.txt")
            with open(name, "w", encoding="utf-8") as f:
                f.write("\n".join(part[lo:hi]) + "\n")
            t = 1_600_000_000 + c
            os.utime(name, (t, t))
    return path


def produce(bootstrap: str, topic: str, lines: list[str], stamps: list[int]) -> None:
    from confluent_kafka import Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    for f in admin.create_topics([NewTopic(topic, num_partitions=PARTITIONS, replication_factor=1)]).values():
        f.result(30)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10_000, "log_level": 2})
    for i, (line, ts) in enumerate(zip(lines, stamps, strict=False)):
        while True:
            try:
                producer.produce(topic, value=line.encode(), partition=i % PARTITIONS, timestamp=ts)
                break
            except BufferError:
                producer.poll(0.05)
    if producer.flush(120):
        msg = f"could not produce the events to {bootstrap}"
        raise SystemExit(msg)


def create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    for f in admin.create_topics([NewTopic(topic, num_partitions=partitions, replication_factor=1)]).values():
        f.result(30)


def read_topic(bootstrap: str, topic: str) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"bench-{uuid.uuid4().hex[:8]}",
                  "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 2})
    try:
        meta = c.list_topics(topic, timeout=10).topics[topic]
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in meta.partitions}
        c.assign([TopicPartition(topic, p, 0) for p, e in ends.items() if e > 0])
        out, idle = [], time.monotonic()
        while time.monotonic() - idle < 2.0:
            m = c.poll(0.2)
            if m is not None and not m.error():
                out.append(m.value().decode())
                idle = time.monotonic()
        return out
    finally:
        c.close()


# -- the flowpoint job -----------------------------------------------------------------------


class LineTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return int(value[: value.index(",")])


class EmitCount(ProcessWindowFunction):
    def process(self, key, context, counts):
        w = context.window()
        yield f"{w.start}\t{w.end}\t{key[0]}\t{key[1]}\t{next(iter(counts))}"


def _job(spark: Any, events: int, source: Any, sink: Any, name: str) -> float:
    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.progress.interval": -1, "parallelism.default": 2}, spark_session=spark)
    env.set_epoch_max_records(max(1_000, events // 10))
    env.enable_checkpointing(2_000)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(BOUND_MS)).with_timestamp_assigner(LineTime())
    (env.from_source(source, strategy, "clicks").uid("clicks")
     .map(lambda line: tuple(line.split(",")[1::2]), Types.TUPLE([Types.STRING(), Types.STRING()]))
     .key_by(lambda t: t)
     .window(TumblingEventTimeWindows.of(Duration.of_millis(WINDOW_MS)))
     .aggregate(Aggregates.count(), window_function=EmitCount(), output_type=Types.STRING()).uid("windows")
     .sink_to(sink).uid("sink"))
    t0 = time.perf_counter()
    env.execute(name)
    return time.perf_counter() - t0


def _check(engine: str, out_lines: list[str], expected: dict) -> None:
    got: dict = {}
    for line in out_lines:
        start, _end, channel, behavior, n = line.split("\t")
        k = (int(start), channel, behavior)
        if k in got:
            msg = f"{engine}: window {k} written twice"
            raise RuntimeError(msg)
        got[k] = int(n)
    if got != expected:
        diff = [(k, got.get(k), expected.get(k)) for k in set(got) | set(expected) if got.get(k) != expected.get(k)]
        msg = f"{engine}: counts differ in {len(diff)} windows: {diff[:5]}"
        raise RuntimeError(msg)


def run_files(spark: Any, events: int, data: str, workdir: str, expected: dict) -> float:
    out = os.path.join(workdir, f"fp-out-{uuid.uuid4().hex[:6]}")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), data).build()
    sink = FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()
    seconds = _job(spark, events, source, sink, "kafka-bench-files")
    lines = []
    for root, _, files in os.walk(out):
        for f in files:
            if not f.startswith((".", "_")):
                with open(os.path.join(root, f), encoding="utf-8") as fh:
                    lines += [ln.rstrip("\n") for ln in fh if ln.strip()]
    _check("flowpoint files", lines, expected)
    return seconds


def run_kafka(spark: Any, events: int, bootstrap: str, topic: str, guarantee: Any, expected: dict) -> float:
    out_topic = f"bench-out-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, out_topic, 2)
    source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
              .set_starting_offsets(KafkaOffsetsInitializer.earliest()).set_bounded(KafkaOffsetsInitializer.latest())
              .set_value_only_deserializer(SimpleStringSchema()).build())
    sink = (KafkaSink.builder().set_bootstrap_servers(bootstrap)
            .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(out_topic)
                                   .set_value_serialization_schema(SimpleStringSchema()).build())
            .set_delivery_guarantee(guarantee).set_transactional_id_prefix(out_topic).build())
    seconds = _job(spark, events, source, sink, f"kafka-bench-{guarantee.name}")
    _check(f"flowpoint Kafka {guarantee.name}", read_topic(bootstrap, out_topic), expected)
    return seconds


def run_spark_streaming(spark: Any, data: str, workdir: str, expected: dict) -> float:
    from pyspark.sql import functions as F

    out = os.path.join(workdir, f"spark-out-{uuid.uuid4().hex[:6]}")
    lines = spark.readStream.option("maxFilesPerTrigger", PARTITIONS).text(data)
    parts = F.split("value", ",")
    counts = (
        lines.select(F.timestamp_millis(parts[0].cast("long")).alias("ts"), parts[1].alias("channel"), parts[3].alias("behavior"))
        .withWatermark("ts", "50 seconds")
        .groupBy(F.window("ts", "1 minute"), "channel", "behavior").count()
        .select(F.unix_millis(F.col("window.start")).alias("start"), "channel", "behavior", "count")
    )
    q = (counts.writeStream.format("parquet").outputMode("append").option("path", out)
         .option("checkpointLocation", os.path.join(workdir, f"spark-ck-{uuid.uuid4().hex[:6]}"))
         .trigger(availableNow=True))
    t0 = time.perf_counter()
    query = q.start()
    query.awaitTermination()
    seconds = time.perf_counter() - t0
    if query.exception() is not None:
        msg = f"Spark query failed: {query.exception()}"
        raise RuntimeError(msg)
    got = {(r["start"], r["channel"], r["behavior"]): r["count"] for r in spark.read.parquet(out).collect()}
    wrong = [k for k, v in got.items() if expected.get(k) != v]
    if wrong:
        msg = f"Spark wrote wrong windows: {wrong[:5]}"
        raise RuntimeError(msg)
    return seconds


# -- main ------------------------------------------------------------------------------------


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=2_000_000)
    parser.add_argument("--reps", type=int, default=2)
    parser.add_argument("--bootstrap-servers")
    parser.add_argument("--results", default=os.path.join(HERE, "results", "kafka_pipeline.json"))
    args = parser.parse_args()

    from flowpoint.spark.session import get_spark_session

    spark = get_spark_session("local[2]", "kafka-pipeline-bench")
    spark.conf.set("spark.sql.shuffle.partitions", "2")
    spark.conf.set("spark.sql.adaptive.enabled", "false")
    workdir = tempfile.mkdtemp(prefix="kafka-bench-")
    broker = None
    try:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from flowpoint.connectors.kafka import EmbeddedKafka

            broker = EmbeddedKafka()
            bootstrap = broker.start()
        inputs = {}
        for name, n in (("warmup", 100_000), ("main", args.events)):
            t0 = time.perf_counter()
            lines, stamps = event_lines(n, 30_000)
            topic = f"bench-in-{name}-{uuid.uuid4().hex[:6]}"
            produce(bootstrap, topic, lines, stamps)
            data = write_files(os.path.join(workdir, f"in-{name}"), lines)
            inputs[name] = (n, topic, data, expected_counts(lines))
            print(f"{name}: {n:,} events produced and written in {time.perf_counter() - t0:.1f} s", flush=True)
            del lines, stamps

        engines = {
            "flowpoint files": lambda n, topic, data, exp: run_files(spark, n, data, workdir, exp),
            "flowpoint Kafka EXACTLY_ONCE": lambda n, topic, data, exp: run_kafka(spark, n, bootstrap, topic, DeliveryGuarantee.EXACTLY_ONCE, exp),
            "flowpoint Kafka AT_LEAST_ONCE": lambda n, topic, data, exp: run_kafka(spark, n, bootstrap, topic, DeliveryGuarantee.AT_LEAST_ONCE, exp),
            "Spark streaming files": lambda n, topic, data, exp: run_spark_streaming(spark, data, workdir, exp),
        }
        for name, run in engines.items():
            s = run(*inputs["warmup"])
            print(f"warm-up {name}: {s:.1f} s", flush=True)
        n, topic, data, expected = inputs["main"]
        rounds: list[dict[str, float]] = []
        for rep in range(args.reps):
            order = list(engines) if rep % 2 == 0 else list(reversed(engines))
            rates = {}
            for name in order:
                s = engines[name](n, topic, data, expected)
                rates[name] = n / s
                print(f"round {rep + 1}: {name}: {s:.1f} s, {n / s:,.0f} events/s (load {os.getloadavg()[0]:.1f})", flush=True)
            rounds.append(rates)
    finally:
        if broker is not None:
            broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)

    base = "flowpoint files"
    rows = []
    for name in engines:
        best = max(r[name] for r in rounds)
        rows.append({"engine": name, "best_events_per_s": best,
                     "ratio_to_files_per_round": [r[name] / r[base] for r in rounds]})
    eo = max(r["flowpoint Kafka EXACTLY_ONCE"] / r["flowpoint Kafka AT_LEAST_ONCE"] for r in rounds)
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump({"args": vars(args), "rows": rows, "rounds": rounds, "eo_over_alo_best": eo}, f, indent=2)
    print(f"\n{args.events:,} events, local[2], parallelism 2, {args.reps} rounds")
    print(f"{'engine':<32}{'best events/s':>15}   / flowpoint files, per round")
    for r in rows:
        print(f"{r['engine']:<32}{r['best_events_per_s']:>15,.0f}   " + " ".join(f"{x:.2f}" for x in r["ratio_to_files_per_round"]))
    print(f"EXACTLY_ONCE / AT_LEAST_ONCE (best round): {eo:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
