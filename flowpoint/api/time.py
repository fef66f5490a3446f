"""``Duration`` and ``WatermarkStrategy`` as in PyFlink (event time processing: see issue 4)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Duration:
    milliseconds: int

    @staticmethod
    def of_millis(ms: int) -> Duration:
        return Duration(int(ms))

    @staticmethod
    def of_seconds(s: float) -> Duration:
        return Duration(int(s * 1000))

    @staticmethod
    def of_minutes(m: float) -> Duration:
        return Duration(int(m * 60_000))

    @staticmethod
    def of_hours(h: float) -> Duration:
        return Duration(int(h * 3_600_000))

    def to_milliseconds(self) -> int:
        return self.milliseconds


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a source assigns timestamps and watermarks. ``no_watermarks()`` is the default."""

    kind: str = "none"
    bound_ms: int = 0
    timestamp_assigner: Any = None
    idleness_ms: int | None = None

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        return WatermarkStrategy("none")

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        return WatermarkStrategy("bounded", 0)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration) -> WatermarkStrategy:
        return WatermarkStrategy("bounded", max_out_of_orderness.to_milliseconds())

    def with_timestamp_assigner(self, assigner: Any) -> WatermarkStrategy:
        return WatermarkStrategy(self.kind, self.bound_ms, assigner, self.idleness_ms)

    def with_idleness(self, idle_timeout: Duration) -> WatermarkStrategy:
        return WatermarkStrategy(self.kind, self.bound_ms, self.timestamp_assigner, idle_timeout.to_milliseconds())
