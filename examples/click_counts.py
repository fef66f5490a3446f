"""Count seed 000's click events per (channel, behavior) with keyed ValueState.

    flowpoint run examples/click_counts.py [--events N]
    python examples/click_counts.py [--events N]

A DataGeneratorSource produces click events (ts, channel, id, behavior); the stream is keyed by
(channel, behavior); a KeyedProcessFunction keeps a per-key count in ValueState and reports
every 5,000th event of a key. Results also land as JSON lines under out/click_counts/.
"""

import argparse
import os

from flowpoint import (
    ClickEventGenerator,
    DataGeneratorSource,
    Encoder,
    FileSink,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)


class CountPerKey(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, event, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        if n % 5000 == 0:
            channel, behavior = ctx.get_current_key()
            yield channel, behavior, n


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=400_000)
    parser.add_argument("--users", type=int, default=50_000)
    args = parser.parse_args()

    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_epoch_max_records(100_000)
    source = DataGeneratorSource(ClickEventGenerator(num_users=args.users), count=args.events)
    clicks = env.from_source(source, WatermarkStrategy.no_watermarks(), "click-events").uid("source-id")
    counts = (
        clicks.key_by(lambda e: (e.channel, e.behavior))
        .process(CountPerKey(), Types.TUPLE([Types.STRING(), Types.STRING(), Types.LONG()]))
        .uid("count-per-key")
    )
    counts.print()
    out = os.path.join(os.getcwd(), "out", "click_counts")
    counts.sink_to(FileSink.for_row_format(out, Encoder.json_lines()).build()).uid("file-sink")
    result = env.execute("click_counts")
    final = result.get_keyed_state("count-per-key", "count")
    print(f"final counts of {len(final)} keys ({sum(final.values()):,} events):")
    for (channel, behavior), n in sorted(final.items()):
        print(f"  {channel} {behavior:<10} {n:>7,}")


if __name__ == "__main__":
    main()
