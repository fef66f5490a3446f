"""PyFlink's ``pyflink.datastream.formats.csv``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import CSV_READ, CSV_ROW, CSV_WRITE, refusing

__all__ = []

__getattr__ = refusing(
    __name__,
    {
        "CsvSchema": CSV_READ,
        "CsvSchemaBuilder": CSV_READ,
        "CsvReaderFormat": CSV_READ,
        "CsvBulkWriters": CSV_WRITE,
        "CsvRowDeserializationSchema": CSV_ROW,
        "CsvRowSerializationSchema": CSV_ROW,
    },
)
