"""Triggers: when a window is evaluated (FIRE) and when its contents are dropped (PURGE), from
its elements and the event- or processing-time timers the trigger registers (Flink's
``Trigger``, ``TriggerResult`` and built-in triggers). See :mod:`flowpoint.api.windows`.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from typing import Any, Generic, TypeVar

from flowpoint.api.state import ReducingStateDescriptor
from flowpoint.api.time import Duration
from flowpoint.api.time import event_timestamp as _event_timestamp
from flowpoint.api.time import positive_millis as _positive
from flowpoint.errors import ConfigurationError

# -- triggers ------------------------------------------------------------------------------------


T = TypeVar("T")
W = TypeVar("W")


class TriggerResult(enum.Enum):
    """What a trigger decides: evaluate the window (FIRE), drop its contents (PURGE), both, or
    nothing (CONTINUE)."""

    CONTINUE = (False, False)
    FIRE = (True, False)
    PURGE = (False, True)
    FIRE_AND_PURGE = (True, True)

    def is_fire(self) -> bool:
        return self.value[0]

    def is_purge(self) -> bool:
        return self.value[1]


class Trigger(ABC, Generic[T, W]):
    """Decides when a window fires. The ``ctx`` (one key and window at a time) offers
    ``register_event_time_timer(t)``, ``register_processing_time_timer(t)``, the delete
    variants, ``get_current_watermark()``, ``get_current_processing_time()`` and
    ``get_partitioned_state(descriptor)`` (state of this key and window); in ``on_merge`` also
    ``merge_partitioned_state(descriptor)``. Keep trigger objects free of per-window fields:
    one trigger object serves every key and window."""

    class TriggerContext(ABC):
        """The ``ctx`` a trigger gets: the clocks, timers and state of one key and window."""

        __slots__ = ()

        @abstractmethod
        def get_current_processing_time(self) -> int: ...

        @abstractmethod
        def get_current_watermark(self) -> int: ...

        @abstractmethod
        def register_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def register_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_processing_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def delete_event_time_timer(self, time: int) -> None: ...

        @abstractmethod
        def get_partitioned_state(self, state_descriptor: Any) -> Any: ...

    class OnMergeContext(TriggerContext, ABC):
        """The ``ctx`` of ``on_merge``: also merges the merged windows' state into the result's."""

        __slots__ = ()

        @abstractmethod
        def merge_partitioned_state(self, state_descriptor: Any) -> None: ...

    @abstractmethod
    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult: ...

    @abstractmethod
    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult: ...

    @abstractmethod
    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult: ...

    def can_merge(self) -> bool:
        return False

    def on_merge(self, window: Any, ctx: Any) -> None:
        msg = f"{type(self).__name__} does not support merging windows"
        raise NotImplementedError(msg)

    @abstractmethod
    def clear(self, window: Any, ctx: Any) -> None:
        """The window is being removed: delete its timers and state."""

    def __repr__(self) -> str:
        return type(self).__name__


class EventTimeTrigger(Trigger):
    """Fires once the watermark passes the window's end (at once for an element of a window
    the watermark already passed: a late firing within the allowed lateness)."""

    @staticmethod
    def create() -> EventTimeTrigger:
        return EventTimeTrigger()

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_watermark():
            ctx.register_event_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_event_time_timer(window.max_timestamp())


class ProcessingTimeTrigger(Trigger):
    """Fires when the operator's processing time passes the window's end."""

    @staticmethod
    def create() -> ProcessingTimeTrigger:
        return ProcessingTimeTrigger()

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        ctx.register_processing_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.FIRE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        if window.max_timestamp() > ctx.get_current_processing_time():
            ctx.register_processing_time_timer(window.max_timestamp())

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.delete_processing_time_timer(window.max_timestamp())


class NeverTrigger(Trigger):
    """The default trigger of :class:`GlobalWindows`: never fires."""

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        pass

    def clear(self, window: Any, ctx: Any) -> None:
        pass


def _sum(a: int, b: int) -> int:
    return a + b


class CountTrigger(Trigger):
    """Fires when a window holds ``max_count`` elements since it last fired (the count is state
    of the key and window)."""

    def __init__(self, max_count: int):
        if not isinstance(max_count, int) or max_count < 1:
            msg = f"CountTrigger.of() needs a positive int; got {max_count!r}"
            raise ConfigurationError(msg)
        self.max_count = max_count
        self.state_desc = ReducingStateDescriptor("count", _sum)

    @staticmethod
    def of(max_count: int) -> CountTrigger:
        return CountTrigger(max_count)

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        count = ctx.get_partitioned_state(self.state_desc)
        count.add(1)
        if count.get() >= self.max_count:
            count.clear()
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)

    def clear(self, window: Any, ctx: Any) -> None:
        ctx.get_partitioned_state(self.state_desc).clear()

    def __repr__(self) -> str:
        return f"CountTrigger({self.max_count})"


class PurgingTrigger(Trigger):
    """Turns every FIRE of the nested trigger into FIRE_AND_PURGE."""

    def __init__(self, nested: Trigger):
        if not isinstance(nested, Trigger):
            msg = f"PurgingTrigger.of() needs a Trigger; got {nested!r:.80}"
            raise ConfigurationError(msg)
        self.nested = nested

    @staticmethod
    def of(nested_trigger: Trigger) -> PurgingTrigger:
        return PurgingTrigger(nested_trigger)

    @staticmethod
    def _purging(result: TriggerResult) -> TriggerResult:
        return TriggerResult.FIRE_AND_PURGE if result.is_fire() else result

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_element(element, timestamp, window, ctx))

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_event_time(time, window, ctx))

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return self._purging(self.nested.on_processing_time(time, window, ctx))

    def can_merge(self) -> bool:
        return self.nested.can_merge()

    def on_merge(self, window: Any, ctx: Any) -> None:
        self.nested.on_merge(window, ctx)

    def clear(self, window: Any, ctx: Any) -> None:
        self.nested.clear(window, ctx)

    def __repr__(self) -> str:
        return f"PurgingTrigger({self.nested!r})"


def _java_floor_to(timestamp: int, interval: int) -> int:
    """``timestamp - timestamp % interval`` with Java's remainder (towards zero), as Flink."""
    rem = abs(timestamp) % interval
    return timestamp - (rem if timestamp >= 0 else -rem)


