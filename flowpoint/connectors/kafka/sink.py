"""``KafkaSink`` with PyFlink's builder: NONE, AT_LEAST_ONCE and EXACTLY_ONCE delivery.

NONE and AT_LEAST_ONCE: each sink task produces its records with confluent-kafka while the
epoch runs; AT_LEAST_ONCE waits at the end of the task until the broker acknowledged every
record and fails the task (Spark retries it, the restart strategy applies) if one was not.
A retried task or a restart from a checkpoint writes its records again: at least once.

EXACTLY_ONCE is Flink's two-phase commit, adapted to two facts: librdkafka cannot resume a
transaction another process opened (Flink's ``resumeTransaction``), and a Spark task lives for
one epoch. So:

* pre-commit: a sink task serializes its epoch's records and returns them with its
  acknowledgement; once the epoch commits they are staged on the driver. At a checkpoint's
  trigger the staged records become a numbered batch that is part of the checkpoint
  (``snapshot_driver_state``, in ``_metadata``).
* commit: when that checkpoint completes, the driver writes every batch up to it in one Kafka
  transaction (``transactional.id`` = ``<prefix>-0``; ``init_transactions`` fences and aborts
  whatever an earlier, crashed run left open under that id) together with a marker: the batch
  number committed as the offset of a marker consumer group, atomically with the records
  (``send_offsets_to_transaction``).
* recovery: a restore from checkpoint N brings N's batches back; each batch whose number the
  marker already shows was committed before the crash and is not written again; the others are
  committed. Records of epochs after N were never committed (they are replayed).

A finished bounded job commits what is left at its end. Records of one checkpoint interval are
therefore held by the driver and in the checkpoint's ``_metadata`` until committed: right for
aggregated output (window results), not for a firehose (use AT_LEAST_ONCE there). See
docs/kafka.md ("Sink").
"""

from __future__ import annotations

import enum
import logging
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any

from flowpoint.connectors.kafka.deserialization import SerializationSchema
from flowpoint.connectors.kafka.errors import KafkaConfigurationError, KafkaError
from flowpoint.connectors.sinks import Sink, SinkWriter

log = logging.getLogger("flowpoint")

DEFAULT_TRANSACTION_TIMEOUT_MS = 15 * 60 * 1000  # Kafka brokers' default transaction.max.timeout.ms
_TIMEOUT_S = 30.0


class DeliveryGuarantee(enum.Enum):
    """PyFlink's ``pyflink.datastream.connectors.base.DeliveryGuarantee``."""

    EXACTLY_ONCE = "exactly-once"
    AT_LEAST_ONCE = "at-least-once"
    NONE = "none"


# -- record serialization --------------------------------------------------------------------


class KafkaTopicSelector(ABC):
    """Picks a record's topic: ``apply(record) -> str`` (``set_topic_selector`` also takes a
    plain function)."""

    @abstractmethod
    def apply(self, data: Any) -> str: ...


class KafkaRecordSerializationSchema:
    """Turns a record into (topic, key bytes, value bytes) as Flink's does."""

    def __init__(self, topic: str | None, topic_selector: Callable[[Any], str] | None,
                 value_schema: SerializationSchema, key_schema: SerializationSchema | None):
        self.topic = topic
        self.topic_selector = topic_selector
        self.value_schema = value_schema
        self.key_schema = key_schema

    @staticmethod
    def builder() -> KafkaRecordSerializationSchemaBuilder:
        return KafkaRecordSerializationSchemaBuilder()

    def serialize(self, element: Any) -> tuple[str, bytes | None, bytes]:
        topic = self.topic if self.topic_selector is None else self.topic_selector(element)
        key = None if self.key_schema is None else self.key_schema.serialize(element)
        return topic, key, self.value_schema.serialize(element)


class KafkaRecordSerializationSchemaBuilder:
    def __init__(self) -> None:
        self._topic: str | None = None
        self._selector: Callable[[Any], str] | None = None
        self._value: SerializationSchema | None = None
        self._key: SerializationSchema | None = None

    def set_topic(self, topic: str) -> KafkaRecordSerializationSchemaBuilder:
        self._topic = topic
        return self

    def set_topic_selector(self, selector: KafkaTopicSelector | Callable[[Any], str]) -> KafkaRecordSerializationSchemaBuilder:
        self._selector = selector.apply if isinstance(selector, KafkaTopicSelector) else selector
        return self

    def set_value_serialization_schema(self, schema: SerializationSchema) -> KafkaRecordSerializationSchemaBuilder:
        self._value = _schema(schema, "set_value_serialization_schema")
        return self

    def set_key_serialization_schema(self, schema: SerializationSchema) -> KafkaRecordSerializationSchemaBuilder:
        self._key = _schema(schema, "set_key_serialization_schema")
        return self

    def build(self) -> KafkaRecordSerializationSchema:
        if (self._topic is None) == (self._selector is None):
            msg = "KafkaRecordSerializationSchema needs exactly one of set_topic(...) and set_topic_selector(...)"
            raise KafkaConfigurationError(msg)
        if self._value is None:
            msg = "KafkaRecordSerializationSchema needs set_value_serialization_schema(...), e.g. SimpleStringSchema()"
            raise KafkaConfigurationError(msg)
        return KafkaRecordSerializationSchema(self._topic, self._selector, self._value, self._key)


