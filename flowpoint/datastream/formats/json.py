"""PyFlink's ``pyflink.datastream.formats.json``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.connectors.kafka import JsonRowDeserializationSchema, JsonRowSerializationSchema

__all__ = ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"]
