"""Stateful jobs for the multi-host tests (tests/test_multihost.py), run as their own process:

    python cluster_state_job.py --master M --working-dir P --checkpoints URI [--s3-endpoint URL]
        --backend hashmap|rocksdb --job count|windows [-p N] [--events N] [--rate R]
        [--savepoint-dir URI] [--restore PATH] [--wait-for FILE]

prints one JSON line: the final keyed state (count) or window results (windows), the number of
outputs, the job's metrics and, with ``--savepoint-dir``, the savepoint taken mid-run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkpoint_jobs import build, expected_outputs, expected_state  # noqa: E402

from flowpoint import (  # noqa: E402
    ClickEventGenerator,
    CollectSink,
    DataGeneratorSource,
    Duration,
    OutputTag,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    TimestampAssigner,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)


class ClickTimestamps(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value.ts


class CountWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        channel, behavior = key
        window = context.window()
        yield window.start, window.end, channel, behavior, sum(n for _, n in elements)


def build_windows(env, events: int, rate: float | None) -> tuple[CollectSink, CollectSink]:
    """Seed 000's pipeline with collecting sinks: 1-minute event-time windows per (channel, behavior)."""
    clicks = ClickEventGenerator(num_users=1_000, max_lateness_ms=120_000)
    late_tag = OutputTag("late-events")
    windows = (
        env.from_source(DataGeneratorSource(clicks, count=events, rate_limit_per_second=rate), source_name="click-events").uid("source-id")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(50_000)).with_timestamp_assigner(ClickTimestamps())
        ).uid("timestamps-id")
        .map(lambda e: ((e.channel, e.behavior), 1), Types.TUPLE([Types.TUPLE([Types.STRING(), Types.STRING()]), Types.LONG()])).uid("mapper-id")
        .key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(60_000)))
        .side_output_late_data(late_tag)
        .process(CountWindow()).uid("window-id")
    )
    out, late = CollectSink(), CollectSink()
    windows.sink_to(out).uid("sink-id")
    windows.get_side_output(late_tag).map(lambda v: v[0], Types.PICKLED_BYTE_ARRAY()).sink_to(late).uid("late-sink-id")
    return out, late


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--master", required=True)
    ap.add_argument("--working-dir", required=True)
    ap.add_argument("--checkpoints", required=True)
    ap.add_argument("--s3-endpoint")
    ap.add_argument("--backend", default="hashmap")
    ap.add_argument("--job", default="count")
    ap.add_argument("-p", type=int, default=2)
    ap.add_argument("--events", type=int, default=3_000)
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--max-records", type=int, default=200)
    ap.add_argument("--savepoint-dir")
    ap.add_argument("--restore")
    ap.add_argument("--conf", action="append", default=[], help="key=value settings")
    args = ap.parse_args()
    conf = {
        "spark.master": args.master, "state.working.dir": args.working_dir, "execution.progress.interval": 0,
        "state.backend.type": args.backend, "state.checkpoints.dir": args.checkpoints, "state.backend.incremental": True,
        # the multi-host tests are about epochs: working files between epochs, tasks moving between
        # hosts (tests/test_continuous_failures.py runs the continuous runtime on the same cluster)
        "execution.runtime": "epoch",
    }
    if args.s3_endpoint:
        conf.update({"s3.endpoint": args.s3_endpoint, "s3.access-key": "testing", "s3.secret-key": "testing", "s3.region": "us-east-1"})
    if args.restore:
        conf["execution.savepoint.path"] = args.restore
    for kv in args.conf:
        k, _, v = kv.partition("=")
        conf[k] = v
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(args.p)
    env.set_epoch_max_records(args.max_records)
    env.enable_checkpointing(1)
    rate = args.rate or None
    if args.job == "count":
        sink = build(env, args.events, rate)
        late = None
    else:
        sink, late = build_windows(env, args.events, rate)
    out: dict = {}
    if args.savepoint_dir:
        client = env.execute_async(f"multihost-{args.job}")
        while client.get_job_status().value in ("CREATED", "RUNNING", "RESTARTING") and len(sink.results) < args.events // 3:
            time.sleep(0.05)
        out["savepoint"] = client.trigger_savepoint(args.savepoint_dir)
        result = client.wait()
    else:
        result = env.execute(f"multihost-{args.job}")
    if args.job == "count":
        state = result.get_keyed_state("counting")
        expected = expected_state(args.events)
        out["exact_state"] = state.get("count") == expected["count"] and state.get("by_digit") == expected["by_digit"]
        out["exact_outputs"] = sorted(sink.results) == expected_outputs(args.events)
        out["count"] = {str(k): v for k, v in sorted(state.get("count", {}).items())}
    else:
        out["windows"] = sorted(list(r) for r in sink.results)
        out["late"] = len(late.results)
    out["outputs"] = len(sink.results)
    out["metrics"] = {k: v for k, v in result.get_metrics().items() if k.startswith("stateTasks")}
    out["epochs"] = result.epochs
    print(json.dumps(out), flush=True)
    from pyspark.sql import SparkSession

    SparkSession.getActiveSession().stop()


if __name__ == "__main__":
    main()
