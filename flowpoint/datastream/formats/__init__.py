"""PyFlink's ``pyflink.datastream.formats``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

__all__ = []
