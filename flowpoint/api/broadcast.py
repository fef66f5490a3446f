"""Broadcast state (Flink's broadcast state pattern, seed 001).

``rules = env.from_collection(...).broadcast(MapStateDescriptor("rules"))`` sends every record of
a (small) stream to every parallel instance of the operator it is connected to:
``events.connect(rules).process(BroadcastProcessFunction)`` or, keyed,
``events.key_by(...).connect(rules).process(KeyedBroadcastProcessFunction)``.
``process_broadcast_element(value, ctx)`` may change the broadcast state (a map per descriptor);
``process_element(value, ctx)`` only reads it. Every instance sees the broadcast records in the
same order, so the state is identical everywhere; it is checkpointed once and given whole to
every instance on restore, whatever the new parallelism. Within an epoch, an instance handles
the epoch's broadcast records before the epoch's main records.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from flowpoint.api.broadcast_state import BroadcastState, ReadOnlyBroadcastState
from flowpoint.api.datastream import DataStream, KeyedStream
from flowpoint.api.functions import Function, RuntimeContextAware, TimerService
from flowpoint.api.state import MapStateDescriptor
from flowpoint.errors import JobGraphError
from flowpoint.graph.transformation import Transformation

if TYPE_CHECKING:
    from flowpoint.api.datastream import DataStream


KEY = TypeVar("KEY")
IN1 = TypeVar("IN1")
IN2 = TypeVar("IN2")
OUT = TypeVar("OUT")
K = TypeVar("K")
V = TypeVar("V")


class BaseBroadcastProcessFunction(Function, RuntimeContextAware):
    """Base of :class:`BroadcastProcessFunction` and :class:`KeyedBroadcastProcessFunction`,
    with the context types PyFlink annotates their methods with: ``process_element`` gets a
    ``ReadOnlyContext`` (broadcast state read-only), ``process_broadcast_element`` a
    ``Context`` (broadcast state writable)."""

    class BaseContext(ABC):
        @abstractmethod
        def timestamp(self) -> int | None:
            """The record's event timestamp (None if the stream has none)."""

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

        @abstractmethod
        def output(self, output_tag: Any, value: Any) -> None: ...

    class Context(BaseContext, ABC):
        @abstractmethod
        def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> BroadcastState: ...

    class ReadOnlyContext(BaseContext, ABC):
        @abstractmethod
        def get_broadcast_state(self, state_descriptor: MapStateDescriptor) -> ReadOnlyBroadcastState: ...


class BroadcastProcessFunction(BaseBroadcastProcessFunction, Generic[IN1, IN2, OUT]):
    """A non-keyed stream connected to a broadcast stream."""

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        pass

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        pass

    @abstractmethod
    def process_element(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        """A record of the main stream; ``ctx.get_broadcast_state(descriptor)`` is read-only."""

    @abstractmethod
    def process_broadcast_element(self, value: Any, ctx: Any) -> Iterable[Any] | None:
        """A broadcast record; ``ctx.get_broadcast_state(descriptor)`` is writable."""


class KeyedBroadcastProcessFunction(BroadcastProcessFunction, Generic[KEY, IN1, IN2, OUT]):
    """A keyed stream connected to a broadcast stream: keyed state and timers
    (``ctx.timer_service()``, :meth:`on_timer`) in ``process_element``,
    ``ctx.apply_to_keyed_state(descriptor, fn(key, state))`` in ``process_broadcast_element``."""

    class Context(BaseBroadcastProcessFunction.Context, ABC):
        @abstractmethod
        def apply_to_keyed_state(self, state_descriptor: Any, function: Any) -> None: ...

    class ReadOnlyContext(BaseBroadcastProcessFunction.ReadOnlyContext, ABC):
        @abstractmethod
        def timer_service(self) -> TimerService:
            """The current key's timers and the clocks."""

        @abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(ReadOnlyContext, ABC):
        """``on_timer``'s context: the firing timer's key, timestamp and time domain, the broadcast
        state read-only, the timer service."""

        @abstractmethod
        def time_domain(self) -> Any: ...

    def on_timer(self, timestamp: int, ctx: Any) -> Iterable[Any] | None:
        """A timer registered with ``ctx.timer_service()`` fires (``ctx`` an
        :class:`OnTimerContext`); outputs are emitted as ``process_element``'s are."""
        return None


class BroadcastStream:
    """A stream whose records go to every parallel instance, with broadcast state descriptors."""

    def __init__(self, stream: DataStream, descriptors: tuple[MapStateDescriptor, ...]):
        for d in descriptors:
            if not isinstance(d, MapStateDescriptor):
                msg = f"broadcast() takes MapStateDescriptors (broadcast state is a map); got {type(d).__name__}"
                raise JobGraphError(msg)
        self.stream = stream
        self.descriptors = descriptors


class BroadcastConnectedStream:
    """``stream.connect(broadcast_stream)``: call ``process(...)``."""

    def __init__(self, main: DataStream, broadcast: BroadcastStream):
        self.main = main
        self.broadcast = broadcast

    def process(self, func: BroadcastProcessFunction, output_type: Any = None) -> DataStream:
        keyed = isinstance(self.main, KeyedStream)
        wanted = KeyedBroadcastProcessFunction if keyed else BroadcastProcessFunction
        if not isinstance(func, BroadcastProcessFunction) or (keyed != isinstance(func, KeyedBroadcastProcessFunction)):
            msg = (
                f"process() on a {'keyed' if keyed else 'non-keyed'} stream connected to a broadcast stream needs a "
                f"{wanted.__name__}; got {type(func).__name__}"
            )
            raise JobGraphError(msg)
        env = self.main._env
        bcast = Transformation(kind="broadcast", name="Broadcast", inputs=[self.broadcast.stream._t], output_type=self.broadcast.stream._t.output_type)
        env._add_transformation(bcast)
        kind = "keyed_broadcast_process" if keyed else "broadcast_process"
        # the broadcast input comes first: within an epoch an instance applies the epoch's
        # broadcast records before its main records
        t = Transformation(kind=kind, name="Co-Process-Broadcast" + ("-Keyed" if keyed else ""), inputs=[bcast, self.main._t], function=func, output_type=output_type)
        t.options["broadcast_descriptors"] = [d.name for d in self.broadcast.descriptors]
        t.options["main_type"] = self.main._t.output_type
        env._add_transformation(t)
        return DataStream(env, t)
