"""Timestamps and watermarks: ``WatermarkStrategy`` and ``WatermarkGenerator`` as in Flink.

A strategy makes one :class:`WatermarkGenerator` per source split (or per parallel instance of
``assign_timestamps_and_watermarks`` downstream of a shuffle). The runtime calls
``on_event(event, timestamp, output)`` for every record and ``on_periodic_emit(output)`` after
every batch and at every epoch boundary, also when no records came; the generator calls
``output.emit_watermark(Watermark(ts))``. Watermarks never move backwards: a smaller one is
ignored. docs/architecture.md, section 8.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from flowpoint.api.row import get_field
from flowpoint.api.time import MAX_WATERMARK, MIN_WATERMARK, Duration, to_millis
from flowpoint.errors import ConfigurationError


@dataclass(frozen=True, order=True)
class Watermark:
    """No more records with a timestamp <= ``timestamp`` are expected."""

    timestamp: int

    def get_timestamp(self) -> int:
        return self.timestamp


Watermark.MAX = Watermark(MAX_WATERMARK)  # type: ignore[attr-defined]
Watermark.MIN = Watermark(MIN_WATERMARK)  # type: ignore[attr-defined]


class WatermarkOutput(ABC):
    @abstractmethod
    def emit_watermark(self, watermark: Watermark) -> None: ...

    def mark_idle(self) -> None:  # noqa: B027 - optional, as in Flink
        """This output will not emit records for a while: leave it out of the minimum."""

    def mark_active(self) -> None:  # noqa: B027
        """Records come again."""


class WatermarkGenerator(ABC):
    """Flink's ``WatermarkGenerator``: punctuated generators emit in ``on_event``, periodic ones
    in ``on_periodic_emit``. Generator objects are kept per split between epochs (pickled), so
    keep their fields picklable."""

    @abstractmethod
    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None: ...

    @abstractmethod
    def on_periodic_emit(self, output: WatermarkOutput) -> None: ...


class TimestampAssigner(ABC):
    """``extract_timestamp(value, record_timestamp) -> epoch milliseconds``."""

    @abstractmethod
    def extract_timestamp(self, value: Any, record_timestamp: int | None) -> int: ...


class SerializableTimestampAssigner(TimestampAssigner, ABC):
    """PyFlink's name for the same interface."""


