"""PyFlink's ``pyflink.datastream.output_tag``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.functions import OutputTag

__all__ = ["OutputTag"]
