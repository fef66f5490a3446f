"""PyFlink's ``pyflink.common.typeinfo``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.types import TypeInformation, Types

__all__ = ["TypeInformation", "Types"]