def _schema(schema: Any, where: str) -> SerializationSchema:
    if not callable(getattr(schema, "serialize", None)):
        msg = f"{where} needs a SerializationSchema (e.g. SimpleStringSchema()); got {schema!r:.80}"
        raise KafkaConfigurationError(msg)
    return schema


# -- the sink --------------------------------------------------------------------------------


class KafkaSinkBuilder:
    def __init__(self) -> None:
        self._bootstrap: str | None = None
        self._serializer: KafkaRecordSerializationSchema | None = None
        self._guarantee = DeliveryGuarantee.NONE  # Flink's default
        self._prefix: str | None = None
        self._properties: dict[str, Any] = {}

    def set_bootstrap_servers(self, servers: str) -> KafkaSinkBuilder:
        self._bootstrap = servers
        return self

    def set_record_serializer(self, serializer: KafkaRecordSerializationSchema) -> KafkaSinkBuilder:
        if not isinstance(serializer, KafkaRecordSerializationSchema):
            msg = f"set_record_serializer needs KafkaRecordSerializationSchema.builder()...build(); got {serializer!r:.80}"
            raise KafkaConfigurationError(msg)
        self._serializer = serializer
        return self

    def set_delivery_guarantee(self, guarantee: DeliveryGuarantee) -> KafkaSinkBuilder:
        if not isinstance(guarantee, DeliveryGuarantee):
            msg = f"set_delivery_guarantee needs DeliveryGuarantee.NONE, AT_LEAST_ONCE or EXACTLY_ONCE; got {guarantee!r}"
            raise KafkaConfigurationError(msg)
        self._guarantee = guarantee
        return self

    def set_transactional_id_prefix(self, prefix: str) -> KafkaSinkBuilder:
        self._prefix = prefix
        return self

    def set_property(self, key: str, value: Any) -> KafkaSinkBuilder:
        self._properties[key] = value
        return self

    def build(self) -> KafkaSink:
        if not self._bootstrap and "bootstrap.servers" not in self._properties:
            msg = "KafkaSink needs set_bootstrap_servers(...)"
            raise KafkaConfigurationError(msg)
        if self._serializer is None:
            msg = "KafkaSink needs set_record_serializer(KafkaRecordSerializationSchema.builder()...build())"
            raise KafkaConfigurationError(msg)
        if self._guarantee is DeliveryGuarantee.EXACTLY_ONCE and not self._prefix:
            msg = ("KafkaSink with DeliveryGuarantee.EXACTLY_ONCE needs set_transactional_id_prefix(...): a prefix unique "
                   "to this job among all jobs writing to the cluster (transactions of the same id fence each other)")
            raise KafkaConfigurationError(msg)
        config = {k: str(v) if not isinstance(v, (int, float, bool)) else v for k, v in self._properties.items()}
        if self._bootstrap:
            config["bootstrap.servers"] = self._bootstrap
        _check_producer_config(config)
        return KafkaSink(config, self._serializer, self._guarantee, self._prefix)


