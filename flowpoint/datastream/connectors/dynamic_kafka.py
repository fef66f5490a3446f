"""PyFlink's ``pyflink.datastream.connectors.dynamic_kafka``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import DYNAMIC_KAFKA, refusing

__all__ = []

__getattr__ = refusing(
    __name__,
    {
        "DynamicKafkaSource": DYNAMIC_KAFKA,
        "DynamicKafkaSourceBuilder": DYNAMIC_KAFKA,
        "KafkaMetadataService": DYNAMIC_KAFKA,
        "KafkaRecordDeserializationSchema": DYNAMIC_KAFKA,
        "KafkaStreamSetSubscriber": DYNAMIC_KAFKA,
        "KafkaStreamSubscriber": DYNAMIC_KAFKA,
        "StreamPatternSubscriber": DYNAMIC_KAFKA,
        "SingleClusterTopicMetadataService": DYNAMIC_KAFKA,
    },
)
