"""Kafka offsets: PyFlink's ``KafkaOffsetsInitializer`` and the pure planning of an epoch's range.

An initializer says where a partition starts (``set_starting_offsets``) or stops
(``set_bounded``); it is resolved on the driver against the broker (:mod:`.metadata`) once,
when the partition's split is created. :func:`plan_range` decides one epoch's offsets
``[start, end)`` of one partition from its position, the offsets the broker holds and the
budget; it needs no broker, so its rules are unit-tested without one.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from flowpoint.connectors.kafka.errors import KafkaConfigurationError, KafkaOffsetOutOfRangeError


@dataclass(frozen=True, order=True)
class KafkaTopicPartition:
    """PyFlink's ``KafkaTopicPartition(topic, partition)``."""

    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


class KafkaOffsetResetStrategy(enum.Enum):
    """Where ``committed_offsets`` goes for a partition without a committed offset (and where an
    out-of-range position goes: ``auto.offset.reset``)."""

    LATEST = "latest"
    EARLIEST = "earliest"
    NONE = "none"

    @staticmethod
    def of(value: str | KafkaOffsetResetStrategy) -> KafkaOffsetResetStrategy:
        if isinstance(value, KafkaOffsetResetStrategy):
            return value
        v = str(value).strip().lower()
        aliases = {"smallest": "earliest", "beginning": "earliest", "largest": "latest", "end": "latest", "error": "none"}
        v = aliases.get(v, v)
        try:
            return KafkaOffsetResetStrategy(v)
        except ValueError:
            msg = f"auto.offset.reset must be earliest, latest or none; got {value!r}"
            raise KafkaConfigurationError(msg) from None


class KafkaOffsetsInitializer:
    """``earliest()``, ``latest()``, ``committed_offsets(reset)``, ``timestamp(ms)`` or
    ``offsets({KafkaTopicPartition: offset}, reset)``; the kind and its argument are data."""

    def __init__(self, kind: str, timestamp_ms: int | None = None, offsets: dict | None = None,
                 reset: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST):
        self.kind = kind
        self.timestamp_ms = timestamp_ms
        self.offsets = dict(offsets or {})
        self.reset = reset

    @staticmethod
    def earliest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer("earliest")

    @staticmethod
    def latest() -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer("latest")

    @staticmethod
    def committed_offsets(
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.NONE,
    ) -> KafkaOffsetsInitializer:
        return KafkaOffsetsInitializer("committed", reset=KafkaOffsetResetStrategy.of(offset_reset_strategy))

    @staticmethod
    def timestamp(timestamp: int) -> KafkaOffsetsInitializer:
        """The first offset whose record timestamp is at least ``timestamp`` (epoch ms)."""
        if not isinstance(timestamp, int) or isinstance(timestamp, bool):
            msg = f"KafkaOffsetsInitializer.timestamp needs epoch milliseconds as an int; got {timestamp!r}"
            raise KafkaConfigurationError(msg)
        return KafkaOffsetsInitializer("timestamp", timestamp_ms=timestamp)

    @staticmethod
    def offsets(
        offsets: dict,
        offset_reset_strategy: KafkaOffsetResetStrategy = KafkaOffsetResetStrategy.EARLIEST,
    ) -> KafkaOffsetsInitializer:
        """Given offsets per partition; a partition not listed goes by ``offset_reset_strategy``."""
        out = {}
        for tp, off in dict(offsets).items():
            if not isinstance(tp, KafkaTopicPartition):
                msg = f"KafkaOffsetsInitializer.offsets needs KafkaTopicPartition keys; got {tp!r}"
                raise KafkaConfigurationError(msg)
            out[tp] = int(off)
        return KafkaOffsetsInitializer("offsets", offsets=out, reset=KafkaOffsetResetStrategy.of(offset_reset_strategy))

    def __repr__(self) -> str:
        arg = {"timestamp": self.timestamp_ms, "offsets": self.offsets}.get(self.kind, "")
        return f"KafkaOffsetsInitializer.{self.kind}({arg})"


def reset_offset(strategy: KafkaOffsetResetStrategy, low: int, high: int, where: str, why: str) -> int:
    """Where ``auto.offset.reset`` sends a partition: ``low`` (earliest), ``high`` (latest), or
    an error naming the partition (none)."""
    if strategy is KafkaOffsetResetStrategy.EARLIEST:
        return low
    if strategy is KafkaOffsetResetStrategy.LATEST:
        return high
    msg = (
        f"Kafka partition {where}: {why}, and auto.offset.reset is none. Set auto.offset.reset to "
        f"earliest or latest (source property), or restore from a checkpoint whose offsets the broker still holds"
    )
    raise KafkaOffsetOutOfRangeError(msg)


@dataclass(frozen=True)
class RangePlan:
    """One epoch of one partition: read ``[start, end)``; ``start`` differs from the position
    only when the position was out of range and ``auto.offset.reset`` moved it (``reset``
    says why, for the warning)."""

    start: int
    end: int
    finished: bool
    reset: str | None = None

    @property
    def records(self) -> int:
        return self.end - self.start


def plan_range(where: str, position: int, low: int, high: int, stop: int | None, budget: int,
               reset: KafkaOffsetResetStrategy) -> RangePlan:
    """The epoch's range of partition ``where`` (``topic-partition``).

    ``low`` and ``high`` are the broker's log start offset and high watermark; ``stop`` the
    bounded end (``set_bounded``) or None. A position below ``low`` (retention deleted it) or
    above ``high`` (the topic was deleted and created again) is out of range and goes where
    ``reset`` says. At most ``budget`` offsets are planned; the range never passes ``stop``.
    """
    why = None
    if position < low:
        why = f"offset {position} is below the log start offset {low} (deleted by retention)"
    elif position > high:
        why = f"offset {position} is above the high watermark {high} (the topic was deleted or truncated)"
    start = position
    if why is not None:
        start = reset_offset(reset, low, high, where, why)
    limit = high if stop is None else min(high, stop)
    end = max(start, min(limit, start + max(0, budget)))
    finished = stop is not None and end >= stop
    return RangePlan(start, end, finished, why)
