"""KafkaSink on the embedded Tansu broker: the builder's refusals, NONE / AT_LEAST_ONCE /
EXACTLY_ONCE end to end on Spark local[2], and EXACTLY_ONCE's two-phase commit through crashes
(driver-side protocol, Spark-free: a crash before and after a commit, a zombie transaction).

Tansu's read_committed consumer also returns records of aborted transactions (docs/kafka.md,
"Broker gaps"), so these tests read everything and assert what that broker lets us see: the
output holds every expected record exactly once, so no aborted transaction held data the
commit then wrote again, and nothing committed was written twice.
"""

from __future__ import annotations

import os
from collections import Counter

import pytest

pytest.importorskip("confluent_kafka")

from checkpoint_jobs import Counting, expected_outputs, key_of, record  # noqa: E402
from kafka_helpers import produce, topic_name  # noqa: E402

from flowpoint import (  # noqa: E402
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    RestartStrategies,
    SimpleStringSchema,
)
from flowpoint.connectors.kafka import KafkaError  # noqa: E402
from flowpoint.connectors.kafka.errors import KafkaConfigurationError  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def serializer(topic, key=False):
    b = KafkaRecordSerializationSchema.builder().set_topic(topic).set_value_serialization_schema(SimpleStringSchema())
    if key:
        b.set_key_serialization_schema(KeyOf())
    return b.build()


class KeyOf(SimpleStringSchema):
    def serialize(self, element):
        return str(element).split(",")[0].encode()


def sink(broker, topic, guarantee, prefix=None, key=False, **props):
    b = (KafkaSink.builder().set_bootstrap_servers(broker.bootstrap_servers).set_record_serializer(serializer(topic, key))
         .set_delivery_guarantee(guarantee))
    if prefix:
        b.set_transactional_id_prefix(prefix)
    for k, v in props.items():
        b.set_property(k.replace("_", "."), v)
    return b.build()


def read_topic(broker, topic, partitions=1) -> list[tuple[int, int, bytes | None, str]]:
    """Every record of ``topic``: (partition, offset, key, value), up to the high watermarks."""
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic_name("reader"),
                  "enable.auto.commit": False, "log_level": 2, "fetch.wait.max.ms": 10})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        out = []
        todo = {p for p, e in ends.items() if e > 0}
        while todo:
            m = c.poll(10)
            assert m is not None, f"timed out reading {topic}; still to read: {todo}"
            if m.error():
                continue
            out.append((m.partition(), m.offset(), m.key(), m.value().decode()))
            # control records (transaction markers) take offsets too: the last data record may end below the end
            if m.offset() >= ends[m.partition()] - 2:
                todo.discard(m.partition())
        # drain what is left up to the ends
        while True:
            m = c.poll(0.5)
            if m is None:
                break
            if not m.error():
                out.append((m.partition(), m.offset(), m.key(), m.value().decode()))
        return out
    finally:
        c.close()


def values(records) -> list[str]:
    return [v for _, _, _, v in records]


# -- the builder --------------------------------------------------------------------------------


def test_the_builder_refuses_what_cannot_work():
    ser = serializer("t")
    base = KafkaSink.builder().set_bootstrap_servers("127.0.0.1:1")
    with pytest.raises(KafkaConfigurationError, match="set_transactional_id_prefix"):
        base.set_record_serializer(ser).set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).build()
    with pytest.raises(KafkaConfigurationError, match="set_record_serializer"):
        KafkaSink.builder().set_bootstrap_servers("127.0.0.1:1").build()
    with pytest.raises(KafkaConfigurationError, match="set_bootstrap_servers"):
        KafkaSink.builder().set_record_serializer(ser).build()
    with pytest.raises(KafkaConfigurationError, match="DeliveryGuarantee"):
        KafkaSink.builder().set_delivery_guarantee("exactly-once")
    with pytest.raises(KafkaConfigurationError, match="refused its properties"):
        KafkaSink.builder().set_bootstrap_servers("127.0.0.1:1").set_record_serializer(ser).set_property("no.such.property", "1").build()
    with pytest.raises(KafkaConfigurationError, match="set_value_serialization_schema"):
        KafkaRecordSerializationSchema.builder().set_topic("t").build()
    with pytest.raises(KafkaConfigurationError, match="exactly one of set_topic"):
        KafkaRecordSerializationSchema.builder().set_value_serialization_schema(SimpleStringSchema()).build()


