"""PyFlink's ``pyflink.common.constants``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

#: Long.MAX_VALUE
MAX_LONG_VALUE = 0x7FFFFFFFFFFFFFFF
#: Long.MIN_VALUE
MIN_LONG_VALUE = -MAX_LONG_VALUE - 1
#: The tag of the main output.
DEFAULT_OUTPUT_TAG = ""


__all__ = ["DEFAULT_OUTPUT_TAG", "MAX_LONG_VALUE", "MIN_LONG_VALUE"]
