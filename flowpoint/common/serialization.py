"""PyFlink's ``pyflink.common.serialization``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.connectors.file_sink import Encoder
from flowpoint.connectors.kafka import (
    ByteArraySchema,
    DeserializationSchema,
    RowFieldExtractorSchema,
    SerializationSchema,
    SimpleStringSchema,
)
from flowpoint.refused import BULK_WRITER, refusing

__all__ = [
    "ByteArraySchema",
    "DeserializationSchema",
    "Encoder",
    "RowFieldExtractorSchema",
    "SerializationSchema",
    "SimpleStringSchema",
]

__getattr__ = refusing(__name__, {"BulkWriterFactory": BULK_WRITER})
