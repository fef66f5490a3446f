"""Evictors: remove elements from a window's contents before or after the window function runs
(Flink's ``CountEvictor``, ``TimeEvictor``, ``DeltaEvictor``). See :mod:`flowpoint.api.windows`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from flowpoint.api.time import Duration, to_millis
from flowpoint.errors import ConfigurationError

# -- evictors ------------------------------------------------------------------------------------



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
