"""PyFlink's ``pyflink.common.execution_config``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.environment import ExecutionConfig

__all__ = ["ExecutionConfig"]
