"""Seed 000's EventTimeTumblingWindowAnalytics: click events counted per (channel, behavior) in
1-minute event-time windows, with watermarks that allow 50 s of out-of-order arrival.

    flowpoint run examples/event_time_tumbling_window_analytics.py [--events N]
    python examples/event_time_tumbling_window_analytics.py --window-size-millis 60000 --window-lagged-millis 50000

The source produces click events ``(ts, channel, id, behavior)`` whose timestamps lag by up to
``--source-lateness-millis`` (out of order). As in the seed, timestamps are assigned and
watermarks generated (bounded out-of-orderness) after the source, the events are mapped to
``((channel, behavior), 1)``, keyed, and a ProcessWindowFunction counts each window.
Each result is the line ``window_start window_end channel behavior count`` (tab-separated) in
part files under ``--output``; events later than the watermark allows go to a late-data side
output (``--output``/late). Checkpointing is on: the file sink commits with checkpoints.
"""

import argparse
import glob
import os

from flowpoint import (
    ClickEventGenerator,
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


class ClickTimestamps(TimestampAssigner):
    """The event time is the record's ``ts`` field (epoch ms)."""

    def extract_timestamp(self, value, record_timestamp):
        return value.ts


class EventTimeWindowReduceFunction(ProcessWindowFunction):
    """Counts the events of one (channel, behavior) in one window."""

    def process(self, key, context, elements):
        channel, behavior = key
        window = context.window()
        yield window.start, window.end, channel, behavior, sum(n for _, n in elements)


class FormatLateEvent(ProcessFunction):
    """A late event: ``timestamp channel behavior`` (the side output keeps the event time)."""

    def process_element(self, value, ctx):
        (channel, behavior), _ = value
        yield f"{ctx.timestamp()}\t{channel}\t{behavior}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--source-lateness-millis", type=int, default=120_000, help="events lag by up to this much")
    parser.add_argument("--window-lagged-millis", type=int, default=50_000, help="bounded out-of-orderness")
    parser.add_argument("--window-size-millis", type=int, default=60_000)
    parser.add_argument("--output", default=os.path.join(os.getcwd(), "out", "event_time_windows"))
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(5_000)
    env.set_epoch_max_records(100_000)

    events = ClickEventGenerator(num_users=10_000, max_lateness_ms=args.source_lateness_millis)
    stream = env.from_source(DataGeneratorSource(events, count=args.events), source_name="click-events").uid("source-id")
    late_events = OutputTag("late-events")
    windows = (
        stream.set_parallelism(1)
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(args.window_lagged_millis))
            .with_timestamp_assigner(ClickTimestamps())
        )
        .set_parallelism(2)
        .uid("timestamps-id")
        .map(lambda e: ((e.channel, e.behavior), 1), Types.TUPLE([Types.TUPLE([Types.STRING(), Types.STRING()]), Types.LONG()]))
        .set_parallelism(3)
        .uid("mapper-id")
        .key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(args.window_size_millis)))
        .side_output_late_data(late_events)
        .process(EventTimeWindowReduceFunction())
        .set_parallelism(4)
        .uid("window-id")
    )
    lines = windows.map(lambda t: "\t".join(str(x) for x in t), Types.STRING()).set_parallelism(3).uid("format-id")
    lines.sink_to(FileSink.for_row_format(args.output, Encoder.simple_string_encoder()).build()).set_parallelism(3).uid("sink-id")
    late = windows.get_side_output(late_events).process(FormatLateEvent(), Types.STRING())
    late.sink_to(FileSink.for_row_format(os.path.join(args.output, "late"), Encoder.simple_string_encoder()).build()).uid("late-sink-id")

    env.execute("EventTimeTumblingWindowAnalytics")

    results = _read_lines(args.output)
    late_lines = _read_lines(os.path.join(args.output, "late"))
    print(f"{len(results)} window counts ({sum(int(r.split(chr(9))[4]) for r in results):,} events) in {args.output}")
    print(f"{len(late_lines)} late events (beyond the {args.window_lagged_millis} ms bound) in {args.output}/late")
    for line in sorted(results)[:8]:
        print("  " + line)


def _read_lines(directory: str) -> list[str]:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, "**", "part-*"), recursive=True)):
        if os.sep + "late" + os.sep in path[len(directory) :] and not directory.endswith("late"):
            continue
        with open(path, encoding="utf-8") as f:
            out += [line for line in f.read().splitlines() if line]
    return out


if __name__ == "__main__":
    main()
