"""PyFlink's ``pyflink.datastream.execution_mode``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.execution_mode import RuntimeExecutionMode

__all__ = ["RuntimeExecutionMode"]
