"""PyFlink's ``pyflink.datastream.connectors.kinesis``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import KINESIS, refusing

__all__ = []

__getattr__ = refusing(
    __name__,
    {
        "KinesisShardAssigner": KINESIS,
        "KinesisDeserializationSchema": KINESIS,
        "WatermarkTracker": KINESIS,
        "PartitionKeyGenerator": KINESIS,
        "FlinkKinesisConsumer": KINESIS,
        "KinesisStreamsSink": KINESIS,
        "KinesisStreamsSinkBuilder": KINESIS,
        "KinesisFirehoseSink": KINESIS,
        "KinesisFirehoseSinkBuilder": KINESIS,
    },
)
