"""Jobs for the continuous runtime's failure tests (tests/test_continuous_failures.py), each run
as its own driver process (one SparkContext per process; ``flowpoint run [--resume]`` too):

    python continuous_jobs.py --spark-master M --root DIR --backend hashmap|rocksdb --job count|windows
        [--events N] [--rate R] [--kill-executor-at I] [--working-dir P] [--conf k=v ...]

* ``count``: the counting job of checkpoint_jobs.py (parallelism 2), its outputs to a collecting
  sink and, as ``key<TAB>count`` lines, to a file sink under ``DIR/out`` (exactly-once across
  driver processes: part files are committed with checkpoints);
* ``windows``: seed 000's pipeline (examples/event_time_tumbling_window_analytics.py): one
  source task, event-time watermarks with a 50 s bound, one-minute tumbling windows per
  (channel, behavior), window lines and late events to file sinks under ``DIR/out``; the other
  stages at parallelism 2 (the slots of two 1-core workers).

``--kill-executor-at I``: the counting function kills its executor's JVM (kill -9) at record
index I, once. Checkpoints go to ``DIR/ck``. Prints one JSON line: the final keyed state's
exactness, the collected outputs' exactness, the completed checkpoints and restarts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from checkpoint_jobs import Counting, expected_outputs, expected_state, key_of, record  # noqa: E402

from flowpoint import (  # noqa: E402
    ClickEventGenerator,
    CollectSink,
    DataGeneratorSource,
    Duration,
    Encoder,
    FileSink,
    OutputTag,
    ProcessFunction,
    ProcessWindowFunction,
    StreamExecutionEnvironment,
    TimestampAssigner,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)

JOB_NAME = "continuous-failures"
LATENESS_MS = 30_000  # under the 50 s bound: no event is late, every window equals pandas' count
NUM_USERS = 10_000


class KillsItsExecutor(Counting):
    """Counts; at record index ``at`` kills the executor JVM of the slot running it, once (the
    slot's Python worker is a child of pyspark's daemon, a child of the executor JVM)."""

    def __init__(self, flag: str, at: int):
        super().__init__()
        self.flag = flag
        self.value = record(at)

    def process_element(self, value, ctx):
        if value == self.value and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            with open(f"/proc/{os.getppid()}/stat") as f:
                executor_jvm = int(f.read().rsplit(")", 1)[1].split()[1])
            os.kill(executor_jvm, signal.SIGKILL)
        yield from super().process_element(value, ctx)


class ClickTimestamps(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value.ts


class EventTimeWindowReduceFunction(ProcessWindowFunction):
    def process(self, key, context, elements):
        channel, behavior = key
        window = context.window()
        yield window.start, window.end, channel, behavior, sum(n for _, n in elements)


class FormatLateEvent(ProcessFunction):
    def process_element(self, value, ctx):
        (channel, behavior), _ = value
        yield f"{ctx.timestamp()}\t{channel}\t{behavior}"


def clicks() -> ClickEventGenerator:
    return ClickEventGenerator(num_users=NUM_USERS, max_lateness_ms=LATENESS_MS)


def build_windows(env: StreamExecutionEnvironment, events: int, rate: float | None, out: str) -> None:
    late_events = OutputTag("late-events")
    source = DataGeneratorSource(clicks(), count=events, rate_limit_per_second=rate)
    windows = (
        env.from_source(source, source_name="click-events").uid("source-id").set_parallelism(1)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(50_000)).with_timestamp_assigner(ClickTimestamps())
        ).uid("timestamps-id")
        .map(lambda e: ((e.channel, e.behavior), 1), Types.TUPLE([Types.TUPLE([Types.STRING(), Types.STRING()]), Types.LONG()])).uid("mapper-id")
        .key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(60_000)))
        .side_output_late_data(late_events)
        .process(EventTimeWindowReduceFunction()).uid("window-id")
    )
    lines = windows.map(lambda t: "\t".join(str(x) for x in t), Types.STRING()).uid("format-id")
    lines.sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()).uid("sink-id")
    late = windows.get_side_output(late_events).process(FormatLateEvent(), Types.STRING()).uid("late-format-id")
    late.sink_to(FileSink.for_row_format(os.path.join(out, "late"), Encoder.simple_string_encoder()).build()).uid("late-sink-id")


class SlowFormat:
    def __init__(self, ms: float):
        self.ms = ms

    def __call__(self, kv):
        time.sleep(self.ms / 1000)
        return f"{kv[0]}\t{kv[1]}"


def build_count(env: StreamExecutionEnvironment, events: int, rate: float | None, function: Counting, out: str, slow_ms: float = 0.0) -> CollectSink:
    """checkpoint_jobs.build's job, its outputs also as ``key<TAB>count`` lines to a file sink
    (``slow_ms``: each line takes that long to format, so the counting stage backpressures its
    input)."""
    sink = CollectSink()
    counts = (
        env.from_source(DataGeneratorSource(record, count=events, rate_limit_per_second=rate), source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(function).uid("counting")
    )
    counts.sink_to(sink).uid("collect")
    lines = counts.map(SlowFormat(slow_ms) if slow_ms else (lambda kv: f"{kv[0]}\t{kv[1]}"), Types.STRING()).uid("format")
    lines.sink_to(FileSink.for_row_format(out, Encoder.simple_string_encoder()).build()).uid("files")
    return sink


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--spark-master", required=True)
    ap.add_argument("--root", required=True)
    ap.add_argument("--working-dir")
    ap.add_argument("--backend", default="hashmap")
    ap.add_argument("--job", default="count", choices=["count", "windows"])
    ap.add_argument("--events", type=int, default=3_000)
    ap.add_argument("--rate", type=float, default=0.0)
    ap.add_argument("--kill-executor-at", type=int, default=-1)
    ap.add_argument("--slow-ms", type=float, default=0.0, help="count: each output takes this long to format (backpressure)")
    ap.add_argument("--conf", action="append", default=[], help="key=value settings")
    args = ap.parse_args()
    conf = {
        "spark.master": args.spark_master, "state.working.dir": args.working_dir or os.path.join(args.root, "working"),
        "execution.progress.interval": 0, "state.backend.type": args.backend, "state.backend.incremental": True,
        "state.checkpoints.dir": os.path.join(args.root, "ck"), "state.checkpoints.num-retained": 3,
        "execution.runtime": "continuous", "execution.buffer-timeout": 5,
        "restart-strategy.type": "fixed-delay", "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "1 s",
    }
    for kv in args.conf:
        k, _, v = kv.partition("=")
        conf[k] = v
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(2)
    env.set_epoch_max_records(200)
    env.enable_checkpointing(100)
    out_dir = os.path.join(args.root, "out")
    rate = args.rate or None
    sink = None
    if args.job == "count":
        function = KillsItsExecutor(os.path.join(args.root, "killed"), args.kill_executor_at) if args.kill_executor_at >= 0 else Counting()
        sink = build_count(env, args.events, rate, function, out_dir, args.slow_ms)
    else:
        build_windows(env, args.events, rate, out_dir)
    result = env.execute(JOB_NAME)
    out: dict = {
        "killed": os.path.exists(os.path.join(args.root, "killed")),
        "checkpoints": [s.checkpoint_id for s in result.get_checkpoint_stats() if s.status == "COMPLETED"],
    }
    if args.job == "count":
        state = result.get_keyed_state("counting")
        expected = expected_state(args.events)
        out["exact_state"] = state.get("count") == expected["count"] and state.get("by_digit") == expected["by_digit"]
        out["exact_outputs"] = sorted(sink.results) == expected_outputs(args.events)
        out["outputs"] = len(sink.results)
    print(json.dumps(out), flush=True)
    from pyspark.sql import SparkSession

    SparkSession.getActiveSession().stop()


if __name__ == "__main__":
    main()
