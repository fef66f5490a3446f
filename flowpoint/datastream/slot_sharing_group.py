"""PyFlink's ``pyflink.datastream.slot_sharing_group``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.refused import SLOT_SHARING, refusing

__all__ = []

__getattr__ = refusing(__name__, {"MemorySize": SLOT_SHARING, "SlotSharingGroup": SLOT_SHARING})