def test_transaction_timeout_shorter_than_the_checkpoint_interval_fails_at_job_start(make_env, tmp_path):
    env = make_env(parallelism=1, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(120_000)
    s = (KafkaSink.builder().set_bootstrap_servers("127.0.0.1:1").set_record_serializer(serializer("t"))
         .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix("p")
         .set_property("transaction.timeout.ms", 60_000).build())
    env.from_collection([1, 2, 3]).map(str).sink_to(s)
    with pytest.raises(KafkaConfigurationError) as info:
        env.execute("timeout check")
    assert "transaction.timeout.ms 60000" in str(info.value) and "120000" in str(info.value)


# -- end to end on Spark ------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("guarantee", [DeliveryGuarantee.NONE, DeliveryGuarantee.AT_LEAST_ONCE, DeliveryGuarantee.EXACTLY_ONCE])
def test_every_guarantee_writes_each_record_with_its_key(kafka_broker, make_env, tmp_path, guarantee):
    topic = topic_name("out")
    kafka_broker.create_topic(topic, 3)
    env = make_env(parallelism=2, max_records=40, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    data = [f"k{i % 7},{i}" for i in range(200)]
    env.from_collection(data).sink_to(sink(kafka_broker, topic, guarantee, prefix=topic_name("tx"), key=True))
    env.execute(f"kafka sink {guarantee.name}")
    got = read_topic(kafka_broker, topic, 3)
    assert sorted(values(got)) == sorted(data)
    partitions_of_key: dict = {}
    for partition, _, key, value in got:
        assert key.decode() == value.split(",")[0]
        partitions_of_key.setdefault(key, set()).add(partition)
    assert all(len(p) == 1 for p in partitions_of_key.values())  # one key, one partition (Kafka's partitioner)


EVENTS = 900


@pytest.mark.slow
@pytest.mark.parametrize(("parallelism", "backend"), [(1, "hashmap"), pytest.param(3, "rocksdb", marks=pytest.mark.compat)])
def test_exactly_once_keyed_count_through_a_failure_writes_each_result_once(kafka_broker, make_env, tmp_path, parallelism, backend):
    """Kafka in, keyed count, Kafka out EXACTLY_ONCE; a record fails every task attempt until
    the job restarts from its last checkpoint: the epochs after it run again, and their results
    are in Kafka once, because only completed checkpoints' results were committed."""
    src_topic, out_topic = topic_name("in"), topic_name("out")
    kafka_broker.create_topic(src_topic, 4)
    kafka_broker.create_topic(out_topic, 2)
    produce(kafka_broker.bootstrap_servers, src_topic, [record(i) for i in range(EVENTS)], partitions=4)
    env = make_env(parallelism=parallelism, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"))
    env.get_configuration().set("state.backend.type", backend)
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    source = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers).set_topics(src_topic)
              .set_value_only_deserializer(SimpleStringSchema()).set_bounded(KafkaOffsetsInitializer.latest())
              .set_property("default.api.timeout.ms", "10000").build())
    (
        env.from_source(source, None, "kafka").uid("kafka")
        .map(int).key_by(key_of)
        .process(Counting(fail_value=record(700), flag=flag)).uid("counting")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink(kafka_broker, out_topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=topic_name("tx"))).uid("kafka-out")
    )
    result = env.execute("kafka exactly once")
    assert os.path.exists(flag), "the injected failure never happened"
    assert any(s.status == "COMPLETED" for s in result.get_checkpoint_stats())
    got = Counter(values(read_topic(kafka_broker, out_topic, 2)))
    expected = Counter(f"{k},{n}" for k, n in expected_outputs(EVENTS))
    assert got == expected, (
        f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"
    )


@pytest.mark.slow
def test_exactly_once_through_a_savepoint_and_a_restore_at_another_parallelism(kafka_broker, make_env, tmp_path):
    """Stop with a savepoint at parallelism 2 (the sink commits what the job staged up to it),
    restore from the savepoint at parallelism 3: the output topic holds every result once.
    (A savepoint taken while checkpoints go on is not a point to rewind Kafka to: transactions
    that later checkpoints committed stay committed, in Flink too; so the job stops with it.)"""
    import time

    src_topic, out_topic, prefix = topic_name("in"), topic_name("out"), topic_name("tx")
    kafka_broker.create_topic(src_topic, 4)
    kafka_broker.create_topic(out_topic, 2)
    produce(kafka_broker.bootstrap_servers, src_topic, [record(i) for i in range(EVENTS)], partitions=4)

    def job(env):
        env.enable_checkpointing(1)
        source = (KafkaSource.builder().set_bootstrap_servers(kafka_broker.bootstrap_servers).set_topics(src_topic)
                  .set_value_only_deserializer(SimpleStringSchema()).set_bounded(KafkaOffsetsInitializer.latest()).build())
        (env.from_source(source, None, "kafka").uid("kafka")
         .map(int).key_by(key_of).process(Counting()).uid("counting")
         .map(lambda kv: f"{kv[0]},{kv[1]}")
         .sink_to(sink(kafka_broker, out_topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=prefix)).uid("kafka-out"))

    env = make_env(parallelism=2, max_records=60, state_checkpoints_dir=str(tmp_path / "ck"))
    job(env)
    client = env.execute_async("kafka exactly once, savepointed")
    deadline = time.monotonic() + 120
    while client.progress().epoch < 5 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client.is_done(), "the job ended before the savepoint"
    path = client.stop_with_savepoint(str(tmp_path / "sp"))
    client.wait(60)
    got_before = Counter(values(read_topic(kafka_broker, out_topic, 2)))
    assert 0 < sum(got_before.values()) < EVENTS, "the savepoint should cut the input"
    env2 = make_env(parallelism=3, max_records=200, state_checkpoints_dir=str(tmp_path / "ck2"))
    env2.get_configuration().set("execution.savepoint.path", path)
    job(env2)
    env2.execute("kafka exactly once, restored at parallelism 3")
    got = Counter(values(read_topic(kafka_broker, out_topic, 2)))
    expected = Counter(f"{k},{n}" for k, n in expected_outputs(EVENTS))
    assert got == expected, (
        f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"
    )


