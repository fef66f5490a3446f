"""Which adapter a Spark session gets (spark/adapter.py has the interface): Spark Connect's for a
Connect session, the classic one for a session with a SparkContext."""

from __future__ import annotations

from typing import Any

from flowpoint.spark.adapter import SparkAdapter, is_connect_session
from flowpoint.spark.classic import ClassicAdapter
from flowpoint.spark.connect.adapter import ConnectAdapter


def adapter_for(spark: Any) -> SparkAdapter:
    """The adapter of ``spark`` (one per session object)."""
    adapter = getattr(spark, "_flowpoint_adapter", None)
    if adapter is None:
        if is_connect_session(spark):
            adapter = ConnectAdapter(spark)
        else:
            adapter = ClassicAdapter(spark)
        try:
            spark._flowpoint_adapter = adapter
        except AttributeError:  # a session class with slots: a new adapter each time is fine
            pass
    return adapter
