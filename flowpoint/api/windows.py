"""Windows, window assigners, triggers and evictors: Flink's windowing model, in pure Python.

A **window** is a bucket of a key's elements: a :class:`TimeWindow` ``[start, end)`` or the one
:class:`GlobalWindow`. A **window assigner** puts each element into zero or more windows
(tumbling, sliding, session, global); merging assigners (sessions) merge windows that overlap.
A **trigger** decides when a window is evaluated (FIRE) and when its contents are dropped
(PURGE), from elements and from event- or processing-time timers it registers. An **evictor**
removes elements from a window's contents before and/or after the window function runs.

Everything here is configuration: picklable objects that travel to the executors, where
:mod:`flowpoint.tasks.window_operator` runs them. Times are epoch milliseconds; every size
accepts a :class:`~flowpoint.api.time.Duration` (``Time.seconds(10)``) or an int of ms.
"""

from __future__ import annotations

import enum
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, NamedTuple

from flowpoint.api.state import ReducingStateDescriptor
from flowpoint.api.time import MAX_WATERMARK, Duration, to_millis
from flowpoint.errors import ConfigurationError

# -- windows -------------------------------------------------------------------------------------


class Window(ABC):  # noqa: B024 - a marker base, as in Flink
    """A bucket of elements; ``max_timestamp()`` is the last timestamp that belongs to it."""


class TimeWindow(NamedTuple):
    """The time interval ``[start, end)`` in epoch ms. Immutable, hashable, ordered by start."""

    start: int
    end: int

    def get_start(self) -> int:
        return self.start

    def get_end(self) -> int:
        return self.end

    def max_timestamp(self) -> int:
        return self.end - 1

    def intersects(self, other: TimeWindow) -> bool:
        """True if the windows overlap or touch (Flink merges ``[0, 5)`` and ``[5, 10)``)."""
        return self.start <= other.end and self.end >= other.start

    def cover(self, other: TimeWindow) -> TimeWindow:
        """The smallest window containing both."""
        return TimeWindow(min(self.start, other.start), max(self.end, other.end))

    def to_namespace(self) -> tuple[int, int]:
        """The plain form stored in state (see :meth:`WindowAssigner.window_from_namespace`)."""
        return (self.start, self.end)

    @staticmethod
    def get_window_start_with_offset(timestamp: int, offset: int, window_size: int) -> int:
        """Start of the window of ``window_size`` containing ``timestamp``, aligned to the epoch
        1970-01-01 plus ``offset`` (also for negative timestamps)."""
        return timestamp - (timestamp - offset) % window_size

    def __repr__(self) -> str:
        return f"TimeWindow(start={self.start}, end={self.end})"


Window.register(TimeWindow)


class GlobalWindow(Window):
    """The single window of :class:`GlobalWindows`: it holds every element and never ends."""

    _instance: GlobalWindow | None = None

    def __new__(cls) -> GlobalWindow:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    @staticmethod
    def get() -> GlobalWindow:
        return GlobalWindow()

    def max_timestamp(self) -> int:
        return MAX_WATERMARK

    def to_namespace(self) -> tuple:
        return ()

    def __reduce__(self) -> Any:
        return (GlobalWindow, ())

    def __eq__(self, other: object) -> bool:
        return isinstance(other, GlobalWindow)

    def __hash__(self) -> int:
        return 0x610BA1

    def __lt__(self, other: object) -> bool:
        return False

    def __repr__(self) -> str:
        return "GlobalWindow"


class TimestampedValue:
    """An element with its timestamp (``None`` if the stream has none), as evictors see it."""

    __slots__ = ("value", "timestamp")

    def __init__(self, value: Any, timestamp: int | None = None):
        self.value = value
        self.timestamp = timestamp

    def get_value(self) -> Any:
        return self.value

    def get_timestamp(self) -> int | None:
        return self.timestamp

    def has_timestamp(self) -> bool:
        return self.timestamp is not None

    def __eq__(self, other: object) -> bool:
        return isinstance(other, TimestampedValue) and (self.value, self.timestamp) == (other.value, other.timestamp)

    def __hash__(self) -> int:
        return hash((self.value, self.timestamp))

    def __repr__(self) -> str:
        return f"TimestampedValue({self.value!r}, {self.timestamp})"


# -- assigners -----------------------------------------------------------------------------------


def _positive(value: Duration | int, what: str) -> int:
    ms = to_millis(value, what)
    if ms <= 0:
        msg = f"{what} must be positive; got {ms} ms"
        raise ConfigurationError(msg)
    return ms


