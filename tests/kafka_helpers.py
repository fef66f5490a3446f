"""Helpers of the Kafka source tests: unique topic names, producing records with chosen
partitions and timestamps, and reading a topic back."""

from __future__ import annotations

import itertools
import os
import uuid

_counter = itertools.count()


def topic_name(prefix: str = "t") -> str:
    return f"{prefix}-{os.getpid()}-{next(_counter)}-{uuid.uuid4().hex[:6]}"


def produce(bootstrap: str, topic: str, values: list, partitions: int = 1, timestamps: list | None = None,
            partition_of=None) -> None:
    """Produce ``values`` (str or bytes) to ``topic``; record ``i`` goes to ``partition_of(i)``
    (default ``i % partitions``) with timestamp ``timestamps[i]`` when given."""
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "log_level": 2})
    for i, v in enumerate(values):
        part = partition_of(i) if partition_of is not None else i % partitions
        data = v if isinstance(v, bytes) else str(v).encode()
        if timestamps is not None:
            p.produce(topic, value=data, partition=part, timestamp=int(timestamps[i]))
        else:
            p.produce(topic, value=data, partition=part)
        if i % 5000 == 4999:
            p.flush()
    assert p.flush(30) == 0, "records were not delivered"


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> dict[int, int]:
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False, "log_level": 2})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {t.partition: t.offset for t in got if t.offset >= 0}
    finally:
        c.close()
