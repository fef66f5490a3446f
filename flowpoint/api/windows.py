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

import struct
from abc import ABC, abstractmethod
from collections.abc import Callable
from io import BytesIO
from typing import Any, Generic, NamedTuple, TypeVar

from flowpoint.api.serializer import TypeSerializer, deserialized, serialized
from flowpoint.api.time import MAX_WATERMARK, Duration, to_millis
from flowpoint.api.time import event_timestamp as _event_timestamp
from flowpoint.api.time import positive_millis as _positive
from flowpoint.errors import ConfigurationError

# -- windows -------------------------------------------------------------------------------------


T = TypeVar("T")
W = TypeVar("W")


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


class CountWindow(Window):
    """PyFlink's window of a count window with an id (``CountWindow(id=3)``). flowpoint's
    ``count_window`` runs on :class:`GlobalWindows` with a count trigger, as Java Flink does;
    its window functions see ``CountWindow(id=n)`` for the key's n-th firing, the ids PyFlink's
    count assigners give (tasks/window_operator.py)."""

    def __init__(self, id: int):  # noqa: A002 - PyFlink's name
        self.id = id

    def max_timestamp(self) -> int:
        return MAX_WATERMARK

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CountWindow) and other.id == self.id

    def __hash__(self) -> int:
        return hash(("CountWindow", self.id))

    def __repr__(self) -> str:
        return f"CountWindow(id={self.id})"


class TimeWindowSerializer(TypeSerializer[TimeWindow]):
    """PyFlink's serializer of :class:`TimeWindow`: start and end as big-endian 64-bit integers."""

    def serialize(self, element: TimeWindow, stream: BytesIO) -> None:
        stream.write(_TWO_LONGS.pack(element.start, element.end))

    def deserialize(self, stream: BytesIO) -> TimeWindow:
        return TimeWindow(*_TWO_LONGS.unpack(stream.read(16)))


class CountWindowSerializer(TypeSerializer[CountWindow]):
    """PyFlink's serializer of :class:`CountWindow`: its id as a big-endian 64-bit integer."""

    def serialize(self, element: CountWindow, stream: BytesIO) -> None:
        stream.write(_LONG.pack(element.id))

    def deserialize(self, stream: BytesIO) -> CountWindow:
        return CountWindow(_LONG.unpack(stream.read(8))[0])


class GlobalWindowSerializer(TypeSerializer[GlobalWindow]):
    """PyFlink's serializer of :class:`GlobalWindow`: one zero byte."""

    def serialize(self, element: GlobalWindow, stream: BytesIO) -> None:
        stream.write(b"\x00")

    def deserialize(self, stream: BytesIO) -> GlobalWindow:
        stream.read(1)
        return GlobalWindow()


_LONG = struct.Struct(">q")
_TWO_LONGS = struct.Struct(">qq")


class WindowAssigner(ABC, Generic[T, W]):
    """Assigns an element to windows. ``ctx.get_current_processing_time()`` is the operator's
    processing time (processing-time assigners use it instead of the element's timestamp)."""

    class WindowAssignerContext(ABC):
        """The ``ctx`` of ``assign_windows``."""

        __slots__ = ()

        @abstractmethod
        def get_current_processing_time(self) -> int: ...

    @abstractmethod
    def assign_windows(self, element: Any, timestamp: int | None, ctx: Any) -> list[Any]: ...

    @abstractmethod
    def get_default_trigger(self) -> Trigger: ...

    @abstractmethod
    def is_event_time(self) -> bool: ...

    def is_merging(self) -> bool:
        return False

    def get_window_serializer(self) -> Any:
        """PyFlink's: how this assigner's windows are written (a ``TypeSerializer``). flowpoint's
        own windows have a plain form (``to_namespace``); an assigner of windows without one
        must return a serializer, and its windows live in state as its bytes."""
        return TimeWindowSerializer()

    def namespace_of(self, window: Any) -> Any:
        """The form ``window`` takes in state and timers: its ``to_namespace()``, or for a window
        type without one, the bytes of this assigner's ``get_window_serializer()``."""
        plain = getattr(window, "to_namespace", None)
        if plain is not None:
            return plain()
        serializer = self.get_window_serializer()
        if serializer is None or not hasattr(serializer, "serialize"):
            msg = (
                f"window {window!r} of {type(self).__name__} has no to_namespace() and the assigner's get_window_serializer() "
                f"gave {serializer!r}: return a TypeSerializer (flowpoint.common.serializer) of the window type from it"
            )
            raise ConfigurationError(msg)
        try:
            return serialized(serializer, window)
        except (AttributeError, TypeError, ValueError, struct.error) as e:
            msg = (
                f"{type(self).__name__}.get_window_serializer() gave {serializer!r}, which cannot write window {window!r} "
                f"({type(e).__name__}: {e}): return a TypeSerializer of the window type (flowpoint.common.serializer), or give the window a to_namespace()"
            )
            raise ConfigurationError(msg) from e

    def window_from_namespace(self, namespace: Any) -> Any:
        """The window whose :meth:`namespace_of` is ``namespace`` (Flink's window serializer)."""
        if isinstance(namespace, bytes):
            return deserialized(self.get_window_serializer(), namespace)
        return TimeWindow(*namespace)

    def __repr__(self) -> str:
        fields = ", ".join(f"{v}" for v in vars(self).values())
        return f"{type(self).__name__}({fields})"