class WindowAssigner(ABC):
    """Assigns an element to windows. ``ctx.get_current_processing_time()`` is the operator's
    processing time (processing-time assigners use it instead of the element's timestamp)."""

    @abstractmethod
    def assign_windows(self, element: Any, timestamp: int | None, ctx: Any) -> list[Any]: ...

    @abstractmethod
    def get_default_trigger(self) -> Trigger: ...

    @abstractmethod
    def is_event_time(self) -> bool: ...

    def is_merging(self) -> bool:
        return False

    def window_from_namespace(self, namespace: tuple) -> Any:
        """The window whose ``to_namespace()`` is ``namespace`` (Flink's window serializer)."""
        return TimeWindow(*namespace)

    def __repr__(self) -> str:
        fields = ", ".join(f"{v}" for v in vars(self).values())
        return f"{type(self).__name__}({fields})"


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows can merge (sessions)."""

    def is_merging(self) -> bool:
        return True

    @abstractmethod
    def merge_windows(self, windows: list[Any], callback: Callable[[list[Any], Any], None]) -> None:
        """Call ``callback(to_be_merged, merge_result)`` for every group of windows to merge."""


def merge_time_windows(windows: list[TimeWindow], callback: Callable[[list[TimeWindow], TimeWindow], None]) -> None:
    """Flink's ``TimeWindow.mergeWindows``: sort by start, merge windows that intersect."""
    merged: list[tuple[TimeWindow, list[TimeWindow]]] = []
    for w in sorted(windows):
        if merged and merged[-1][0].intersects(w):
            cover, members = merged[-1]
            merged[-1] = (cover.cover(w), [*members, w])
        else:
            merged.append((w, [w]))
    for cover, members in merged:
        if len(members) > 1:
            callback(members, cover)


def _event_timestamp(timestamp: int | None) -> int:
    if timestamp is None:
        msg = (
            "an event-time window got a record without a timestamp: give the source a "
            "WatermarkStrategy with a timestamp assigner, or call assign_timestamps_and_watermarks(...) "
            "before the window (or use a processing-time window)"
        )
        raise ConfigurationError(msg)
    return timestamp


class _EventTime:
    """Mixin: windows by the element's event timestamp, fired by the watermark."""

    def _timestamp(self, timestamp: int | None, ctx: Any) -> int:
        return _event_timestamp(timestamp)

    def get_default_trigger(self) -> Trigger:
        return EventTimeTrigger()

    def is_event_time(self) -> bool:
        return True


class _ProcessingTime:
    """Mixin: windows by the operator's processing time when the element arrives."""

    def _timestamp(self, timestamp: int | None, ctx: Any) -> int:
        return ctx.get_current_processing_time()

    def get_default_trigger(self) -> Trigger:
        return ProcessingTimeTrigger()

    def is_event_time(self) -> bool:
        return False


class _Aligned(WindowAssigner):
    """Tumbling and sliding windows of ``size`` starting every ``slide`` ms, aligned to the
    epoch 1970-01-01 plus ``offset``: an element is in ``ceil(size / slide)`` windows."""

    def __init__(self, size: int, slide: int, offset: int):
        if abs(offset) >= slide:
            msg = f"{type(self).__name__} needs abs(offset) < {'slide' if slide != size else 'size'}; got {slide} ms and offset {offset} ms"
            raise ConfigurationError(msg)
        self.size, self.slide, self.offset = size, slide, offset

    def _timestamp(self, timestamp: int | None, ctx: Any) -> int:
        raise NotImplementedError

    def assign_windows(self, element: Any, timestamp: int | None, ctx: Any) -> list[TimeWindow]:
        ts = self._timestamp(timestamp, ctx)
        size, slide = self.size, self.slide
        last = ts - (ts - self.offset) % slide
        if slide == size:
            return [TimeWindow(last, last + size)]
        out = []
        start = last
        while start > ts - size:
            out.append(TimeWindow(start, start + size))
            start -= slide
        return out

    def __repr__(self) -> str:
        args = [self.size] if self.slide == self.size else [self.size, self.slide]
        if self.offset:
            args.append(self.offset)
        return f"{type(self).__name__}({', '.join(map(str, args))})"


class _Tumbling(_Aligned):
    @classmethod
    def of(cls, size: Duration | int, offset: Duration | int = 0) -> Any:
        size_ms = _positive(size, "the window size")
        return cls(size_ms, size_ms, to_millis(offset, "the window offset"))