class _CallableAssigner(TimestampAssigner):
    def __init__(self, func: Callable[..., int]):
        self.func = func
        try:
            import inspect

            params = [p for p in inspect.signature(func).parameters.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            self.arity = 1 if len(params) == 1 else 2
        except (TypeError, ValueError):
            self.arity = 2

    def extract_timestamp(self, value: Any, record_timestamp: int | None) -> int:
        return self.func(value) if self.arity == 1 else self.func(value, record_timestamp)

    def user_function(self) -> Any:
        return self.func


class FieldTimestampAssigner(TimestampAssigner):
    """``with_timestamp_assigner("ts")``: the timestamp is a field of the record (read as one
    Arrow column when the batch is columnar, without Python per record)."""

    def __init__(self, field: str | int):
        self.field = field

    def extract_timestamp(self, value: Any, record_timestamp: int | None) -> int:
        return get_field(value, self.field)

    def __repr__(self) -> str:
        return f"field {self.field!r}"


class BoundedOutOfOrdernessWatermarks(WatermarkGenerator):
    """Periodic: ``max timestamp seen - bound - 1`` (Flink's built-in)."""

    def __init__(self, max_out_of_orderness: Duration | int):
        self.bound = to_millis(max_out_of_orderness, "max_out_of_orderness")
        if self.bound < 0:
            msg = f"max_out_of_orderness must not be negative; got {self.bound} ms"
            raise ConfigurationError(msg)
        self.max_timestamp = MIN_WATERMARK + self.bound + 1

    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        if event_timestamp > self.max_timestamp:
            self.max_timestamp = event_timestamp

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        output.emit_watermark(Watermark(self.max_timestamp - self.bound - 1))


class AscendingTimestampsWatermarks(BoundedOutOfOrdernessWatermarks):
    """``for_monotonous_timestamps()``: bound 0."""

    def __init__(self) -> None:
        super().__init__(0)


class NoWatermarksGenerator(WatermarkGenerator):
    def on_event(self, event: Any, event_timestamp: int, output: WatermarkOutput) -> None:
        pass

    def on_periodic_emit(self, output: WatermarkOutput) -> None:
        pass


class WatermarkGeneratorSupplier(ABC):
    @abstractmethod
    def create_watermark_generator(self, context: Any) -> WatermarkGenerator: ...


@dataclass(frozen=True)
class GeneratorContext:
    """What ``for_generator(lambda ctx: ...)`` receives: where the generator runs."""

    operator_name: str
    split: str  # the split id, or "instance-<i>" downstream of a shuffle
    index_of_subtask: int = 0

    def get_split(self) -> str:
        return self.split


@dataclass(frozen=True)
class WatermarkStrategy:
    """How a stream gets timestamps and watermarks (``WatermarkStrategy.for_bounded_out_of_orderness``)."""

    kind: str = "none"  # none | bounded | custom
    bound_ms: int = 0
    timestamp_assigner: Any = None
    idleness_ms: int | None = None
    supplier: Any = None  # custom: ctx -> WatermarkGenerator
    extra: dict = field(default_factory=dict, compare=False)

    # -- the strategies ------------------------------------------------------------------------

    @staticmethod
    def no_watermarks() -> WatermarkStrategy:
        return WatermarkStrategy("none")

    @staticmethod
    def for_monotonous_timestamps() -> WatermarkStrategy:
        return WatermarkStrategy("bounded", 0)

    @staticmethod
    def for_bounded_out_of_orderness(max_out_of_orderness: Duration | int) -> WatermarkStrategy:
        bound = to_millis(max_out_of_orderness, "for_bounded_out_of_orderness(max_out_of_orderness)")
        if bound < 0:
            msg = f"for_bounded_out_of_orderness: the bound must not be negative; got {bound} ms"
            raise ConfigurationError(msg)
        return WatermarkStrategy("bounded", bound)

    @staticmethod
    def for_generator(generator_supplier: Callable[[Any], WatermarkGenerator] | WatermarkGeneratorSupplier) -> WatermarkStrategy:
        if not (callable(generator_supplier) or isinstance(generator_supplier, WatermarkGeneratorSupplier)):
            msg = f"for_generator() needs a function ctx -> WatermarkGenerator; got {generator_supplier!r:.80}"
            raise ConfigurationError(msg)
        return WatermarkStrategy("custom", supplier=generator_supplier)

    # -- options -------------------------------------------------------------------------------

    def with_timestamp_assigner(self, timestamp_assigner: TimestampAssigner | Callable[..., int] | str | int) -> WatermarkStrategy:
        """A :class:`TimestampAssigner`, a function ``(value, record_timestamp) -> ms`` (or
        ``value -> ms``), or the name/position of the field holding the timestamp."""
        if isinstance(timestamp_assigner, (str, int)) and not isinstance(timestamp_assigner, bool):
            assigner: TimestampAssigner = FieldTimestampAssigner(timestamp_assigner)
        elif isinstance(timestamp_assigner, TimestampAssigner):
            assigner = timestamp_assigner
        elif callable(timestamp_assigner):
            assigner = _CallableAssigner(timestamp_assigner)
        else:
            msg = (
                f"with_timestamp_assigner() needs a TimestampAssigner, a function (value, record_timestamp) -> ms "
                f"or a field name; got {timestamp_assigner!r:.80}"
            )
            raise ConfigurationError(msg)
        return replace(self, timestamp_assigner=assigner)

    def with_idleness(self, idle_timeout: Duration | int) -> WatermarkStrategy:
        ms = to_millis(idle_timeout, "with_idleness(idle_timeout)")
        if ms <= 0:
            msg = f"with_idleness: the idle timeout must be positive; got {ms} ms"
            raise ConfigurationError(msg)
        return replace(self, idleness_ms=ms)

    # -- used by the runtime -------------------------------------------------------------------

    @property
    def generates_watermarks(self) -> bool:
        return self.kind != "none"

    def create_watermark_generator(self, context: Any) -> WatermarkGenerator:
        if self.kind == "bounded":
            return BoundedOutOfOrdernessWatermarks(self.bound_ms)
        if self.kind == "custom":
            s = self.supplier
            gen = s.create_watermark_generator(context) if isinstance(s, WatermarkGeneratorSupplier) else s(context)
            if not isinstance(gen, WatermarkGenerator) and not (hasattr(gen, "on_event") and hasattr(gen, "on_periodic_emit")):
                msg = f"the watermark generator supplier returned {gen!r:.80}, not a WatermarkGenerator"
                raise ConfigurationError(msg)
            return gen
        return NoWatermarksGenerator()

    def create_timestamp_assigner(self) -> TimestampAssigner | None:
        return self.timestamp_assigner
