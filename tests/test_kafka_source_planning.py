"""KafkaSource without Spark: offset planning rules, the builder, positions as checkpoint data,
and the driver's and reader's use of the embedded broker (``kafka_broker``)."""

from __future__ import annotations

import json
import time

import pytest

pytest.importorskip("confluent_kafka")

from kafka_helpers import produce, topic_name  # noqa: E402

from flowpoint import (  # noqa: E402
    JsonRowDeserializationSchema,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaTopicPartition,
    SimpleStringSchema,
    Types,
)
from flowpoint.checkpoint.values import to_data  # noqa: E402
from flowpoint.connectors.kafka import (  # noqa: E402
    KafkaDeserializationError,
    KafkaOffsetOutOfRangeError,
    KafkaUnreachableError,
)
from flowpoint.connectors.kafka.errors import KafkaConfigurationError  # noqa: E402
from flowpoint.connectors.kafka.offsets import plan_range  # noqa: E402
from flowpoint.connectors.source import SourceMetric, TimestampedBatch  # noqa: E402
from flowpoint.errors import ConfigurationError, FlowpointError  # noqa: E402

EARLIEST, LATEST, NONE = KafkaOffsetResetStrategy.EARLIEST, KafkaOffsetResetStrategy.LATEST, KafkaOffsetResetStrategy.NONE

# -- plan_range: pure ------------------------------------------------------------------------------


def test_a_range_is_bounded_by_the_budget_and_the_high_watermark():
    assert (plan_range("t-0", 10, 0, 100, None, 25, EARLIEST).start, plan_range("t-0", 10, 0, 100, None, 25, EARLIEST).end) == (10, 35)
    r = plan_range("t-0", 90, 0, 100, None, 25, EARLIEST)
    assert (r.start, r.end, r.records, r.finished, r.reset) == (90, 100, 10, False, None)
    r = plan_range("t-0", 100, 0, 100, None, 25, EARLIEST)
    assert (r.start, r.end, r.records) == (100, 100, 0)


def test_a_bounded_range_stops_at_its_stopping_offset_and_finishes_there():
    r = plan_range("t-0", 40, 0, 100, 50, 25, EARLIEST)
    assert (r.end, r.finished) == (50, True)
    r = plan_range("t-0", 10, 0, 100, 50, 25, EARLIEST)
    assert (r.end, r.finished) == (35, False)
    r = plan_range("t-0", 0, 0, 0, 0, 25, EARLIEST)  # an empty partition bounded at 0
    assert (r.end, r.finished) == (0, True)


def test_a_position_below_the_log_start_goes_where_auto_offset_reset_says():
    r = plan_range("t-0", 5, 20, 100, None, 10, EARLIEST)
    assert (r.start, r.end) == (20, 30) and "below the log start offset 20" in r.reset
    r = plan_range("t-0", 5, 20, 100, None, 10, LATEST)
    assert (r.start, r.end) == (100, 100)
    with pytest.raises(KafkaOffsetOutOfRangeError, match=r"t-0: offset 5 is below the log start offset 20.*auto.offset.reset is none") as e:
        plan_range("t-0", 5, 20, 100, None, 10, NONE)
    assert not e.value.recoverable


def test_a_position_above_the_high_watermark_is_out_of_range_too():
    # the topic was deleted and created again: its offsets start over
    r = plan_range("t-0", 500, 0, 30, None, 100, EARLIEST)
    assert (r.start, r.end) == (0, 30) and "above the high watermark 30" in r.reset


def test_reset_strategy_names():
    assert KafkaOffsetResetStrategy.of("smallest") is EARLIEST
    assert KafkaOffsetResetStrategy.of("largest") is LATEST
    assert KafkaOffsetResetStrategy.of("error") is NONE
    with pytest.raises(KafkaConfigurationError, match="earliest, latest or none"):
        KafkaOffsetResetStrategy.of("middle")


# -- builder and schemas ---------------------------------------------------------------------------


