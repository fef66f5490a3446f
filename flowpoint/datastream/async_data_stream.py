"""PyFlink's ``pyflink.datastream.async_data_stream``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.async_io import AsyncDataStream

__all__ = ["AsyncDataStream"]
