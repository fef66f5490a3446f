"""PyFlink's ``pyflink.common.restart_strategy``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.restart import RestartStrategies, RestartStrategyConfiguration

__all__ = ["RestartStrategies", "RestartStrategyConfiguration"]
