"""KafkaSource end to end on the embedded Tansu broker (``kafka_broker`` fixture), Spark local[2].

Spark-free tests of offset planning and the builder are in tests/test_kafka_source_planning.py.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

pytest.importorskip("confluent_kafka")

from checkpoint_jobs import Counting, expected_outputs, expected_state, key_of, record  # noqa: E402
from kafka_helpers import committed, produce, topic_name  # noqa: E402

from flowpoint import (  # noqa: E402
    CollectSink,
    Duration,
    JsonRowDeserializationSchema,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaTopicPartition,
    KeyedProcessFunction,
    RestartStrategies,
    SimpleStringSchema,
    Types,
    WatermarkStrategy,
)
from flowpoint.api.checkpointing import ExternalizedCheckpointCleanup  # noqa: E402
from flowpoint.connectors.kafka import KafkaDeserializationError, KafkaUnreachableError  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def source(broker, topic, bounded=True, starting=None, group=None, deserializer=None, **props):
    b = (
        KafkaSource.builder()
        .set_bootstrap_servers(broker.bootstrap_servers)
        .set_value_only_deserializer(deserializer or SimpleStringSchema())
        .set_property("default.api.timeout.ms", "10000")
    )
    b = b.set_topic_pattern(topic) if topic.startswith("^") else b.set_topics(topic)
    if starting is not None:
        b.set_starting_offsets(starting)
    if bounded:
        b.set_bounded(KafkaOffsetsInitializer.latest())
    if group:
        b.set_group_id(group)
    for k, v in props.items():
        b.set_property(k.replace("_", "."), str(v))
    return b.build()


def read_all(make_env, src, parallelism=2, max_records=None, strategy=None):
    env = make_env(parallelism=parallelism, max_records=max_records)
    sink = CollectSink()
    env.from_source(src, strategy, "kafka").sink_to(sink)
    result = env.execute("kafka read")
    return sink.results, result


# -- reading --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bounded_read_of_every_partition_in_offset_order(kafka_broker, make_env):
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    values = [f"v{i}" for i in range(300)]
    produce(kafka_broker.bootstrap_servers, topic, values, partitions=3)
    out, result = read_all(make_env, source(kafka_broker, topic), parallelism=2, max_records=50)
    assert sorted(out) == sorted(values)
    for p in range(3):  # each partition's records keep their offset order
        mine = [v for v in out if int(v[1:]) % 3 == p]
        assert mine == sorted(mine, key=lambda v: int(v[1:]))
    epochs = result.get_epoch_stats()
    assert max(n for _, n, _ in epochs) <= 50, "an epoch read more than execution.epoch.max-records"