# -- the two-phase commit through crashes (driver side, no Spark) ------------------------------


def _eo_sink(broker, topic, prefix):
    return sink(broker, topic, DeliveryGuarantee.EXACTLY_ONCE, prefix=prefix)


@pytest.mark.slow
def test_a_restore_commits_what_the_crash_left_uncommitted_and_never_writes_a_batch_twice(kafka_broker):
    from confluent_kafka import Producer

    topic, prefix = topic_name("out"), topic_name("tx")
    kafka_broker.create_topic(topic, 1)

    def rec(v):
        return (topic, None, v.encode())

    first = _eo_sink(kafka_broker, topic, prefix)
    first.on_job_start(1000)
    first.restore_driver_state(None)
    first.on_epoch_committed(1, [(0, [rec("a1"), rec("a2")])], 1)
    first.snapshot_driver_state()
    assert values(read_topic(kafka_broker, topic)) == []  # staged, not committed before the checkpoint completes
    first.notify_checkpoint_complete(1)
    assert values(read_topic(kafka_broker, topic)) == ["a1", "a2"]
    first.on_epoch_committed(2, [(0, [rec("b1")])], 1)
    state2 = first.snapshot_driver_state()  # checkpoint 2 is taken ...
    first.on_epoch_committed(3, [(0, [rec("c1")])], 1)  # ... an epoch after it committed, then the driver dies
    assert values(read_topic(kafka_broker, topic)) == ["a1", "a2"]

    # restore from checkpoint 2, which completed but whose commit never ran: b1 is committed now
    second = _eo_sink(kafka_broker, topic, prefix)
    second.restore_driver_state(state2)
    assert values(read_topic(kafka_broker, topic)) == ["a1", "a2", "b1"]
    second.on_epoch_committed(3, [(0, [rec("c1")])], 1)  # the replayed epoch
    second.on_job_end("FINISHED")
    assert values(read_topic(kafka_broker, topic)) == ["a1", "a2", "b1", "c1"]

    # a second restore from checkpoint 2 (the driver died after the commit): b1 is not written again
    third = _eo_sink(kafka_broker, topic, prefix)
    third.restore_driver_state(state2)
    third.on_job_end("CANCELED")
    assert values(read_topic(kafka_broker, topic)) == ["a1", "a2", "b1", "c1"]

    # a zombie of an earlier run holding an open transaction under the same id is fenced
    zombie = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "transactional.id": f"{prefix}-0", "log_level": 0})
    zombie.init_transactions(10)
    zombie.begin_transaction()
    zombie.produce(topic, value=b"zombie")
    zombie.flush(10)
    fourth = _eo_sink(kafka_broker, topic, prefix)
    fourth.restore_driver_state(None)
    fourth.on_epoch_committed(1, [(0, [rec("d1")])], 1)
    fourth.snapshot_driver_state()
    fourth.notify_checkpoint_complete(1)  # init_transactions fenced the zombie and aborted its transaction
    from confluent_kafka import KafkaException

    with pytest.raises(KafkaException):
        zombie.commit_transaction(5)
    fourth.on_job_end("FINISHED")
    assert values(read_topic(kafka_broker, topic))[-1] == "d1"


@pytest.mark.slow
def test_an_unreachable_broker_fails_the_commit_clearly(make_env, tmp_path):
    env = make_env(parallelism=1, state_checkpoints_dir=str(tmp_path / "ck"))
    env.set_restart_strategy(RestartStrategies.no_restart())
    s = (KafkaSink.builder().set_bootstrap_servers("127.0.0.1:9").set_record_serializer(serializer("t"))
         .set_delivery_guarantee(DeliveryGuarantee.EXACTLY_ONCE).set_transactional_id_prefix("unreachable")
         .set_property("socket.timeout.ms", 5000).build())
    env.from_collection(["x"]).sink_to(s)
    with pytest.raises(KafkaError, match="127.0.0.1:9"):
        env.execute("unreachable")
