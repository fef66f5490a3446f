"""User function base classes, named as in PyFlink's ``pyflink.datastream.functions``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from flowpoint.api.row import get_field
from flowpoint.errors import ConfigurationError, JobGraphError
from flowpoint.metrics.group import MetricGroup

if TYPE_CHECKING:
    from flowpoint.api.state import (
        AggregatingState,
        AggregatingStateDescriptor,
        ListState,
        ListStateDescriptor,
        MapState,
        MapStateDescriptor,
        ReducingState,
        ReducingStateDescriptor,
        ValueState,
        ValueStateDescriptor,
    )


IN = TypeVar("IN")
OUT = TypeVar("OUT")
KEY = TypeVar("KEY")
W = TypeVar("W")
W2 = TypeVar("W2")


class RuntimeContext(ABC):
    """What a function sees of the task running it: its index, the job, and keyed state."""

    @abstractmethod
    def get_task_name(self) -> str: ...

    @abstractmethod
    def get_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_max_number_of_parallel_subtasks(self) -> int: ...

    @abstractmethod
    def get_index_of_this_subtask(self) -> int: ...

    @abstractmethod
    def get_attempt_number(self) -> int:
        """0 for the first attempt of this task in this epoch, 1 for Spark's first retry, ..."""

    @abstractmethod
    def get_job_parameter(self, key: str, default_value: str | None = None) -> str | None: ...

    @abstractmethod
    def get_state(self, state_descriptor: ValueStateDescriptor) -> ValueState: ...

    @abstractmethod
    def get_list_state(self, state_descriptor: ListStateDescriptor) -> ListState: ...

    @abstractmethod
    def get_map_state(self, state_descriptor: MapStateDescriptor) -> MapState: ...

    @abstractmethod
    def get_reducing_state(self, state_descriptor: ReducingStateDescriptor) -> ReducingState: ...

    @abstractmethod
    def get_aggregating_state(self, state_descriptor: AggregatingStateDescriptor) -> AggregatingState: ...

    def get_metrics_group(self) -> Any:
        """The operator's metric group (PyFlink's ``MetricGroup``): register counters, gauges,
        meters and distributions in ``open()``; they are reported with the job's metrics."""
        group = getattr(self, "_metrics_group", None)
        if group is None:
            group = self._metrics_group = MetricGroup(owner=self.get_task_name())
        return group


class Function(ABC):  # noqa: B024 - a marker base, as in PyFlink
    """Base of all user functions."""


class CheckpointListener:
    """Mix into a user function to hear about checkpoints (Flink's ``CheckpointListener``).

    Every parallel instance is told, at the start of its next epoch, once a checkpoint is
    complete (state and sink output up to it are durable) or was aborted.
    """

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027
        """Checkpoint ``checkpoint_id`` completed."""

    def notify_checkpoint_aborted(self, checkpoint_id: int) -> None:  # noqa: B027
        """Checkpoint ``checkpoint_id`` was declined or expired."""


class RuntimeContextAware:
    def open(self, runtime_context: RuntimeContext) -> None:  # noqa: B027
        """Called once per task before the first record; declare state here."""

    def close(self) -> None:  # noqa: B027
        """Called when the task ends."""


class MapFunction(Function, RuntimeContextAware):
    @abstractmethod
    def map(self, value: Any) -> Any: ...


class FlatMapFunction(Function, RuntimeContextAware):
    @abstractmethod
    def flat_map(self, value: Any) -> Iterable[Any]: ...


class FilterFunction(Function, RuntimeContextAware):
    @abstractmethod
    def filter(self, value: Any) -> bool: ...


class KeySelector(Function):
    @abstractmethod
    def get_key(self, value: Any) -> Any: ...


class ReduceFunction(Function, RuntimeContextAware):
    @abstractmethod
    def reduce(self, value1: Any, value2: Any) -> Any: ...


