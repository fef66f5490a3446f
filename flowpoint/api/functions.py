"""User function base classes, named as in PyFlink's ``pyflink.datastream.functions``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from flowpoint.api.row import get_field

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


class ProcessFunction(Function, RuntimeContextAware):
    """``process_element(value, ctx)`` yields output records."""

    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int | None: ...

    @abstractmethod
    def process_element(self, value: Any, ctx: ProcessFunction.Context) -> Iterable[Any] | None: ...


class KeyedProcessFunction(Function, RuntimeContextAware):
    """Like :class:`ProcessFunction` on a keyed stream, with keyed state and the current key."""

    class Context(ABC):
        @abstractmethod
        def timestamp(self) -> int | None: ...

        @abstractmethod
        def get_current_key(self) -> Any: ...

    @abstractmethod
    def process_element(self, value: Any, ctx: KeyedProcessFunction.Context) -> Iterable[Any] | None: ...


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


class FieldKeySelector(KeySelector):
    """``key_by(0)`` / ``key_by("channel")``: the key is one field of the record (see
    :func:`flowpoint.api.row.get_field`)."""

    def __init__(self, field: int | str):
        self.field = field

    def get_key(self, value: Any) -> Any:
        return get_field(value, self.field)

    def __repr__(self) -> str:
        return f"field {self.field!r}"


def unwrap(function: Any) -> Any:
    """The function the user wrote (a lambda or a class instance), for error messages."""
    return function.user_function() if isinstance(function, _Wrapped) else function


def wrap(function: Any, base: type, wrapper: type, method: str) -> Any:
    """Accept an instance of ``base`` or a plain callable, as PyFlink does."""
    if isinstance(function, base):
        return function
    if callable(function):
        return wrapper(function)
    from flowpoint.errors import JobGraphError

    msg = f"expected a {base.__name__} or a callable for {method}; got {type(function).__name__}: {function!r:.80}"
    raise JobGraphError(msg)