def test_the_builder_names_what_is_missing():
    with pytest.raises(ConfigurationError, match="set_bootstrap_servers"):
        KafkaSource.builder().set_topics("a").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(ConfigurationError, match="set_topics"):
        KafkaSource.builder().set_bootstrap_servers("x:1").set_value_only_deserializer(SimpleStringSchema()).build()
    with pytest.raises(ConfigurationError, match="set_value_only_deserializer"):
        KafkaSource.builder().set_bootstrap_servers("x:1").set_topics("a").build()
    with pytest.raises(ConfigurationError, match="not a regular expression"):
        KafkaSource.builder().set_topic_pattern("(")
    with pytest.raises(ConfigurationError, match="refused its properties: No such configuration property: .fetch.min.byte."):
        (KafkaSource.builder().set_bootstrap_servers("x:1").set_topics("a").set_value_only_deserializer(SimpleStringSchema())
         .set_property("fetch.min.byte", "1").build())
    with pytest.raises(ConfigurationError, match="discovery.interval.ms must be an integer"):
        (KafkaSource.builder().set_bootstrap_servers("x:1").set_topics("a").set_value_only_deserializer(SimpleStringSchema())
         .set_property("partition.discovery.interval.ms", "soon").build())


def test_flowpoint_properties_do_not_reach_the_client_and_others_do():
    src = (
        KafkaSource.builder().set_bootstrap_servers("h:1").set_topics("a", "b").set_group_id("g")
        .set_value_only_deserializer(SimpleStringSchema())
        .set_property("partition.discovery.interval.ms", "1000").set_property("fetch.min.bytes", "1")
        .set_property("auto.offset.reset", "latest").build()
    )
    assert src.client_config == {"fetch.min.bytes": "1", "bootstrap.servers": "h:1", "group.id": "g"}
    assert src.discovery_interval_s == 1.0 and src.reset is LATEST and not src.is_bounded()
    assert src.output_type == Types.STRING()
    bounded = (KafkaSource.builder().set_bootstrap_servers("h:1").set_topics("a").set_value_only_deserializer(SimpleStringSchema())
               .set_bounded(KafkaOffsetsInitializer.latest()).build())
    assert bounded.is_bounded() and bounded.discovery_interval_s is None


def test_json_row_schema_reads_named_fields_and_fails_on_other_input():
    schema = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.INT()])).build()
    row = schema.deserialize(b'{"n": 3, "user": "ann", "extra": 1}')
    assert row == ("ann", 3) and row.user == "ann"
    assert schema.deserialize(b'{"user": "bob"}') == ("bob", None)
    with pytest.raises(ValueError):
        schema.deserialize(b"not json")
    with pytest.raises(ValueError, match="JSON object"):
        schema.deserialize(b"[1, 2]")
    strict = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["user"], [Types.STRING()])).fail_on_missing_field().build()
    with pytest.raises(ValueError, match="no field"):
        strict.deserialize(b"{}")
    with pytest.raises(ConfigurationError, match="row type"):
        JsonRowDeserializationSchema.builder().type_info(Types.STRING())


# -- against the broker, no Spark ------------------------------------------------------------------


def build(broker, topic, starting=None, bounded=None, group=None, deserializer=None, props=None):
    b = (KafkaSource.builder().set_bootstrap_servers(broker.bootstrap_servers).set_topics(topic)
         .set_value_only_deserializer(deserializer or SimpleStringSchema()).set_property("default.api.timeout.ms", "5000"))
    if starting is not None:
        b.set_starting_offsets(starting)
    if bounded is not None:
        b.set_bounded(bounded)
    if group:
        b.set_group_id(group)
    for k, v in (props or {}).items():
        b.set_property(k, str(v))
    return b.build()


