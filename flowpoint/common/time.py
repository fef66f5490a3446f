"""PyFlink's ``pyflink.common.time``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.time import Duration, Instant, Time

__all__ = ["Duration", "Instant", "Time"]
