"""PyFlink's ``pyflink.datastream.formats.parquet``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import PARQUET_READ, PARQUET_WRITE, refusing

__all__ = []

__getattr__ = refusing(
    __name__,
    {
        "AvroParquetReaders": PARQUET_READ,
        "ParquetColumnarRowInputFormat": PARQUET_READ,
        "AvroParquetWriters": PARQUET_WRITE,
        "ParquetBulkWriters": PARQUET_WRITE,
    },
)