def read_split(src, split, start, end):
    out, stamps, metrics = [], [], {}
    for item in src.create_reader().read(split, src.read_spec(split, start, end)):
        if isinstance(item, TimestampedBatch):
            out += item.records
            stamps += item.timestamps
        elif isinstance(item, SourceMetric):
            metrics[item.name] = metrics.get(item.name, 0) + item.n
    return out, stamps, metrics


def test_splits_are_partitions_and_positions_are_checkpoint_data(kafka_broker):
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    produce(kafka_broker.bootstrap_servers, topic, list(range(30)), partitions=3)
    src = build(kafka_broker, topic, bounded=KafkaOffsetsInitializer.latest())
    splits = src.create_splits(2)
    assert [s.split_id for s in splits] == [f"{topic}-0", f"{topic}-1", f"{topic}-2"]
    assert [(s.start, s.payload["stop"]) for s in splits] == [(0, 10)] * 3
    data = src.encode_position(splits[1], 7)
    to_data(data, "position")  # data only: no pickles in _metadata
    assert json.loads(json.dumps(data)) == data
    split, position = src.decode_position(splits[1].split_id, json.loads(json.dumps(data)))
    assert split == splits[1] and position == 7


def test_the_planned_end_is_the_fetched_high_watermark_not_the_listed_one(kafka_broker):
    """Tansu's ListOffsets(latest) answers the last batch's base offset + 1 (docs/kafka.md)."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 200, "log_level": 2})
    for i in range(10):
        p.produce(topic, value=str(i).encode(), partition=0)
    p.flush()  # one batch of 10 records
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": "probe", "log_level": 2})
    listed = c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False)[1]
    c.close()
    src = build(kafka_broker, topic)
    [split] = src.create_splits(1)
    plan = src.plan(split, 0, 1000, 0.0)
    assert plan.end == 10 and plan.records == 10, f"listed high watermark {listed}"
    out, _, _ = read_split(src, split, 0, plan.end)
    assert out == [str(i) for i in range(10)]


def test_a_range_read_twice_gives_the_same_records_with_kafka_timestamps(kafka_broker):
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    stamps = [1_700_000_000_000 + 37 * i for i in range(50)]
    produce(kafka_broker.bootstrap_servers, topic, list(range(50)), timestamps=stamps)
    src = build(kafka_broker, topic)
    [split] = src.create_splits(1)
    first = read_split(src, split, 10, 30)
    assert first[0] == [str(i) for i in range(10, 30)] and first[1] == stamps[10:30]
    assert read_split(src, split, 10, 30) == first


def test_each_starting_offsets_initializer(kafka_broker):
    from confluent_kafka import Consumer, TopicPartition

    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    base = 1_700_000_000_000
    # partition 0: timestamps 0..19 s; partition 1: timestamps 100..119 s, out of order at 105
    ts = [base + (i // 2) * 1000 + (0 if i % 2 == 0 else 100_000) for i in range(40)]
    ts[11] = base + 200_000  # partition 1, offset 5: late and large
    produce(kafka_broker.bootstrap_servers, topic, list(range(40)), partitions=2, timestamps=ts)
    group = topic_name("g")
    c = Consumer({"bootstrap.servers": kafka_broker.bootstrap_servers, "group.id": group, "log_level": 2})
    c.commit(offsets=[TopicPartition(topic, 0, 7)], asynchronous=False)  # partition 1: no committed offset
    c.close()

    def starts(init, **kw):
        return [s.start for s in build(kafka_broker, topic, starting=init, **kw).create_splits(1)]

    assert starts(KafkaOffsetsInitializer.earliest()) == [0, 0]
    assert starts(KafkaOffsetsInitializer.latest()) == [20, 20]
    assert starts(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.EARLIEST), group=group) == [7, 0]
    assert starts(KafkaOffsetsInitializer.committed_offsets(KafkaOffsetResetStrategy.LATEST), group=group) == [7, 20]
    with pytest.raises(KafkaOffsetOutOfRangeError, match=f"{topic}-1: group '{group}' has no committed offset"):
        starts(KafkaOffsetsInitializer.committed_offsets(), group=group)
    # the first offset whose timestamp is >= 5 s: partition 0 offset 5; partition 1 (all >= 100 s): 0
    assert starts(KafkaOffsetsInitializer.timestamp(base + 5000)) == [5, 0]
    # >= 150 s: partition 0 has none (its end, 20); partition 1's first is the late record at offset 5
    assert starts(KafkaOffsetsInitializer.timestamp(base + 150_000)) == [20, 5]
    given = KafkaOffsetsInitializer.offsets({KafkaTopicPartition(topic, 1): 13}, KafkaOffsetResetStrategy.LATEST)
    assert starts(given) == [20, 13]


def test_bounded_by_a_timestamp_stops_before_the_first_later_record(kafka_broker):
    topic = topic_name()
    kafka_broker.create_topic(topic, 1)
    base = 1_700_000_000_000
    produce(kafka_broker.bootstrap_servers, topic, list(range(20)), timestamps=[base + i for i in range(20)])
    src = build(kafka_broker, topic, bounded=KafkaOffsetsInitializer.timestamp(base + 12))
    [split] = src.create_splits(1)
    assert split.payload["stop"] == 12
    plan = src.plan(split, 0, 1000, 0.0)
    assert (plan.end, plan.finished) == (12, True)


def test_an_undeserializable_record_names_topic_partition_and_offset(kafka_broker):
    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    produce(kafka_broker.bootstrap_servers, topic, [b"ok", b"\xff\xfe", b"ok", b"ok"], partition_of=lambda i: 1)
    src = build(kafka_broker, topic)
    split = src.create_splits(1)[1]
    with pytest.raises(KafkaDeserializationError, match=rf"topic '{topic}', partition 1, offset 1 cannot be read by SimpleStringSchema") as e:
        read_split(src, split, 0, 4)
    assert (e.value.topic, e.value.partition, e.value.offset) == (topic, 1, 1)
    assert not e.value.recoverable and isinstance(e.value, FlowpointError)
    skipping = build(kafka_broker, topic, props={"deserialization.skip-errors": "true"})
    out, _, metrics = read_split(skipping, skipping.create_splits(1)[1], 0, 4)
    assert out == ["ok", "ok", "ok"] and metrics == {"numRecordsSkippedDeserialization": 1}
    json_skip = build(kafka_broker, topic, deserializer=JsonRowDeserializationSchema.builder()
                      .type_info(Types.ROW_NAMED(["a"], [Types.INT()])).ignore_parse_errors().build())
    out, _, metrics = read_split(json_skip, json_skip.create_splits(1)[1], 0, 4)
    assert out == [] and metrics == {"numRecordsSkippedDeserialization": 4}


def test_an_unreachable_broker_fails_within_the_timeout():
    import socket

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = (KafkaSource.builder().set_bootstrap_servers(f"127.0.0.1:{port}").set_topics("t")
           .set_value_only_deserializer(SimpleStringSchema()).set_property("default.api.timeout.ms", "1500").build())
    t0 = time.monotonic()
    with pytest.raises(KafkaUnreachableError, match=rf"127.0.0.1:{port} did not answer \(metadata\) within 1.5s.*default.api.timeout.ms"):
        src.create_splits(1)
    assert time.monotonic() - t0 < 5


def test_new_partitions_and_topics_of_a_pattern_are_discovered(kafka_broker):
    prefix = topic_name("disc")
    kafka_broker.create_topic(prefix + "-a", 1)
    src = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers)
           .set_topic_pattern(prefix.replace("-", r"\-") + r"\-.*").set_value_only_deserializer(SimpleStringSchema())
           .set_property("partition.discovery.interval.ms", "100").build())
    splits = src.create_splits(1)
    assert [s.split_id for s in splits] == [prefix + "-a-0"]
    assert src.discover_splits(splits) == []  # not yet due
    kafka_broker.create_topic(prefix + "-b", 2)
    produce(kafka_broker.bootstrap_servers, prefix + "-b", ["x", "y"], partitions=2)
    time.sleep(0.15)
    new = src.discover_splits(splits)
    assert [(s.split_id, s.start) for s in new] == [(prefix + "-b-0", 0), (prefix + "-b-1", 0)]
    time.sleep(0.15)
    assert src.discover_splits(splits + new) == []


def test_committed_offsets_on_checkpoint_completion(kafka_broker):
    from kafka_helpers import committed

    topic = topic_name()
    kafka_broker.create_topic(topic, 2)
    group = topic_name("g")
    src = build(kafka_broker, topic, group=group)
    splits = src.create_splits(1)
    src.notify_checkpoint_complete(3, [(splits[0], 5), (splits[1], 9)])
    assert committed(kafka_broker.bootstrap_servers, group, topic, 2) == {0: 5, 1: 9}
    off = build(kafka_broker, topic, group=group, props={"commit.offsets.on.checkpoint": "false"})
    off.notify_checkpoint_complete(4, [(splits[0], 6), (splits[1], 10)])
    assert committed(kafka_broker.bootstrap_servers, group, topic, 2) == {0: 5, 1: 9}


class StubView:
    """The driver's broker view with offsets set by the test (``marks``: partition -> (low, high))."""

    def __init__(self, marks):
        self.marks = marks

    def watermarks(self, tps):
        return {tp: self.marks[tp] for tp in tps if tp in self.marks}


