"""PyFlink's ``pyflink.common.constants``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.functions import DEFAULT_OUTPUT_TAG
from flowpoint.api.time import MAX_LONG_VALUE, MIN_LONG_VALUE

__all__ = ["DEFAULT_OUTPUT_TAG", "MAX_LONG_VALUE", "MIN_LONG_VALUE"]
