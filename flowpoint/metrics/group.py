"""User-defined metrics, as PyFlink's ``pyflink.metrics``: a function's
``runtime_context.get_metrics_group()`` is the operator's metric group; ``add_group`` nests
groups, and ``counter``, ``gauge``, ``meter`` and ``distribution`` register metrics in it.

The metrics live in the task (one group per parallel instance of an operator); the task reports
them with its own metrics (:mod:`flowpoint.metrics.report`), so they appear in the job's
metrics, the REST API and the Prometheus endpoint under their group path, e.g.
``my_group.my_counter`` (``flowpoint_user_my_group_my_counter`` in Prometheus).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

from flowpoint.errors import ConfigurationError

_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


class Metric:
    """Base of the metric objects (PyFlink's ``Metric``)."""


class Counter(Metric):
    """A count that goes up and down (``inc``/``dec``)."""

    def __init__(self) -> None:
        self._count = 0

    def inc(self, n: int = 1) -> None:
        self._count += n

    def dec(self, n: int = 1) -> None:
        self._count -= n

    def get_count(self) -> int:
        return self._count


class Meter(Metric):
    """Events per second: ``mark_event(n)``; the rate is computed where the metrics are
    reported (over ``time_span_in_seconds``, 60 by default as in Flink)."""

    def __init__(self, time_span_in_seconds: int = 60) -> None:
        self._count = 0
        self.time_span_in_seconds = time_span_in_seconds

    def mark_event(self, value: int = 1) -> None:
        self._count += value

    def get_count(self) -> int:
        return self._count


class Distribution(Metric):
    """Values whose count, sum, min and max are reported (PyFlink's distribution)."""

    def __init__(self) -> None:
        self.count = 0
        self.sum = 0.0
        self.min: float | None = None
        self.max: float | None = None

    def update(self, value: float) -> None:
        self.count += 1
        self.sum += value
        self.min = value if self.min is None or value < self.min else self.min
        self.max = value if self.max is None or value > self.max else self.max


class MetricGroup:
    """A named group of metrics; the operator's own group has an empty path."""

    def __init__(self, registry: dict[str, Any] | None = None, path: tuple[str, ...] = (), owner: str = "") -> None:
        self._registry: dict[str, Any] = registry if registry is not None else {}
        self._path = path
        self._owner = owner  # the operator, for error messages

    def add_group(self, name: str, extra: str | None = None) -> MetricGroup:
        """A subgroup ``name``; with ``extra``, a key-value group ``name.extra`` (Flink's
        ``addGroup(key, value)``)."""
        parts = (self._check(name),) if extra is None else (self._check(name), self._check(str(extra)))
        return MetricGroup(self._registry, self._path + parts, self._owner)

    def counter(self, name: str) -> Counter:
        return self._register(name, Counter())

    def gauge(self, name: str, obj: Callable[[], float]) -> Callable[[], float]:
        if not callable(obj):
            msg = f"gauge {self._id(name)!r} of operator {self._owner!r} needs a callable returning a number, got {type(obj).__name__}"
            raise ConfigurationError(msg)
        return self._register(name, _Gauge(obj))

    def meter(self, name: str, time_span_in_seconds: int = 60) -> Meter:
        return self._register(name, Meter(time_span_in_seconds))

    def distribution(self, name: str) -> Distribution:
        return self._register(name, Distribution())

    def get_metric_identifier(self, name: str) -> str:
        return self._id(name)

    def _id(self, name: str) -> str:
        return ".".join((*self._path, name))

    def _check(self, name: str) -> str:
        if not isinstance(name, str) or not _NAME.match(name):
            msg = (f"metric or group name {name!r} of operator {self._owner!r} is not valid: use letters, digits, "
                   "'_' and '-', starting with a letter or '_'")
            raise ConfigurationError(msg)
        return name

    def _register(self, name: str, metric: Any) -> Any:
        ident = self._id(self._check(name))
        existing = self._registry.get(ident)
        if existing is not None:
            if type(existing) is not type(metric):
                msg = f"metric {ident!r} of operator {self._owner!r} is already registered as a {type(existing).__name__}"
                raise ConfigurationError(msg)
            return existing.fn if isinstance(existing, _Gauge) else existing  # Flink returns the first one too
        self._registry[ident] = metric
        return metric.fn if isinstance(metric, _Gauge) else metric


class _Gauge:
    def __init__(self, fn: Callable[[], float]) -> None:
        self.fn = fn
