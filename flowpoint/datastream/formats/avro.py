"""PyFlink's ``pyflink.datastream.formats.avro``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import AVRO, refusing

__all__ = []

__getattr__ = refusing(
    __name__,
    {
        "AvroSchema": AVRO,
        "GenericRecordAvroTypeInfo": AVRO,
        "AvroInputFormat": AVRO,
        "AvroBulkWriters": AVRO,
        "AvroRowDeserializationSchema": AVRO,
        "AvroRowSerializationSchema": AVRO,
    },
)
