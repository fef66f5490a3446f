"""Seed 000's pipeline from Kafka into a Delta Lake table: click events produced into a topic,
read by a KafkaSource with per-partition watermarks, counted per (channel, behavior) in 1-minute
event-time windows, and written exactly once by a DeltaSink (one Delta transaction per completed
checkpoint) into a table partitioned by channel.

    pip install -e '.[kafka,delta]'
    python examples/kafka_to_delta.py                        # embedded broker, table under out/
    python examples/kafka_to_delta.py --bootstrap-servers host:9092 --table s3://bucket/clicks

Without ``--bootstrap-servers`` it starts the embedded Tansu broker on a free loopback port and
stops it at the end. At the end it reads the table with ``deltalake`` (any Delta reader would
do: Spark with the Delta package, DuckDB, Trino) and prints its versions and counts.
"""

import argparse
import os
import sys

from flowpoint import (
    DeltaSink,
    Duration,
    KafkaOffsetsInitializer,
    KafkaSource,
    ProcessWindowFunction,
    Row,
    SimpleStringSchema,
    StreamExecutionEnvironment,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from kafka_clicks import admin_topics, produce_clicks  # noqa: E402  (the same producer as kafka_clicks.py)

DEFAULT_TABLE = os.path.abspath("out/delta/click_window_counts")
COUNTS = Types.ROW_NAMED(["window_start", "window_end", "channel", "behavior", "clicks"],
                         [Types.LONG(), Types.LONG(), Types.STRING(), Types.STRING(), Types.LONG()])


class CountWindow(ProcessWindowFunction):
    """One row per (channel, behavior) and window: its number of events."""

    def process(self, key, context, elements):
        channel, behavior = key
        window = context.window()
        yield Row(window_start=window.start, window_end=window.end, channel=channel, behavior=behavior,
                  clicks=sum(n for _, n in elements))


def run(bootstrap: str, args) -> None:
    admin_topics(bootstrap, [(args.input_topic, 4)])
    produce_clicks(bootstrap, args.input_topic, args.events, 4, args.source_lateness_millis)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(args.checkpoint_interval)
    env.set_parallelism(2)
    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(args.input_topic)
        .set_group_id("kafka-to-delta")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    sink = DeltaSink.builder().set_table_path(args.table).set_partition_columns(["channel"]).build()
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(args.window_lagged_millis)) \
        .with_idleness(Duration.of_seconds(30))
    (
        env.from_source(source, strategy, "click-events").uid("kafka-source")
        .map(lambda line: (tuple(line.split(",")[1::2]), 1),
             Types.TUPLE([Types.TUPLE([Types.STRING(), Types.STRING()]), Types.LONG()])).uid("mapper")
        .key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(args.window_size_millis)))
        .process(CountWindow(), COUNTS).uid("window")
        .sink_to(sink).uid("delta-sink")
    )
    env.execute("KafkaToDelta")


def show_table(path: str) -> None:
    from deltalake import DeltaTable

    table = DeltaTable(path)
    rows = table.to_pyarrow_table().to_pylist()
    print(f"Delta table {path}: version {table.version()}, {len(rows)} window counts, "
          f"{sum(r['clicks'] for r in rows):,} events")
    for entry in table.history()[::-1]:
        print(f"  version {entry.get('version')}: {entry.get('operation')}")
    for r in sorted(rows, key=lambda r: (r["window_start"], r["channel"], r["behavior"]))[:12]:
        print(f"  {r['window_start']}\t{r['window_end']}\t{r['channel']}\t{r['behavior']}\t{r['clicks']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="a Kafka cluster; without it an embedded broker runs")
    parser.add_argument("--table", default=DEFAULT_TABLE, help="the Delta table's path or URI (an existing table is appended to)")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--input-topic", default="clicks-to-delta")
    parser.add_argument("--source-lateness-millis", type=int, default=30_000, help="events lag by up to this much")
    parser.add_argument("--window-lagged-millis", type=int, default=50_000, help="bounded out-of-orderness")
    parser.add_argument("--window-size-millis", type=int, default=60_000)
    parser.add_argument("--checkpoint-interval", type=int, default=2_000, help="ms")
    args = parser.parse_args()
    if args.table == DEFAULT_TABLE and os.path.isdir(DEFAULT_TABLE):
        import shutil

        print(f"removing {DEFAULT_TABLE}, the table an earlier run of this example wrote")
        shutil.rmtree(DEFAULT_TABLE)

    if args.bootstrap_servers:
        run(args.bootstrap_servers, args)
    else:
        from flowpoint.connectors.kafka import EmbeddedKafka

        with EmbeddedKafka() as broker:
            print(f"embedded Kafka broker (Tansu) at {broker.bootstrap_servers}")
            run(broker.bootstrap_servers, args)
    show_table(args.table)


if __name__ == "__main__":
    main()
