"""PyFlink's ``pyflink.common.types``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.row import Row, RowKind

__all__ = ["Row", "RowKind"]
