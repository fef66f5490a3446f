"""Time in flowpoint: ``Duration``, ``Time``, ``Instant``, ``TimeDomain`` and the watermark constants.

Timestamps and watermarks are epoch milliseconds (Python ints), as in Flink.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from flowpoint.errors import ConfigurationError

MIN_WATERMARK = -(1 << 63)  # Long.MIN_VALUE: no event time has passed yet
MAX_WATERMARK = (1 << 63) - 1  # Long.MAX_VALUE: the end of input (every window fires)

#: Long.MAX_VALUE (PyFlink's ``pyflink.common.constants``)
MAX_LONG_VALUE = 0x7FFFFFFFFFFFFFFF
#: Long.MIN_VALUE (PyFlink's ``pyflink.common.constants``)
MIN_LONG_VALUE = -MAX_LONG_VALUE - 1


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

    @staticmethod
    def of_days(d: float) -> Duration:
        return Duration(int(d * 86_400_000))

    @staticmethod
    def zero() -> Duration:
        return Duration(0)

    def to_milliseconds(self) -> int:
        return self.milliseconds


class Time:
    """Flink's legacy ``Time`` (``Time.seconds(10)``): the same as a :class:`Duration`."""

    @staticmethod
    def milliseconds(ms: int) -> Duration:
        return Duration.of_millis(ms)

    @staticmethod
    def seconds(s: float) -> Duration:
        return Duration.of_seconds(s)

    @staticmethod
    def minutes(m: float) -> Duration:
        return Duration.of_minutes(m)

    @staticmethod
    def hours(h: float) -> Duration:
        return Duration.of_hours(h)

    @staticmethod
    def days(d: float) -> Duration:
        return Duration.of_days(d)


def to_millis(value: Duration | int, what: str = "a duration") -> int:
    """Accept a :class:`Duration` or a number of milliseconds."""
    if isinstance(value, Duration):
        return value.milliseconds
    if isinstance(value, int) and not isinstance(value, bool):
        return value

    msg = f"{what} must be a Duration (Duration.of_seconds(10)) or milliseconds (int); got {value!r}"
    raise ConfigurationError(msg)


def positive_millis(value: Duration | int, what: str) -> int:
    """A positive duration in ms (window sizes, trigger intervals)."""
    ms = to_millis(value, what)
    if ms <= 0:
        msg = f"{what} must be positive; got {ms} ms"
        raise ConfigurationError(msg)
    return ms


def event_timestamp(timestamp: int | None) -> int:
    """The record's event timestamp, which event-time windows and triggers need (Long.MIN_VALUE
    is Flink's "no timestamp": what a WatermarkStrategy without an assigner gives records that
    carry none)."""
    if timestamp is None or timestamp == MIN_WATERMARK:
        msg = (
            "an event-time window got a record without a timestamp (None or Long.MIN_VALUE): give the source a "
            "WatermarkStrategy with a timestamp assigner, or call assign_timestamps_and_watermarks(...) "
            "before the window (or use a processing-time window)"
        )
        raise ConfigurationError(msg)
    return timestamp


class Instant(tuple):
    """A point on the time line: ``seconds`` since the epoch and ``nanos`` within the second
    (PyFlink's ``Instant``, Java's ``java.time.Instant``); the values of ``Types.INSTANT()``.
    A tuple underneath, so Arrow stores it as a ``(seconds, nanos)`` struct; it equals only
    another Instant."""

    __slots__ = ()

    def __new__(cls, seconds: int, nanos: int) -> Instant:
        if not 0 <= nanos < 1_000_000_000:
            seconds, nanos = seconds + nanos // 1_000_000_000, nanos % 1_000_000_000
        return super().__new__(cls, (int(seconds), int(nanos)))

    def __getnewargs__(self) -> tuple[int, int]:
        return (self[0], self[1])

    @property
    def seconds(self) -> int:
        return self[0]

    @property
    def nanos(self) -> int:
        return self[1]

    @staticmethod
    def of_epoch_milli(epoch_milli: int) -> Instant:
        return Instant(epoch_milli // 1000, epoch_milli % 1000 * 1_000_000)

    def to_epoch_milli(self) -> int:
        """Milliseconds since the epoch, rounded down as Java's ``toEpochMilli``."""
        return self[0] * 1000 + self[1] // 1_000_000

    def __eq__(self, other: object) -> bool:
        return type(other) is Instant and tuple.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self == other

    __hash__ = tuple.__hash__

    def __repr__(self) -> str:
        return f"Instant<{self[0]}, {self[1]}>"


class TimeDomain(enum.Enum):
    """Which clock fired a timer (``ctx.time_domain()`` in ``on_timer``)."""

    EVENT_TIME = 0
    PROCESSING_TIME = 1
