"""PyFlink's ``pyflink.datastream.connectors.pulsar``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import PULSAR, refusing

__all__ = []

__getattr__ = refusing(
    __name__,
    {
        "PulsarSource": PULSAR,
        "PulsarSourceBuilder": PULSAR,
        "StartCursor": PULSAR,
        "StopCursor": PULSAR,
        "RangeGenerator": PULSAR,
        "PulsarSink": PULSAR,
        "PulsarSinkBuilder": PULSAR,
        "MessageDelayer": PULSAR,
        "TopicRoutingMode": PULSAR,
    },
)
