"""Functions of two connected streams (``stream1.connect(stream2)``), named as in PyFlink.

``map1``/``flat_map1``/``process_element1`` get the first stream's records, the ``2`` methods
the second's. On keyed connected streams (``connect(...).key_by(key1, key2)``) both inputs of a
key share its keyed state and timers.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any

from flowpoint.api.functions import Function, ProcessFunction, RuntimeContextAware, TimerService


class CoMapFunction(Function, RuntimeContextAware):
    """One output record per input record, from either stream."""

    @abstractmethod
    def map1(self, value: Any) -> Any: ...

    @abstractmethod
    def map2(self, value: Any) -> Any: ...


class CoFlatMapFunction(Function, RuntimeContextAware):
    """Any number of output records (yield them) per input record, from either stream."""

    @abstractmethod
    def flat_map1(self, value: Any) -> Iterable[Any] | None: ...

    @abstractmethod
    def flat_map2(self, value: Any) -> Iterable[Any] | None: ...


class CoProcessFunction(Function, RuntimeContextAware):
    """Per record of either stream, with its timestamp, the clocks and side outputs
    (``ctx.output(tag, value)`` or ``yield tag, value``); timers need keyed streams."""

    class Context(ProcessFunction.Context, ABC):
        pass

    @abstractmethod
    def process_element1(self, value: Any, ctx: CoProcessFunction.Context) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: CoProcessFunction.Context) -> Iterable[Any] | None: ...


class KeyedCoProcessFunction(Function, RuntimeContextAware):
    """Like :class:`CoProcessFunction` on keyed connected streams: keyed state and timers of
    the current key, shared by both inputs; ``on_timer(timestamp, ctx)`` when a timer fires."""

    class Context(ProcessFunction.Context, ABC):
        @abstractmethod
        def get_current_key(self) -> Any: ...

        @abstractmethod
        def timer_service(self) -> TimerService: ...

    class OnTimerContext(Context, ABC):
        @abstractmethod
        def time_domain(self) -> Any:
            """:class:`flowpoint.TimeDomain` of the timer that fired."""

    @abstractmethod
    def process_element1(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Iterable[Any] | None: ...

    @abstractmethod
    def process_element2(self, value: Any, ctx: KeyedCoProcessFunction.Context) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: KeyedCoProcessFunction.OnTimerContext) -> Iterable[Any] | None:
        """A timer registered for the current key fired; yields output records."""
        return None


class _KeyedCoMap(KeyedCoProcessFunction):
    """A CoMapFunction on keyed connected streams (its functions may use keyed state)."""

    def __init__(self, f: CoMapFunction):
        self.f = f

    def open(self, runtime_context: Any) -> None:
        if hasattr(self.f, "open"):
            self.f.open(runtime_context)

    def close(self) -> None:
        if hasattr(self.f, "close"):
            self.f.close()

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any]:
        return (self.f.map1(value),)

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any]:
        return (self.f.map2(value),)


class _KeyedCoFlatMap(_KeyedCoMap):
    """A CoFlatMapFunction on keyed connected streams."""

    def process_element1(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        return self.f.flat_map1(value)

    def process_element2(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        return self.f.flat_map2(value)
