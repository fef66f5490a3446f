"""Executor side of the Kafka source: read exactly one planned offset range of one partition.

The driver planned ``[start, end)``; the task assigns the partition at ``start`` (no consumer
group, no subscription) and reads until the first offset at or past ``end``, so a retried or
recomputed task reads the same records. Offsets in the range that hold no record for the
consumer (transaction markers, compacted records) are passed over: the range ends when the
consumer's position or the partition's end reaches ``end``. A read borrows a consumer of its
configuration from its Python worker's pool (flowpoint/worker_resources.py): reads in threads of
one worker never share one.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

from flowpoint.connectors.kafka.deserialization import DeserializationSchema
from flowpoint.connectors.kafka.errors import KafkaDeserializationError, KafkaReadTimeoutError
from flowpoint.connectors.source import (
    OpenRead,
    SourceMetric,
    SourceReader,
    SourceSplit,
    TimestampedBatch,
)
from flowpoint.worker_resources import ClientPool, worker

BATCH = 10_000
SKIPPED_METRIC = "numRecordsSkippedDeserialization"

_READER_OVERRIDES = {
    "enable.auto.commit": False,
    "enable.auto.offset.store": False,
    "enable.partition.eof": True,
    "auto.offset.reset": "error",
}
_IDLE_CONSUMERS = 4  # consumers a worker keeps idle between reads (closed beyond that)


def _close(c: Any) -> None:
    c.close()


def _consumers() -> ClientPool:
    """This worker's reading consumers: lent to one read at a time (a read assigns its own
    partition), kept idle per configuration for the next read."""
    return worker().pool("kafka.reader-consumers", _IDLE_CONSUMERS, _close)


def _new_consumer(config: dict) -> Any:
    from confluent_kafka import Consumer

    conf = dict(config)
    conf.setdefault("group.id", "flowpoint-kafka-source")
    conf.setdefault("log_level", 2)
    # ranges are planned up to records that exist: a long-held fetch only delays the next
    # task's requests on this consumer's connection (see metadata.py)
    conf.setdefault("fetch.wait.max.ms", 10)
    conf.update(_READER_OVERRIDES)
    return Consumer(conf)


class KafkaSourceReader(SourceReader):
    def __init__(self, client_config: dict, deserializer: DeserializationSchema, skip_errors: bool, timeout_s: float):
        self.client_config = dict(client_config)
        self.deserializer = deserializer
        self.skip_errors = skip_errors or bool(getattr(deserializer, "ignore_parse_errors", False))
        self.timeout_s = timeout_s

    def read(self, split: SourceSplit, spec: Any) -> Iterator[Any]:
        topic, partition, start, end = spec
        if end <= start:
            return
        key = tuple(sorted((k, str(v)) for k, v in self.client_config.items()))
        with _consumers().lease(key, lambda: _new_consumer(self.client_config)) as c:
            yield from self._read(c, topic, partition, start, end)

    def _read(self, c: Any, topic: str, partition: int, start: int, end: int) -> Iterator[Any]:
        from confluent_kafka import KafkaError, TopicPartition

        tp = TopicPartition(topic, partition, start)
        c.assign([tp])
        deserialize = self.deserializer.deserialize
        records: list = []
        stamps: list = []
        skipped = 0
        next_offset = start
        deadline = time.monotonic() + self.timeout_s
        try:
            while next_offset < end:
                msgs = c.consume(min(BATCH, end - next_offset), 0.2)
                if not msgs:
                    pos = c.position([TopicPartition(topic, partition)])[0].offset
                    if pos >= end:
                        break
                    if time.monotonic() > deadline:
                        msg = (
                            f"Kafka partition {topic}-{partition}: offsets {next_offset}..{end - 1} of the planned "
                            f"range {start}..{end - 1} were not read within {self.timeout_s:g}s from "
                            f"{self.client_config.get('bootstrap.servers')}; the task is retried"
                        )
                        raise KafkaReadTimeoutError(msg)
                    continue
                deadline = time.monotonic() + self.timeout_s
                for m in msgs:
                    err = m.error()
                    if err is not None:
                        if err.code() == KafkaError._PARTITION_EOF:
                            if m.offset() >= end:
                                next_offset = end
                                break
                            continue
                        msg = f"Kafka partition {topic}-{partition} at offset {next_offset} (range {start}..{end - 1}): {err}"
                        raise KafkaReadTimeoutError(msg)
                    off = m.offset()
                    if off >= end:
                        next_offset = end
                        break
                    if off < next_offset:
                        continue
                    next_offset = off + 1
                    try:
                        value = deserialize(m.value())
                    except Exception as e:  # noqa: BLE001 - any failure of the user's schema
                        if self.skip_errors:
                            skipped += 1
                            continue
                        msg = (
                            f"Kafka record at topic {topic!r}, partition {partition}, offset {off} cannot be read by "
                            f"{type(self.deserializer).__name__}: {type(e).__name__}: {e}. Value: {m.value()!r:.120}. "
                            f"Fix the producer or the schema, or skip such records with the source property "
                            f"deserialization.skip-errors=true (they are counted in the metric {SKIPPED_METRIC})"
                        )
                        raise KafkaDeserializationError(msg, topic, partition, off) from None
                    records.append(value)
                    stamps.append(m.timestamp()[1])
                if len(records) >= BATCH:
                    yield TimestampedBatch(records, stamps)
                    records, stamps = [], []
        finally:
            c.unassign()
        if records:
            yield TimestampedBatch(records, stamps)
        if skipped:
            yield SourceMetric(SKIPPED_METRIC, skipped)

    def open(self, split: SourceSplit, position: int) -> OpenRead:
        """The continuous runtime: ``split`` read from ``position`` as records arrive."""
        return _OpenPartition(self, split, int(position))


class _OpenPartition(OpenRead):
    """One partition, assigned once to a consumer of its own and polled (no plan, no re-assign
    per read); the position is the offset after the last record polled, or the consumer's
    position past transaction markers. A bounded split ends at its ``stop`` offset."""

    def __init__(self, reader: KafkaSourceReader, split: SourceSplit, position: int) -> None:
        from confluent_kafka import Consumer, TopicPartition

        self.reader = reader
        self.topic = split.payload["topic"]
        self.partition = int(split.payload["partition"])
        self.stop = split.payload.get("stop")
        self.position = position
        conf = dict(reader.client_config)
        conf.setdefault("group.id", "flowpoint-kafka-source")
        conf.setdefault("log_level", 2)
        conf.setdefault("fetch.wait.max.ms", 5)
        conf.update(_READER_OVERRIDES)
        conf["enable.partition.eof"] = False
        self.consumer = Consumer(conf)
        self.consumer.assign([TopicPartition(self.topic, self.partition, position)])

    def poll(self, max_records: int, timeout_s: float) -> tuple[list, Any, bool]:
        if self.stop is not None and self.position >= self.stop:
            return [], self.position, True
        msgs = self.consumer.consume(max(1, max_records), timeout_s)
        records: list = []
        stamps: list = []
        skipped = 0
        deserialize = self.reader.deserializer.deserialize
        for m in msgs:
            err = m.error()
            if err is not None:
                msg = f"Kafka partition {self.topic}-{self.partition} at offset {self.position}: {err}"
                raise KafkaReadTimeoutError(msg)
            off = m.offset()
            if off < self.position:
                continue
            if self.stop is not None and off >= self.stop:
                self.position = self.stop
                break
            self.position = off + 1
            try:
                value = deserialize(m.value())
            except Exception as e:  # noqa: BLE001 - any failure of the user's schema
                if self.reader.skip_errors:
                    skipped += 1
                    continue
                msg = (
                    f"Kafka record at topic {self.topic!r}, partition {self.partition}, offset {off} cannot be read by "
                    f"{type(self.reader.deserializer).__name__}: {type(e).__name__}: {e}. Value: {m.value()!r:.120}. "
                    f"Fix the producer or the schema, or skip such records with the source property "
                    f"deserialization.skip-errors=true (they are counted in the metric {SKIPPED_METRIC})"
                )
                raise KafkaDeserializationError(msg, self.topic, self.partition, off) from None
            records.append(value)
            stamps.append(m.timestamp()[1])
        if not msgs:  # past transaction markers and aborted records: the consumer's own position
            from confluent_kafka import TopicPartition

            pos = self.consumer.position([TopicPartition(self.topic, self.partition)])[0].offset
            if pos >= 0 and pos > self.position:
                self.position = pos if self.stop is None else min(pos, self.stop)
        items: list = [TimestampedBatch(records, stamps)] if records else []
        if skipped:
            items.append(SourceMetric(SKIPPED_METRIC, skipped))
        return items, self.position, self.stop is not None and self.position >= self.stop

    def close(self) -> None:
        try:
            self.consumer.close()
        except Exception:  # noqa: BLE001 - best effort
            pass

