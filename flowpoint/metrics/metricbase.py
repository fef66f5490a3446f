"""PyFlink's ``pyflink.metrics.metricbase``: the user metric types (:mod:`flowpoint.metrics.group`)."""

from flowpoint.metrics.group import Counter, Distribution, Meter, Metric, MetricGroup

__all__ = ["Counter", "Distribution", "Meter", "Metric", "MetricGroup"]
