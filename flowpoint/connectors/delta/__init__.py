"""Delta Lake connector: ``DeltaSink``, exactly once with delta-rs (``pip install
'flowpoint[delta]'``). See docs/lakehouse.md."""

from flowpoint.connectors.delta.errors import DeltaConfigurationError, DeltaSinkError
from flowpoint.connectors.delta.sink import DeltaSink, DeltaSinkBuilder

__all__ = ["DeltaConfigurationError", "DeltaSink", "DeltaSinkBuilder", "DeltaSinkError"]