class AggregateFunction(Function):
    """Incremental aggregation: accumulator in, result out (as in Flink)."""

    @abstractmethod
    def create_accumulator(self) -> Any: ...

    @abstractmethod
    def add(self, value: Any, accumulator: Any) -> Any: ...

    @abstractmethod
    def get_result(self, accumulator: Any) -> Any: ...

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        msg = f"{type(self).__name__} does not implement merge()"
        raise NotImplementedError(msg)


class SinkFunction(Function, RuntimeContextAware):
    """A sink called for every record: ``invoke(value, context)``."""

    @abstractmethod
    def invoke(self, value: Any, context: Any) -> None: ...


class TimerService(ABC):
    """``ctx.timer_service()``: the clocks and, on a keyed stream, timers for the current key."""

    @abstractmethod
    def current_processing_time(self) -> int: ...

    @abstractmethod
    def current_watermark(self) -> int: ...

    def register_event_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError

    def register_processing_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError

    def delete_event_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError

    def delete_processing_time_timer(self, timestamp: int) -> None:
        raise NotImplementedError


class ProcessFunction(Function, RuntimeContextAware):
    """``process_element(value, ctx)`` yields output records; ``ctx.output(tag, value)`` emits
    to a side output."""

    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int | None:
            """The record's event timestamp (None if the stream has none)."""

        @abstractmethod
        def timer_service(self) -> TimerService: ...

        @abstractmethod
        def output(self, output_tag: OutputTag, value: Any) -> None: ...

    @abstractmethod
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None: ...


class KeyedProcessFunction(Function, RuntimeContextAware):
    """Like :class:`ProcessFunction` on a keyed stream, with keyed state, the current key and
    timers: ``ctx.timer_service().register_event_time_timer(ts)`` calls ``on_timer(ts, ctx)``
    once the watermark reaches ``ts``."""

    class Context(ProcessFunction.Context, ABC):
        @abstractmethod
        def get_current_key(self) -> Any: ...

    class OnTimerContext(Context, ABC):
        @abstractmethod
        def time_domain(self) -> Any:
            """:class:`flowpoint.TimeDomain` of the timer that fired."""

    @abstractmethod
    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any] | None: ...

    def on_timer(self, timestamp: int, ctx: KeyedProcessFunction.OnTimerContext) -> Iterable[Any] | None:
        """A timer registered for the current key fired; yields output records."""
        return None


class Partitioner(Function):
    """``partition_custom(partitioner, key_selector)``: the receiving instance of a key."""

    @abstractmethod
    def partition(self, key: Any, num_partitions: int) -> int: ...


#: The tag of the main output (PyFlink's ``pyflink.common.constants``).
DEFAULT_OUTPUT_TAG = ""


class OutputTag:
    """Names a side output: ``ctx.output(tag, value)`` and ``stream.get_side_output(tag)``."""

    def __init__(self, tag_id: str, type_info: Any = None):
        if not isinstance(tag_id, str) or not tag_id:
            msg = f"OutputTag needs a non-empty string id; got {tag_id!r}"
            raise ConfigurationError(msg)
        self.tag_id = tag_id
        self.type_info = type_info

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OutputTag) and other.tag_id == self.tag_id

    def __hash__(self) -> int:
        return hash(("OutputTag", self.tag_id))

    def __repr__(self) -> str:
        return f"OutputTag({self.tag_id!r})"


# -- window functions (Flink's WindowedStream.process / apply) ----------------------------------


class ProcessWindowFunction(Function, RuntimeContextAware, Generic[IN, OUT, KEY, W]):
    """``process(key, context, elements)`` yields results for one window of one key.

    ``context.window()`` is the window; ``context.window_state()`` gives state scoped to this
    key and window (cleared with the window), ``context.global_state()`` state of the key across
    windows; ``context.current_watermark()``, ``context.current_processing_time()`` and
    ``context.output(tag, value)`` as in a process function."""

    class Context(ABC, Generic[W2]):
        @abstractmethod
        def window(self) -> Any: ...

        @abstractmethod
        def current_processing_time(self) -> int: ...

        @abstractmethod
        def current_watermark(self) -> int: ...

        @abstractmethod
        def window_state(self) -> Any: ...

        @abstractmethod
        def global_state(self) -> Any: ...

        @abstractmethod
        def output(self, output_tag: OutputTag, value: Any) -> None: ...

    @abstractmethod
    def process(self, key: Any, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any] | None: ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:  # noqa: B027
        """The window is being purged: clear any per-window state here."""