class MergingWindowAssigner(WindowAssigner):
    """An assigner whose windows can merge (sessions)."""

    class MergeCallback(ABC):
        """PyFlink's callback type of ``merge_windows``; flowpoint passes a plain function
        ``callback(to_be_merged, merge_result)``, which is what ``merge`` is called as."""

        @abstractmethod
        def merge(self, to_be_merged: list[Any], merge_result: Any) -> None: ...

        def __call__(self, to_be_merged: list[Any], merge_result: Any) -> None:
            self.merge(to_be_merged, merge_result)

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



class DynamicEventTimeSessionWindows(EventTimeSessionWindows):
    """PyFlink's name for event-time sessions with a gap per element:
    ``DynamicEventTimeSessionWindows.with_dynamic_gap(extractor)``."""


class DynamicProcessingTimeSessionWindows(ProcessingTimeSessionWindows):
    """PyFlink's name for processing-time sessions with a gap per element."""

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

    def get_window_serializer(self) -> Any:
        return GlobalWindowSerializer()

    def window_from_namespace(self, namespace: Any) -> GlobalWindow:
        return GlobalWindow()

    def __repr__(self) -> str:
        return "GlobalWindows()"


class CountTumblingWindowAssigner(GlobalWindows):
    """PyFlink's ``CountTumblingWindowAssigner.of(size)``: ``window(...)`` with it is
    ``count_window(size)``, a global window fired and purged every ``size`` elements of a key
    (window functions see ``CountWindow(id=n)``, as in PyFlink)."""

    def __init__(self, window_size: int, window_slide: int | None = None):
        self.size = window_size
        self.slide = window_slide

    @staticmethod
    def of(window_size: int) -> CountTumblingWindowAssigner:
        return CountTumblingWindowAssigner(window_size)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size})"


class CountSlidingWindowAssigner(CountTumblingWindowAssigner):
    """PyFlink's ``CountSlidingWindowAssigner.of(size, slide)``: ``count_window(size, slide)``,
    the last ``size`` elements of a key every ``slide`` elements."""

    @staticmethod
    def of(window_size: int, window_slide: int) -> CountSlidingWindowAssigner:  # type: ignore[override]
        return CountSlidingWindowAssigner(window_size, window_slide)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.size}, {self.slide})"


# triggers and evictors live in their own modules; imported here so windows.py stays the one
# place to import the windowing model from
from flowpoint.api.evictors import (  # noqa: E402
    CountEvictor,
    DeltaEvictor,
    Evictor,
    TimeEvictor,
    TimestampedValue,
)
from flowpoint.api.triggers import (  # noqa: E402
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountTrigger,
    EventTimeTrigger,
    NeverTrigger,
    ProcessingTimeTrigger,
    PurgingTrigger,
    Trigger,
    TriggerResult,
)

__all__ = [
    "ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger", "CountEvictor", "CountSlidingWindowAssigner",
    "CountTrigger", "CountTumblingWindowAssigner", "CountWindowSerializer", "DeltaEvictor",
    "EventTimeSessionWindows", "EventTimeTrigger", "Evictor", "GlobalWindow", "GlobalWindowSerializer", "GlobalWindows", "MergingWindowAssigner",
    "NeverTrigger", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "PurgingTrigger",
    "SessionWindowTimeGapExtractor", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeEvictor",
    "TimeWindow", "TimeWindowSerializer", "TimestampedValue", "Trigger", "TriggerResult", "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows", "Window", "WindowAssigner", "merge_time_windows",
]
