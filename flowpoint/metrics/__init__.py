"""Metrics: what tasks count (records in and out, watermarks, busy and backpressured time, user
metrics) and how it reaches the driver, in one shape on both runtimes (:mod:`.report`), the
driver's store of it (:mod:`.store`), and PyFlink's user metric API (:mod:`.group`)."""

from flowpoint.metrics.group import Counter, Distribution, Meter, Metric, MetricGroup

__all__ = ["Counter", "Distribution", "Meter", "Metric", "MetricGroup"]
