"""PyFlink's ``pyflink.common.serializer``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md)."""

from flowpoint.api.serializer import TypeSerializer, VoidNamespaceSerializer

__all__ = ["TypeSerializer", "VoidNamespaceSerializer"]