class _Sliding(_Aligned):
    @classmethod
    def of(cls, size: Duration | int, slide: Duration | int, offset: Duration | int = 0) -> Any:
        return cls(_positive(size, "the window size"), _positive(slide, "the window slide"), to_millis(offset, "the window offset"))


class TumblingEventTimeWindows(_EventTime, _Tumbling):
    """Fixed-size, non-overlapping event-time windows ``[k*size + offset, (k+1)*size + offset)``:
    with a size of 10 s, 20:19:35 falls into [20:19:30, 20:19:40)."""


class TumblingProcessingTimeWindows(_ProcessingTime, _Tumbling):
    """Tumbling windows by the operator's processing time."""


class SlidingEventTimeWindows(_EventTime, _Sliding):
    """Event-time windows of ``size`` starting every ``slide``; they overlap when slide < size."""


class SlidingProcessingTimeWindows(_ProcessingTime, _Sliding):
    """Sliding windows by the operator's processing time."""


class _SessionWindows(MergingWindowAssigner):
    """An element opens ``[ts, ts + gap)``; windows of a key that overlap or touch merge."""

    def __init__(self, gap: int | None, extractor: Any = None):
        self.gap = gap
        self.extractor = extractor

    def _timestamp(self, timestamp: int | None, ctx: Any) -> int:
        raise NotImplementedError

    def assign_windows(self, element: Any, timestamp: int | None, ctx: Any) -> list[TimeWindow]:
        ts = self._timestamp(timestamp, ctx)
        gap = self.gap
        if gap is None:
            extract = getattr(self.extractor, "extract", self.extractor)
            gap = to_millis(extract(element), "the session gap returned by the gap extractor")
            if gap <= 0:
                msg = f"the dynamic session gap must be positive; the extractor returned {gap} ms for {element!r:.100}"
                raise ConfigurationError(msg)
        return [TimeWindow(ts, ts + gap)]

    def merge_windows(self, windows: list[Any], callback: Callable[[list[Any], Any], None]) -> None:
        merge_time_windows(windows, callback)

    @classmethod
    def with_gap(cls, size: Duration | int) -> Any:
        return cls(_positive(size, "the session gap"))

    @classmethod
    def with_dynamic_gap(cls, extractor: Any) -> Any:
        """``extractor(element) -> gap`` (a callable or an object with ``extract(element)``)."""
        if not callable(getattr(extractor, "extract", extractor)):
            msg = f"with_dynamic_gap() needs a callable or a SessionWindowTimeGapExtractor; got {extractor!r:.80}"
            raise ConfigurationError(msg)
        return cls(None, extractor)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.gap if self.gap is not None else 'dynamic'})"


class EventTimeSessionWindows(_EventTime, _SessionWindows):
    """Sessions by event time: a key's session ends after ``gap`` without elements."""


class ProcessingTimeSessionWindows(_ProcessingTime, _SessionWindows):
    """Sessions by the operator's processing time."""


class SessionWindowTimeGapExtractor(ABC):
    """``extract(element) -> gap`` for :meth:`EventTimeSessionWindows.with_dynamic_gap`."""

    @abstractmethod
    def extract(self, element: Any) -> Duration | int: ...


class GlobalWindows(WindowAssigner):
    """Every element of a key in one :class:`GlobalWindow`; the default trigger never fires,
    so give it a trigger (``count_window`` uses a :class:`CountTrigger`)."""

    @staticmethod
    def create() -> GlobalWindows:
        return GlobalWindows()

    def assign_windows(self, element: Any, timestamp: int | None, ctx: Any) -> list[GlobalWindow]:
        return [GlobalWindow()]

    def get_default_trigger(self) -> Trigger:
        return NeverTrigger()

    def is_event_time(self) -> bool:
        return False

    def window_from_namespace(self, namespace: tuple) -> GlobalWindow:
        return GlobalWindow()

    def __repr__(self) -> str:
        return "GlobalWindows()"


# -- triggers ------------------------------------------------------------------------------------


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


class Trigger(ABC):
    """Decides when a window fires. The ``ctx`` (one key and window at a time) offers
    ``register_event_time_timer(t)``, ``register_processing_time_timer(t)``, the delete
    variants, ``get_current_watermark()``, ``get_current_processing_time()`` and
    ``get_partitioned_state(descriptor)`` (state of this key and window); in ``on_merge`` also
    ``merge_partitioned_state(descriptor)``. Keep trigger objects free of per-window fields:
    one trigger object serves every key and window."""

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