class KafkaSink(Sink):
    """``stream.sink_to(KafkaSink.builder()...build())``."""

    def __init__(self, client_config: dict, serializer: KafkaRecordSerializationSchema,
                 guarantee: DeliveryGuarantee, transactional_id_prefix: str | None):
        self.client_config = dict(client_config)
        self.serializer = serializer
        self.delivery_guarantee = guarantee
        self.transactional_id_prefix = transactional_id_prefix
        self.guarantee = "exactly-once" if guarantee is DeliveryGuarantee.EXACTLY_ONCE else "at-least-once"
        self._driver_reset()

    @staticmethod
    def builder() -> KafkaSinkBuilder:
        return KafkaSinkBuilder()

    def default_name(self) -> str:
        return "KafkaSink"

    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter:
        if self.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE:
            return _StagingWriter(self.serializer)
        return _ProducingWriter(self.client_config, self.serializer, self.delivery_guarantee)

    # -- driver side (EXACTLY_ONCE) ----------------------------------------------------------

    def _driver_reset(self) -> None:
        self._driver_pending: list = []  # records of committed epochs since the last snapshot
        self._driver_batches: list = []  # [[batch number, records]] staged in checkpoints, not yet in Kafka
        self._driver_next = 1
        self._driver_marker: str | None = None
        self._driver_restored: set = set()  # batch numbers that came back with a restore
        self._driver_producer: Any = None

    @property
    def transaction_timeout_ms(self) -> int:
        return int(self.client_config.get("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS))

    def on_job_start(self, checkpoint_interval_ms: int | None) -> None:
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return
        self.restore_driver_state(None)  # a fresh start; a restore, which comes after this, replaces it
        timeout = self.transaction_timeout_ms
        if checkpoint_interval_ms is not None and timeout <= checkpoint_interval_ms:
            msg = (
                f"KafkaSink (EXACTLY_ONCE, prefix {self.transactional_id_prefix!r}): transaction.timeout.ms {timeout} "
                f"is not longer than the checkpoint interval {checkpoint_interval_ms} ms; records wait up to a checkpoint "
                f"interval for their commit, so the broker could abort them. Set .set_property('transaction.timeout.ms', ...) "
                f"above the interval (and at most the broker's transaction.max.timeout.ms, 15 min by default), or "
                f"checkpoint more often"
            )
            raise KafkaConfigurationError(msg)

    def restore_driver_state(self, state: Any) -> None:
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return
        self._driver_close()
        self._driver_reset()
        if state is None:
            self._driver_marker = f"flowpoint-sink-{self.transactional_id_prefix}-{uuid.uuid4().hex[:12]}"
            return
        self._driver_marker = state["marker"]
        self._driver_next = int(state["next"])
        self._driver_batches = [[int(n), [tuple(r) for r in records]] for n, records in state["batches"]]
        self._driver_restored = {n for n, _ in self._driver_batches}
        if self._driver_batches:
            # the checkpoint we restored completed: its batches belong in Kafka now (Flink's
            # recoverAndCommit); those the marker shows were committed before the crash are not
            # written again
            self._commit()

    def on_epoch_committed(self, epoch: int, payloads: list[tuple[int, Any]], parallelism: int) -> None:
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return
        for _, records in payloads:
            self._driver_pending.extend(records)

    def snapshot_driver_state(self) -> Any:
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return None
        if self._driver_pending:
            self._driver_batches.append([self._driver_next, self._driver_pending])
            self._driver_next += 1
            self._driver_pending = []
        return {"marker": self._driver_marker, "next": self._driver_next,
                "batches": [[n, [list(r) for r in records]] for n, records in self._driver_batches]}

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.delivery_guarantee is DeliveryGuarantee.EXACTLY_ONCE and self._driver_batches:
            self._commit()

    def on_job_end(self, status: str) -> None:
        if self.delivery_guarantee is not DeliveryGuarantee.EXACTLY_ONCE:
            return
        try:
            if status == "FINISHED":
                # every epoch committed and none will be replayed: what is left is final
                self.snapshot_driver_state()
                if self._driver_batches:
                    self._commit()
        finally:
            self._driver_close()

    def _commit(self) -> None:
        from confluent_kafka import Consumer, KafkaException, TopicPartition

        batches = self._driver_batches
        if not batches:
            return
        producer = self._transactional_producer()
        marker_tp = TopicPartition(self._marker_topic(batches), 0)
        consumer = Consumer({"bootstrap.servers": self.client_config["bootstrap.servers"], "group.id": self._driver_marker,
                             "enable.auto.commit": False})
        try:
            if self._driver_restored & {n for n, _ in batches}:
                committed = consumer.committed([marker_tp], timeout=self._timeout_s())[0].offset
                done = {n for n in self._driver_restored if n <= committed}
                if done:
                    log.info("KafkaSink %s: batches %s were committed before the restore; not written again",
                             self.transactional_id_prefix, sorted(done))
                batches = [b for b in batches if b[0] not in done]
            self._driver_restored = set()
            if not batches:
                self._driver_batches = []
                return
            last = self._driver_batches[-1][0]
            producer.begin_transaction()
            count = 0
            for _, records in batches:
                for topic, key, value in records:
                    self._produce(producer, topic, key, value)
                    count += 1
            producer.send_offsets_to_transaction([TopicPartition(marker_tp.topic, 0, last)],
                                                 consumer.consumer_group_metadata(), self._timeout_s())
            producer.commit_transaction(self._timeout_s())
        except KafkaException as e:
            self._driver_close()
            err = e.args[0] if e.args else e
            msg = (f"KafkaSink {self.transactional_id_prefix!r}: committing the transaction of batches up to {batches[-1][0] if batches else '-'} "
                   f"failed: {getattr(err, 'str', lambda: err)()}; the job restarts from its last checkpoint, whose batches "
                   f"are committed then (none twice)")
            raise KafkaError(msg) from None
        finally:
            consumer.close()
        self._driver_batches = []
        log.debug("KafkaSink %s: committed %d records (batches up to %d)", self.transactional_id_prefix, count, last)

    def _timeout_s(self) -> float:
        """How long a commit's broker calls may take: ``socket.timeout.ms`` if set, else 30 s."""
        return float(self.client_config.get("socket.timeout.ms", _TIMEOUT_S * 1000)) / 1000

    def _marker_topic(self, batches: list) -> str:
        if self.serializer.topic:
            return self.serializer.topic
        for _, records in batches:
            for r in records:
                return r[0]
        return "flowpoint-sink-marker"

    @staticmethod
    def _produce(producer: Any, topic: str, key: Any, value: Any) -> None:
        while True:
            try:
                producer.produce(topic, value=value, key=key)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.1)

    def _transactional_producer(self) -> Any:
        from confluent_kafka import KafkaException, Producer

        if self._driver_producer is None:
            producer_conf = dict(self.client_config)
            producer_conf["transactional.id"] = f"{self.transactional_id_prefix}-0"
            producer_conf.setdefault("transaction.timeout.ms", DEFAULT_TRANSACTION_TIMEOUT_MS)
            producer = Producer(producer_conf)
            try:
                producer.init_transactions(self._timeout_s())  # fences an earlier run's producer, aborts its open transaction
            except KafkaException as e:
                err = e.args[0] if e.args else e
                msg = (f"KafkaSink {self.transactional_id_prefix!r}: could not start a transactional producer on "
                       f"{producer_conf.get('bootstrap.servers')} within {self._timeout_s():.0f} s: {getattr(err, 'str', lambda: err)()}. "
                       f"Check bootstrap.servers and that the brokers run and support transactions")
                del producer  # destroy the client now: it would go on reconnecting in the background
                raise KafkaError(msg) from None
            self._driver_producer = producer
        return self._driver_producer

    def _driver_close(self) -> None:
        producer, self._driver_producer = getattr(self, "_driver_producer", None), None
        if producer is not None:
            producer.flush(1)


class _StagingWriter(SinkWriter):
    """EXACTLY_ONCE: serializes the epoch's records and hands them to the driver."""

    def __init__(self, serializer: KafkaRecordSerializationSchema):
        self.serializer = serializer
        self.records: list = []

    def write(self, records: list) -> None:
        serialize = self.serializer.serialize
        self.records.extend(serialize(r) for r in records)

    def finish(self, epoch: int) -> Any:
        out, self.records = self.records, []
        return out or None


class _ProducingWriter(SinkWriter):
    """NONE and AT_LEAST_ONCE: produce while the epoch runs."""

    def __init__(self, client_config: dict, serializer: KafkaRecordSerializationSchema, guarantee: DeliveryGuarantee):
        self.client_config = client_config
        self.serializer = serializer
        self.guarantee = guarantee
        self._producer: Any = None
        self._errors: list = []

    def _on_delivery(self, err: Any, msg: Any) -> None:
        if err is not None and len(self._errors) < 5:
            self._errors.append(f"{msg.topic()}[{msg.partition()}]: {err.str()}")

    def write(self, records: list) -> None:
        from confluent_kafka import Producer

        if self._producer is None:
            self._producer = Producer(self.client_config)
        p, ser = self._producer, self.serializer
        for r in records:
            topic, key, value = ser.serialize(r)
            while True:
                try:
                    p.produce(topic, value=value, key=key, on_delivery=self._on_delivery)
                    break
                except BufferError:
                    p.poll(0.1)
            p.poll(0)

    def finish(self, epoch: int) -> Any:
        if self._producer is None:
            return None
        left = self._producer.flush(_TIMEOUT_S if self.guarantee is DeliveryGuarantee.AT_LEAST_ONCE else 5.0)
        if self.guarantee is DeliveryGuarantee.AT_LEAST_ONCE and (left or self._errors):
            errors, self._errors = self._errors, []
            why = "; ".join(errors) if errors else f"{left} records not acknowledged within {_TIMEOUT_S:.0f} s"
            msg = (f"KafkaSink (AT_LEAST_ONCE) to {self.client_config.get('bootstrap.servers')}: delivery failed: {why}. "
                   f"The epoch is retried")
            raise KafkaError(msg)
        self._errors = []
        return None

    def close(self) -> None:
        if self._producer is not None:
            self._producer.flush(5.0)
            self._producer = None


def _check_producer_config(config: dict) -> None:
    from confluent_kafka import KafkaException, Producer

    try:
        Producer(dict(config)).flush(0)
    except KafkaException as e:
        msg = (f"KafkaSink: the Kafka client refused its properties: {e.args[0].str() if e.args else e} "
               f"(librdkafka's property names go to confluent_kafka)")
        raise KafkaConfigurationError(msg) from None


__all__ = ["DeliveryGuarantee", "KafkaRecordSerializationSchema", "KafkaRecordSerializationSchemaBuilder", "KafkaTopicSelector",
           "KafkaSink", "KafkaSinkBuilder"]
