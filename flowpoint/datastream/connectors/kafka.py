"""PyFlink's ``pyflink.datastream.connectors.kafka``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.connectors.kafka import (
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaRecordSerializationSchemaBuilder,
    KafkaSink,
    KafkaSinkBuilder,
    KafkaSource,
    KafkaSourceBuilder,
    KafkaTopicPartition,
    KafkaTopicSelector,
)
from flowpoint.refused import KAFKA_CONSUMER, KAFKA_PRODUCER, KAFKA_SEMANTIC, refusing

__all__ = [
    "KafkaOffsetResetStrategy",
    "KafkaOffsetsInitializer",
    "KafkaRecordSerializationSchema",
    "KafkaRecordSerializationSchemaBuilder",
    "KafkaSink",
    "KafkaSinkBuilder",
    "KafkaSource",
    "KafkaSourceBuilder",
    "KafkaTopicPartition",
    "KafkaTopicSelector",
]

__getattr__ = refusing(
    __name__,
    {
        "FlinkKafkaConsumer": KAFKA_CONSUMER,
        "FlinkKafkaProducer": KAFKA_PRODUCER,
        "Semantic": KAFKA_SEMANTIC,
    },
)
