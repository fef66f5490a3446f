"""PyFlink's ``pyflink.datastream.stream_execution_environment``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.environment import StreamExecutionEnvironment

__all__ = ["StreamExecutionEnvironment"]
