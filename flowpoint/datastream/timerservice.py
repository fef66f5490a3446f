"""PyFlink's ``pyflink.datastream.timerservice``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.functions import TimerService

__all__ = ["TimerService"]