# -- evictors ------------------------------------------------------------------------------------


class Evictor(ABC):
    """Removes elements from a window's contents: ``elements`` is a list of
    :class:`TimestampedValue` in arrival order; remove from it in place. ``evict_before`` runs
    before the window function, ``evict_after`` after it."""

    @abstractmethod
    def evict_before(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Any) -> None: ...

    @abstractmethod
    def evict_after(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Any) -> None: ...

    def __repr__(self) -> str:
        return type(self).__name__


class _PhaseEvictor(Evictor):
    """An evictor that runs either before or after the window function."""

    def __init__(self, do_evict_after: bool):
        self.do_evict_after = do_evict_after

    def _evict(self, elements: list[TimestampedValue], size: int, ctx: Any) -> None:
        raise NotImplementedError

    def evict_before(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Any) -> None:
        if not self.do_evict_after:
            self._evict(elements, size, ctx)

    def evict_after(self, elements: list[TimestampedValue], size: int, window: Any, ctx: Any) -> None:
        if self.do_evict_after:
            self._evict(elements, size, ctx)


class CountEvictor(_PhaseEvictor):
    """Keeps the last ``max_count`` elements."""

    def __init__(self, max_count: int, do_evict_after: bool = False):
        if not isinstance(max_count, int) or max_count < 0:
            msg = f"CountEvictor.of() needs a non-negative int; got {max_count!r}"
            raise ConfigurationError(msg)
        super().__init__(do_evict_after)
        self.max_count = max_count

    @staticmethod
    def of(max_count: int, do_evict_after: bool = False) -> CountEvictor:
        return CountEvictor(max_count, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int, ctx: Any) -> None:
        if size > self.max_count:
            del elements[: size - self.max_count]

    def __repr__(self) -> str:
        return f"CountEvictor({self.max_count})"


class TimeEvictor(_PhaseEvictor):
    """Keeps the elements within ``window_size`` of the newest element's timestamp (elements
    with ``timestamp <= max_timestamp - window_size`` go); does nothing without timestamps."""

    def __init__(self, window_size: int, do_evict_after: bool = False):
        super().__init__(do_evict_after)
        self.window_size = window_size

    @staticmethod
    def of(window_size: Duration | int, do_evict_after: bool = False) -> TimeEvictor:
        return TimeEvictor(to_millis(window_size, "the TimeEvictor size"), do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int, ctx: Any) -> None:
        if not elements or not elements[0].has_timestamp():
            return
        cutoff = max(e.timestamp for e in elements if e.timestamp is not None) - self.window_size
        elements[:] = [e for e in elements if e.timestamp is None or e.timestamp > cutoff]

    def __repr__(self) -> str:
        return f"TimeEvictor({self.window_size})"


class DeltaEvictor(_PhaseEvictor):
    """Removes the elements whose ``delta_function(element, last_element) >= threshold``."""

    def __init__(self, threshold: float, delta_function: Any, do_evict_after: bool = False):
        super().__init__(do_evict_after)
        fn = getattr(delta_function, "get_delta", delta_function)
        if not callable(fn):
            msg = f"DeltaEvictor.of() needs a delta function (a callable or an object with get_delta); got {delta_function!r:.80}"
            raise ConfigurationError(msg)
        self.threshold = threshold
        self.delta_function = delta_function

    @staticmethod
    def of(threshold: float, delta_function: Any, do_evict_after: bool = False) -> DeltaEvictor:
        return DeltaEvictor(threshold, delta_function, do_evict_after)

    def _evict(self, elements: list[TimestampedValue], size: int, ctx: Any) -> None:
        if not elements:
            return
        delta = getattr(self.delta_function, "get_delta", self.delta_function)
        last = elements[-1].value
        elements[:] = [e for e in elements if delta(e.value, last) < self.threshold]

    def __repr__(self) -> str:
        return f"DeltaEvictor({self.threshold})"


__all__ = [
    "ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger", "CountEvictor", "CountTrigger",
    "DeltaEvictor", "EventTimeSessionWindows", "EventTimeTrigger", "Evictor", "GlobalWindow", "GlobalWindows",
    "MergingWindowAssigner", "NeverTrigger", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger",
    "PurgingTrigger", "SessionWindowTimeGapExtractor", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows",
    "TimeEvictor", "TimeWindow", "TimestampedValue", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "Window", "WindowAssigner",
]
