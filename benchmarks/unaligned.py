"""Checkpoints under backpressure: aligned against unaligned (issue 27).

One continuous job per mode, in this process (``local[2]``, parallelism 2, checkpoints every
``--interval`` ms to a local ``file://`` directory): a rate-limited source of ``--rate``
records/s, a keyed count, and a sink that takes ``--sink-ms`` ms per record, a tenth of the
source's rate by default, so every channel in front of it is full (backpressure) for the whole
run. The source is held back by backpressure for about ``--seconds`` s, then the queues drain;
the table shows the checkpoints completed while it ran
(the final checkpoint of a bounded job waits for the queues to drain in both modes, as Flink's
does, and is left out): how many, their end-to-end duration (trigger to completion: p50 and
max) and the records in flight each stored (unaligned only).

    python benchmarks/unaligned.py [--rate 2000] [--sink-ms 10] [--seconds 20] [--interval 1000]
        [--modes aligned,unaligned,timeout]

``timeout`` is unaligned with ``aligned-checkpoint-timeout`` of ``--interval`` / 2.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flowpoint import (  # noqa: E402
    DataGeneratorSource,
    Duration,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flowpoint.api.functions import SinkFunction  # noqa: E402


def record(i):
    return (f"user-{i % 1000}", i)


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield value[0], n


class SlowSink(SinkFunction):
    def __init__(self, ms: float):
        self.ms = ms

    def invoke(self, value, context=None):
        time.sleep(self.ms / 1000)


def run(spark, mode: str, args, root: str) -> dict:
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "execution.runtime": "continuous", "execution.progress.interval": -1, "state.working.dir": os.path.join(root, mode, "w"),
            "state.checkpoints.dir": f"file://{root}/{mode}/ck",
        },
        spark_session=spark,
    )
    env.set_parallelism(2)
    env.enable_checkpointing(args.interval)
    config = env.get_checkpoint_config()
    if mode in ("unaligned", "timeout"):
        config.enable_unaligned_checkpoints()
    if mode == "timeout":
        config.set_alignment_timeout(Duration.of_millis(args.interval // 2))
    # what the sink takes in that time, plus about what the channels hold in flight (up to
    # buffers-per-channel frames of buffer-max-batches batches each): the source is held back
    # by backpressure for about --seconds before its last records are queued
    count = int(2 * 1000 / args.sink_ms * args.seconds) + args.in_flight
    (
        env.from_source(DataGeneratorSource(record, count=count, rate_limit_per_second=args.rate), source_name="gen").uid("gen")
        .key_by(lambda v: v[0]).process(Count()).uid("count")
        .add_sink(SlowSink(args.sink_ms)).uid("sink")
    )
    started = time.monotonic()
    result = env.execute(f"backpressure, {mode}")
    wall = time.monotonic() - started
    done = [s for s in result.get_checkpoint_stats() if s.status == "COMPLETED" and s.kind == "checkpoint"][:-1]
    ms = sorted(s.end_to_end_ms for s in done)
    return {
        "mode": mode, "checkpoints": len(done), "p50": statistics.median(ms) if ms else float("nan"), "max": max(ms, default=float("nan")),
        "in_flight_kb": statistics.median(s.channel_state_size for s in done) / 1024 if done else 0.0, "wall": wall,
        "failed": sum(1 for s in result.get_checkpoint_stats() if s.status == "FAILED"),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--rate", type=int, default=2000)
    p.add_argument("--sink-ms", type=float, default=10.0, help="ms per record in each sink subtask (default: a tenth of the rate at parallelism 2)")
    p.add_argument("--seconds", type=int, default=20)
    p.add_argument("--interval", type=int, default=1000)
    p.add_argument("--modes", default="aligned,unaligned,timeout")
    p.add_argument("--in-flight", type=int, default=5000, help="records added for what the queues hold once the source has read everything")
    args = p.parse_args()
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    sink_rate = 2 * 1000 / args.sink_ms
    print(f"source {args.rate:,} records/s for {args.seconds} s, sink {sink_rate:,.0f} records/s (parallelism 2), checkpoint interval {args.interval} ms")
    rows = []
    with tempfile.TemporaryDirectory(prefix="flowpoint-unaligned-") as root:
        for mode in args.modes.split(","):
            rows.append(run(spark, mode, args, root))
    print(f"{'mode':<10} {'checkpoints':>11} {'p50 ms':>8} {'max ms':>8} {'in flight KB (p50)':>19} {'failed':>6} {'job s':>6}")
    for r in rows:
        print(f"{r['mode']:<10} {r['checkpoints']:>11} {r['p50']:>8.0f} {r['max']:>8.0f} {r['in_flight_kb']:>19.1f} {r['failed']:>6} {r['wall']:>6.1f}")


if __name__ == "__main__":
    main()
