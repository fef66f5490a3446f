"""Kafka connector: the replayable ``KafkaSource`` (PyFlink's names) and the embedded Tansu
broker (``EmbeddedKafka``). See docs/kafka.md."""

from flowpoint.connectors.kafka.broker import BrokerStartError, EmbeddedKafka
from flowpoint.connectors.kafka.deserialization import (
    ByteArraySchema,
    DeserializationSchema,
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
    RowFieldExtractorSchema,
    SerializationSchema,
    SimpleStringSchema,
)
from flowpoint.connectors.kafka.errors import (
    KafkaDeserializationError,
    KafkaError,
    KafkaOffsetOutOfRangeError,
    KafkaReadTimeoutError,
    KafkaUnreachableError,
)
from flowpoint.connectors.kafka.offsets import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaTopicPartition,
)
from flowpoint.connectors.kafka.sink import (
    DeliveryGuarantee,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaSink,
    KafkaSinkBuilder,
    KafkaTopicSelector,
)
from flowpoint.connectors.kafka.source import KafkaSource, KafkaSourceBuilder

__all__ = [
    "BrokerStartError",
    "ByteArraySchema",
    "DeliveryGuarantee",
    "DeserializationSchema",
    "EmbeddedKafka",
    "JsonRowDeserializationSchema",
    "JsonRowSerializationSchema",
    "KafkaDeserializationError",
    "KafkaError",
    "KafkaOffsetOutOfRangeError",
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaReadTimeoutError",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
    "KafkaTopicSelector",
    "KafkaUnreachableError",
    "RowFieldExtractorSchema",
    "SerializationSchema",
    "SimpleStringSchema",
]
