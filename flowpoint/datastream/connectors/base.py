"""PyFlink's ``pyflink.datastream.connectors.base``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.connectors.kafka import DeliveryGuarantee
from flowpoint.connectors.sinks import Sink
from flowpoint.connectors.source import Source
from flowpoint.refused import TRANSFORMER, refusing

__all__ = ["DeliveryGuarantee", "Sink", "Source"]

__getattr__ = refusing(
    __name__, {"StreamTransformer": TRANSFORMER, "SupportsPreprocessing": TRANSFORMER}
)
