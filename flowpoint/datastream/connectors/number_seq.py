"""PyFlink's ``pyflink.datastream.connectors.number_seq``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.connectors.datagen import NumberSequenceSource

__all__ = ["NumberSequenceSource"]
