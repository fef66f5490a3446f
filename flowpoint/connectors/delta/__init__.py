"""Delta Lake connector: ``DeltaSink``, exactly once, and ``DeltaSource``, a table read as a
bounded snapshot or followed as it grows, with delta-rs (``pip install 'flowpoint[delta]'``).
See docs/lakehouse.md."""

from flowpoint.connectors.delta.errors import (
    DeltaConfigurationError,
    DeltaSinkError,
    DeltaSourceConfigurationError,
    DeltaSourceError,
    DeltaSourceUnavailableError,
)
from flowpoint.connectors.delta.sink import DeltaSink, DeltaSinkBuilder
from flowpoint.connectors.delta.source import DeltaSource, DeltaSourceBuilder

__all__ = [
    "DeltaConfigurationError",
    "DeltaSink",
    "DeltaSinkBuilder",
    "DeltaSinkError",
    "DeltaSource",
    "DeltaSourceBuilder",
    "DeltaSourceConfigurationError",
    "DeltaSourceError",
    "DeltaSourceUnavailableError",
]
