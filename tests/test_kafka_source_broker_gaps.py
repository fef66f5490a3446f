"""The embedded broker's (Tansu's) gaps against Apache Kafka that docs/kafka.md lists, measured.
If one of these fails, the broker changed: update docs/kafka.md (and the workaround) with it.
No Spark."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

pytest.importorskip("confluent_kafka")

from kafka_helpers import produce, topic_name  # noqa: E402

pytestmark = pytest.mark.timeout(120)


def consumer(broker, **conf):
    from confluent_kafka import Consumer

    base = {"bootstrap.servers": broker.bootstrap_servers, "group.id": "gaps", "enable.auto.commit": False, "log_level": 2}
    base.update(conf)
    return Consumer(base)


def test_list_offsets_latest_answers_the_last_batch_base_offset_plus_one(kafka_broker):
    from confluent_kafka import Producer, TopicPartition

    topic = topic_name("gap1")
    kafka_broker.create_topic(topic, 1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "linger.ms": 200, "log_level": 2})
    for i in range(10):
        p.produce(topic, value=str(i).encode(), partition=0)
    p.flush()
    c = consumer(kafka_broker, **{"enable.partition.eof": True})
    try:
        assert c.get_watermark_offsets(TopicPartition(topic, 0), timeout=5, cached=False) == (0, 1)
        c.assign([TopicPartition(topic, 0, 9)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is not None and m.error() is not None:
                break
        assert c.get_watermark_offsets(TopicPartition(topic, 0), cached=True)[1] == 10  # the fetch knows
    finally:
        c.close()


def test_offsets_for_times_ignores_the_timestamp(kafka_broker):
    from confluent_kafka import TopicPartition

    topic = topic_name("gap2")
    kafka_broker.create_topic(topic, 1)
    base = 1_700_000_000_000
    produce(kafka_broker.bootstrap_servers, topic, list(range(15)), timestamps=[base + 1000 * i for i in range(15)])
    c = consumer(kafka_broker)
    try:
        assert c.offsets_for_times([TopicPartition(topic, 0, base + 7000)], timeout=5)[0].offset == 0  # Kafka: 7
        assert c.offsets_for_times([TopicPartition(topic, 0, base + 99_000)], timeout=5)[0].offset == 0  # Kafka: -1
    finally:
        c.close()


def test_read_committed_consumers_see_aborted_records(kafka_broker):
    from confluent_kafka import Producer, TopicPartition

    topic = topic_name("gap3")
    kafka_broker.create_topic(topic, 1)
    p = Producer({"bootstrap.servers": kafka_broker.bootstrap_servers, "transactional.id": topic, "log_level": 2})
    p.init_transactions(10)
    p.begin_transaction()
    p.produce(topic, b"aborted", partition=0)
    p.flush()
    p.abort_transaction()
    p.begin_transaction()
    p.produce(topic, b"committed", partition=0)
    p.commit_transaction()
    c = consumer(kafka_broker, **{"isolation.level": "read_committed", "enable.partition.eof": True})
    got = []
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(got) < 2:
            m = c.poll(0.2)
            if m is not None and m.error() is None:
                got.append((m.offset(), m.value()))
    finally:
        c.close()
    assert got == [(0, b"aborted"), (2, b"committed")]  # Kafka: [(2, b"committed")]


def test_a_new_group_s_first_assignment_waits_about_half_the_session_timeout(kafka_broker):
    topic = topic_name("gap4")
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker.bootstrap_servers, topic, ["x"])
    c = consumer(kafka_broker, **{"group.id": f"gap4-{uuid.uuid4().hex}", "session.timeout.ms": 6000, "auto.offset.reset": "earliest"})
    try:
        t0 = time.monotonic()
        c.subscribe([topic])
        m = None
        while m is None and time.monotonic() - t0 < 20:
            m = c.poll(0.2)
        waited = time.monotonic() - t0
    finally:
        c.close()
    assert m is not None and 2.0 < waited < 6.0, waited


def test_deleting_a_topic_a_consumer_fetched_from_crashes_its_next_metadata_request(kafka_broker):
    topic = topic_name("gap5")
    kafka_broker.create_topic(topic, 1)
    produce(kafka_broker.bootstrap_servers, topic, list(range(5)))
    script = textwrap.dedent(f"""
        import time
        from confluent_kafka import Consumer, TopicPartition
        from confluent_kafka.admin import AdminClient
        c = Consumer({{"bootstrap.servers": "{kafka_broker.bootstrap_servers}", "group.id": "gap5", "log_level": 2,
                      "enable.partition.eof": True}})
        c.get_watermark_offsets(TopicPartition("{topic}", 0), timeout=5, cached=False)
        c.assign([TopicPartition("{topic}", 0, 4)])
        c.consume(10, 0.3)
        c.unassign()
        admin = AdminClient({{"bootstrap.servers": "{kafka_broker.bootstrap_servers}"}})
        admin.delete_topics(["{topic}"])["{topic}"].result(10)
        time.sleep(0.1)
        print("listed", "{topic}" in c.list_topics(timeout=5).topics, flush=True)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, env=dict(os.environ))
    assert proc.returncode == -11 and "listed" not in proc.stdout, (proc.returncode, proc.stdout, proc.stderr[-2000:])
