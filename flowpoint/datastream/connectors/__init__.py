"""PyFlink's ``pyflink.datastream.connectors``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.connectors.kafka import DeliveryGuarantee
from flowpoint.connectors.sinks import Sink
from flowpoint.connectors.source import Source

__all__ = ["DeliveryGuarantee", "Sink", "Source"]
