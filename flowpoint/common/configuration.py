"""PyFlink's ``pyflink.common.configuration``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.config import Configuration

__all__ = ["Configuration"]