def test_a_deleted_topic_pauses_its_partitions_and_a_recreated_one_follows_auto_offset_reset(caplog):
    """Without a broker: on Tansu, deleting a topic a consumer fetched from crashes that
    consumer's next metadata request (docs/kafka.md, Broker gaps), so this is planned against
    offsets the test sets."""
    from flowpoint.connectors.source import SourceSplit

    src = (KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_topics("t")
           .set_value_only_deserializer(SimpleStringSchema()).build())
    tp = KafkaTopicPartition("t", 0)
    split = SourceSplit("t-0", {"topic": "t", "partition": 0, "stop": None}, 0)
    src._view = StubView({tp: (0, 5)})
    assert src.plan(split, 0, 100, 0.0).end == 5
    src._view.marks = {}  # deleted
    src._watermarks_at = 0.0
    with caplog.at_level("WARNING", logger="flowpoint.connectors.kafka.source"):
        plan = src.plan(split, 5, 100, 0.0)
        assert (plan.end, plan.records, plan.finished) == (5, 0, False)
        assert "partition t-0 is gone" in caplog.text
        src._view.marks = {tp: (0, 2)}  # created again, 2 records
        src._watermarks_at = 0.0
        plan = src.plan(split, 5, 100, 0.0)
        assert (plan.end, plan.finished) == (2, False) and plan.records >= 1
        assert src.read_spec(split, 5, plan.end) == ("t", 0, 0, 2)  # read from the reset start
        assert "t-0: offset 5 is above the high watermark 2" in caplog.text
        assert "auto.offset.reset=earliest moves it to offset 0" in caplog.text
    latest = (KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_topics("t").set_property("auto.offset.reset", "latest")
              .set_value_only_deserializer(SimpleStringSchema()).build())
    latest._view = StubView({tp: (20, 30)})  # retention removed offsets below 20
    plan = latest.plan(split, 5, 100, 0.0)
    assert plan.end == 30 and latest.read_spec(split, 5, 30) == ("t", 0, 30, 30)
    bounded = (KafkaSource.builder().set_bootstrap_servers("127.0.0.1:1").set_topics("t")
               .set_value_only_deserializer(SimpleStringSchema()).set_bounded(KafkaOffsetsInitializer.latest()).build())
    bounded._view = StubView({})
    stopped = SourceSplit("t-0", {"topic": "t", "partition": 0, "stop": 9}, 0)
    assert bounded.plan(stopped, 3, 100, 0.0).finished  # a vanished partition ends a bounded read
