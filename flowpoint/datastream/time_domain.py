"""PyFlink's ``pyflink.datastream.time_domain``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.time import TimeDomain

__all__ = ["TimeDomain"]
