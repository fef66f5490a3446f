"""Seed 000's whole pipeline with Kafka: click events produced into a topic, read by a
KafkaSource with per-partition watermarks, counted per (channel, behavior) in 1-minute
event-time windows, and written exactly once by a KafkaSink to another topic.

    python examples/kafka_clicks.py                         # starts an embedded broker
    python examples/kafka_clicks.py --bootstrap-servers host:9092 [--events N]

Without ``--bootstrap-servers`` it starts the embedded Tansu broker (``pip install -e
'.[kafka]'``) on a free loopback port and stops it at the end. It produces ``--events`` click
events ``ts,channel,id,behavior`` into ``--input-topic`` (4 partitions) with the event time as
the Kafka timestamp, runs the job (bounded: it reads the topic up to its end at start), then
prints the output topic's contents: ``window_start window_end channel behavior count`` lines,
which the sink committed in Kafka transactions when checkpoints completed.
"""

import argparse
import time
import uuid

from flowpoint import (
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
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)


class CountWindow(ProcessWindowFunction):
    """Counts the events of one (channel, behavior) in one window."""

    def process(self, key, context, elements):
        channel, behavior = key
        window = context.window()
        yield f"{window.start}\t{window.end}\t{channel}\t{behavior}\t{sum(n for _, n in elements)}"


def produce_clicks(bootstrap: str, topic: str, events: int, partitions: int, lateness_ms: int) -> None:
    from confluent_kafka import Producer

    batch = ClickEventGenerator(num_users=10_000, max_lateness_ms=lateness_ms).batch(0, events).to_pydict()
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "log_level": 2})
    for i, (ts, channel, user, behavior) in enumerate(zip(batch["ts"], batch["channel"], batch["id"], batch["behavior"])):
        value = f"{ts},{channel},{user},{behavior}".encode()
        while True:
            try:
                producer.produce(topic, value=value, partition=i % partitions, timestamp=int(ts))
                break
            except BufferError:
                producer.poll(0.1)
    if producer.flush(60):
        raise SystemExit(f"could not deliver the click events to {bootstrap}")


def read_topic(bootstrap: str, topic: str) -> list[str]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"reader-{uuid.uuid4().hex[:8]}",
                         "isolation.level": "read_committed", "enable.auto.commit": False, "log_level": 2})
    try:
        meta = consumer.list_topics(topic, timeout=10).topics[topic]
        ends = {p: consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in meta.partitions}
        consumer.assign([TopicPartition(topic, p, 0) for p, end in ends.items() if end > 0])
        lines, idle_since = [], time.monotonic()
        while time.monotonic() - idle_since < 2.0:  # until nothing more arrives
            msg = consumer.poll(0.2)
            if msg is not None and not msg.error():
                lines.append(msg.value().decode())
                idle_since = time.monotonic()
        return lines
    finally:
        consumer.close()


def run(bootstrap: str, args) -> list[str]:
    admin_topics(bootstrap, [(args.input_topic, 4), (args.output_topic, 2)])
    produce_clicks(bootstrap, args.input_topic, args.events, 4, args.source_lateness_millis)

    env = StreamExecutionEnvironment.get_execution_environment()
    env.enable_checkpointing(args.checkpoint_interval)
    env.set_epoch_max_records(args.epoch_max_records)
    env.set_parallelism(2)

    source = (
        KafkaSource.builder()
        .set_bootstrap_servers(bootstrap)
        .set_topics(args.input_topic)
        .set_group_id("kafka-clicks")
        .set_starting_offsets(KafkaOffsetsInitializer.earliest())
        .set_bounded(KafkaOffsetsInitializer.latest())
        .set_value_only_deserializer(SimpleStringSchema())
        .build()
    )
    sink = (
        KafkaSink.builder()
        .set_bootstrap_servers(bootstrap)
        .set_record_serializer(
            KafkaRecordSerializationSchema.builder()
            .set_topic(args.output_topic)
            .set_value_serialization_schema(SimpleStringSchema())
            .build()
        )
        .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE)
        .set_transactional_id_prefix(f"kafka-clicks-{args.output_topic}")
        .build()
    )
    # the record timestamps are the Kafka timestamps; one watermark generator per partition
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(args.window_lagged_millis)) \
        .with_idleness(Duration.of_seconds(30))
    (
        env.from_source(source, strategy, "click-events").uid("kafka-source")
        .map(lambda line: (tuple(line.split(",")[1::2]), 1),
             Types.TUPLE([Types.TUPLE([Types.STRING(), Types.STRING()]), Types.LONG()])).uid("mapper")
        .key_by(lambda t: t[0])
        .window(TumblingEventTimeWindows.of(Duration.of_millis(args.window_size_millis)))
        .process(CountWindow(), Types.STRING()).uid("window")
        .sink_to(sink).uid("kafka-sink")
    )
    env.execute("KafkaClickWindows")
    return read_topic(bootstrap, args.output_topic)


def admin_topics(bootstrap: str, topics: list) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    existing = admin.list_topics(timeout=10).topics
    new = [NewTopic(name, num_partitions=n, replication_factor=1) for name, n in topics if name not in existing]
    for future in admin.create_topics(new).values() if new else []:
        future.result(30)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap-servers", help="a Kafka cluster; without it an embedded broker runs")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--input-topic", default="clicks")
    parser.add_argument("--output-topic", default="click-window-counts")
    parser.add_argument("--source-lateness-millis", type=int, default=30_000, help="events lag by up to this much")
    parser.add_argument("--window-lagged-millis", type=int, default=50_000, help="bounded out-of-orderness")
    parser.add_argument("--window-size-millis", type=int, default=60_000)
    parser.add_argument("--checkpoint-interval", type=int, default=2_000, help="ms")
    parser.add_argument("--epoch-max-records", type=int, default=25_000)
    args = parser.parse_args()

    if args.bootstrap_servers:
        lines = run(args.bootstrap_servers, args)
    else:
        from flowpoint.connectors.kafka import EmbeddedKafka

        with EmbeddedKafka() as broker:
            print(f"embedded Kafka broker (Tansu) at {broker.bootstrap_servers}")
            lines = run(broker.bootstrap_servers, args)
    total = sum(int(line.split("\t")[4]) for line in lines)
    print(f"{len(lines)} window counts ({total:,} events) in topic {args.output_topic}:")
    for line in sorted(lines, key=lambda s: (int(s.split("\t")[0]), s)):
        print("  " + line)


if __name__ == "__main__":
    main()
