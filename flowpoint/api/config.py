"""Configuration keys flowpoint reads, with their defaults (Flink-style dotted names)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowpoint.errors import ConfigurationError


@dataclass(frozen=True)
class Option:
    key: str
    default: Any
    type: type
    description: str


OPTIONS = {
    o.key: o
    for o in [
        Option("spark.master", None, str, "Spark master URL; default local[*,4] (local, 4 task attempts)"),
        Option("parallelism.default", None, int, "default parallelism of operators; default: Spark's default parallelism"),
        Option("pipeline.max-parallelism", None, int, "default max parallelism (number of key groups)"),
        Option("pipeline.name", None, str, "job name"),
        Option("execution.epoch.max-records", 100_000, int, "records read per epoch over all source splits"),
        Option("execution.epoch.interval", 200, int, "ms to wait before polling sources that had no new records"),
        Option("execution.progress.interval", 1000, int, "ms between progress lines (0: every epoch, -1: never)"),
        Option("state.working.dir", None, str, "directory for working-state delta files (executor local disk)"),
        Option("state.working.compaction-bytes", 1 << 20, int, "delta bytes before a partition writes a new base snapshot"),
    ]
}


class Configuration:
    """A set of ``key: value`` settings; unknown keys are kept for later layers and user code."""

    def __init__(self, values: dict[str, Any] | None = None):
        self._values: dict[str, Any] = {}
        for k, v in (values or {}).items():
            self.set(k, v)

    def set(self, key: str, value: Any) -> Configuration:
        option = OPTIONS.get(key)
        if option is not None and value is not None and not isinstance(value, option.type):
            try:
                value = option.type(value)
            except (TypeError, ValueError):
                msg = f"configuration {key!r} must be {option.type.__name__}; got {value!r}"
                raise ConfigurationError(msg) from None
        self._values[key] = value
        return self

    set_string = set
    set_integer = set

    def get(self, key: str, default: Any = None) -> Any:
        if key in self._values:
            return self._values[key]
        option = OPTIONS.get(key)
        if option is not None and default is None:
            return option.default
        return default

    def contains_key(self, key: str) -> bool:
        return key in self._values

    def to_dict(self) -> dict[str, Any]:
        return dict(self._values)

    def copy(self) -> Configuration:
        return Configuration(self._values)