class _ContinuousTrigger(Trigger):
    def __init__(self, interval: int):
        self.interval = interval
        self.state_desc = ReducingStateDescriptor("fire-time", min)

    @classmethod
    def of(cls, interval: Duration | int) -> Any:
        return cls(_positive(interval, "the trigger interval"))

    def _register(self, time: int, window: Any, ctx: Any, fire_time: Any) -> None:
        nxt = min(time + self.interval, window.max_timestamp())
        fire_time.add(nxt)
        self._register_timer(ctx, nxt)

    def _register_timer(self, ctx: Any, time: int) -> None:
        raise NotImplementedError

    def _delete_timer(self, ctx: Any, time: int) -> None:
        raise NotImplementedError

    def can_merge(self) -> bool:
        return True

    def on_merge(self, window: Any, ctx: Any) -> None:
        ctx.merge_partitioned_state(self.state_desc)
        nxt = ctx.get_partitioned_state(self.state_desc).get()
        if nxt is not None:
            self._register_timer(ctx, nxt)

    def clear(self, window: Any, ctx: Any) -> None:
        fire_time = ctx.get_partitioned_state(self.state_desc)
        t = fire_time.get()
        if t is not None:
            self._delete_timer(ctx, t)
            fire_time.clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.interval})"


class ContinuousEventTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of event time (aligned to the epoch) and at the window's end."""

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        if window.max_timestamp() <= ctx.get_current_watermark():
            return TriggerResult.FIRE
        ctx.register_event_time_timer(window.max_timestamp())
        fire_time = ctx.get_partitioned_state(self.state_desc)
        if fire_time.get() is None:
            self._register(_java_floor_to(_event_timestamp(timestamp), self.interval), window, ctx, fire_time)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        if time == window.max_timestamp():
            return TriggerResult.FIRE
        fire_time = ctx.get_partitioned_state(self.state_desc)
        if fire_time.get() == time:
            fire_time.clear()
            self._register(time, window, ctx, fire_time)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def _register_timer(self, ctx: Any, time: int) -> None:
        ctx.register_event_time_timer(time)

    def _delete_timer(self, ctx: Any, time: int) -> None:
        ctx.delete_event_time_timer(time)


class ContinuousProcessingTimeTrigger(_ContinuousTrigger):
    """Fires every ``interval`` of processing time (aligned to the epoch), the last time at the
    window's end."""

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        fire_time = ctx.get_partitioned_state(self.state_desc)
        if fire_time.get() is None:
            now = ctx.get_current_processing_time()
            self._register(_java_floor_to(now, self.interval), window, ctx, fire_time)
        return TriggerResult.CONTINUE

    def on_event_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        return TriggerResult.CONTINUE

    def on_processing_time(self, time: int, window: Any, ctx: Any) -> TriggerResult:
        fire_time = ctx.get_partitioned_state(self.state_desc)
        if fire_time.get() == time:
            fire_time.clear()
            self._register(time, window, ctx, fire_time)
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def _register_timer(self, ctx: Any, time: int) -> None:
        ctx.register_processing_time_timer(time)

    def _delete_timer(self, ctx: Any, time: int) -> None:
        ctx.delete_processing_time_timer(time)


class SlidingCountTrigger(CountTrigger):
    """PyFlink's count sliding windows (``count_window(size, slide)``,
    ``CountSlidingWindowAssigner``) on a global window with a ``CountEvictor(size)``: fires once
    the key has ``size`` elements, then every ``slide`` elements, so each firing sees exactly the
    last ``size`` elements and no partial window comes before the first ``size`` (Java Flink's
    ``countWindow(size, slide)`` fires every ``slide`` elements from the start). A
    :class:`CountTrigger` of ``size`` whose count restarts ``slide`` elements short of it."""

    def __init__(self, size: int, slide: int):
        super().__init__(size)
        self.slide = slide

    def on_element(self, element: Any, timestamp: int | None, window: Any, ctx: Any) -> TriggerResult:
        count = ctx.get_partitioned_state(self.state_desc)
        count.add(1)
        if count.get() >= self.max_count:
            count.clear()
            count.add(self.max_count - self.slide)  # the next firing comes ``slide`` elements later
            return TriggerResult.FIRE
        return TriggerResult.CONTINUE

    def __repr__(self) -> str:
        return f"SlidingCountTrigger({self.max_count}, {self.slide})"
