"""Apache Iceberg connector: ``IcebergSink``, exactly once with pyiceberg (``pip install
'flowpoint[iceberg]'``). See docs/lakehouse.md."""

from flowpoint.connectors.iceberg.catalog import embedded_catalog
from flowpoint.connectors.iceberg.errors import IcebergConfigurationError, IcebergSinkError
from flowpoint.connectors.iceberg.sink import IcebergSink, IcebergSinkBuilder

__all__ = ["IcebergConfigurationError", "IcebergSink", "IcebergSinkBuilder", "IcebergSinkError", "embedded_catalog"]
