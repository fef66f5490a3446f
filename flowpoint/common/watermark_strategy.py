"""PyFlink's ``pyflink.common.watermark_strategy``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.api.watermarks import TimestampAssigner, WatermarkStrategy
from flowpoint.refused import PERIODIC_ASSIGNER, refusing

__all__ = ["TimestampAssigner", "WatermarkStrategy"]

__getattr__ = refusing(__name__, {"AssignerWithPeriodicWatermarksWrapper": PERIODIC_ASSIGNER})