class ProcessAllWindowFunction(Function, RuntimeContextAware, Generic[IN, OUT, W]):
    """``window_all(...).process(f)``: ``process(context, elements)``."""

    Context = ProcessWindowFunction.Context

    @abstractmethod
    def process(self, context: ProcessWindowFunction.Context, elements: Iterable[Any]) -> Iterable[Any] | None: ...

    def clear(self, context: ProcessWindowFunction.Context) -> None:  # noqa: B027
        pass


class WindowFunction(Function, RuntimeContextAware, Generic[IN, OUT, KEY, W]):
    """Legacy: ``apply(key, window, inputs)`` yields results (Flink's collector is the yield)."""

    @abstractmethod
    def apply(self, key: Any, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


class AllWindowFunction(Function, RuntimeContextAware, Generic[IN, OUT, W]):
    """Legacy, non-keyed: ``apply(window, inputs)`` yields results."""

    @abstractmethod
    def apply(self, window: Any, inputs: Iterable[Any]) -> Iterable[Any] | None: ...


# Callables wrapped into the function classes above, so the runtime sees one shape.


class _Wrapped:
    def __init__(self, func: Any):
        self.func = func

    def user_function(self) -> Any:
        return self.func


class MapFunctionWrapper(_Wrapped, MapFunction):
    def map(self, value: Any) -> Any:
        return self.func(value)


class FlatMapFunctionWrapper(_Wrapped, FlatMapFunction):
    def flat_map(self, value: Any) -> Iterable[Any]:
        return self.func(value)


class FilterFunctionWrapper(_Wrapped, FilterFunction):
    def filter(self, value: Any) -> bool:
        return self.func(value)


class KeySelectorWrapper(_Wrapped, KeySelector):
    def get_key(self, value: Any) -> Any:
        return self.func(value)


class ReduceFunctionWrapper(_Wrapped, ReduceFunction):
    def reduce(self, value1: Any, value2: Any) -> Any:
        return self.func(value1, value2)


class SinkFunctionWrapper(_Wrapped, SinkFunction):
    def invoke(self, value: Any, context: Any) -> None:
        self.func(value)



class PartitionerWrapper(_Wrapped, Partitioner):
    def partition(self, key: Any, num_partitions: int) -> int:
        return self.func(key, num_partitions)

class FieldKeySelector(KeySelector):
    """``key_by(0)`` / ``key_by("channel")``: the key is one field of the record (see
    :func:`flowpoint.api.row.get_field`); ``key_by(["channel", "behavior"])``: the tuple of
    several fields. Columnar batches are keyed by field without converting records to rows."""

    def __init__(self, field: int | str | tuple):
        self.field = tuple(field) if isinstance(field, list) else field

    @property
    def fields(self) -> tuple:
        return self.field if isinstance(self.field, tuple) else (self.field,)

    def get_key(self, value: Any) -> Any:
        if isinstance(self.field, tuple):
            return tuple(get_field(value, f) for f in self.field)
        return get_field(value, self.field)

    def __repr__(self) -> str:
        return f"field {self.field!r}" if not isinstance(self.field, tuple) else f"fields {list(self.field)!r}"


def unwrap(function: Any) -> Any:
    """The function the user wrote (a lambda or a class instance), for error messages."""
    return function.user_function() if isinstance(function, _Wrapped) else function


def wrap(function: Any, base: type, wrapper: type, method: str) -> Any:
    """Accept an instance of ``base`` or a plain callable, as PyFlink does."""
    if isinstance(function, base):
        return function
    if callable(function):
        return wrapper(function)

    msg = f"expected a {base.__name__} or a callable for {method}; got {type(function).__name__}: {function!r:.80}"
    raise JobGraphError(msg)
