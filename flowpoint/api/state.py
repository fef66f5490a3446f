"""Keyed state: descriptors (what a function declares) and the state interfaces it uses.

Names and operations follow PyFlink's ``pyflink.datastream.state``. The implementations live in
``flowpoint.state.kinds`` (over the HashMap or RocksDB backend's state tables); a function
obtains them from its ``RuntimeContext`` in ``open()``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable
from typing import Any, Generic, TypeVar

from flowpoint.api.functions import AggregateFunction, ReduceFunction, ReduceFunctionWrapper
from flowpoint.api.state_ttl import StateTtlConfig
from flowpoint.api.types import TypeInformation
from flowpoint.errors import ConfigurationError

T = TypeVar("T")
IN = TypeVar("IN")
OUT = TypeVar("OUT")
K = TypeVar("K")
V = TypeVar("V")


class StateDescriptor:
    """Names a state and its type. Two descriptors with one name in one operator must agree."""

    kind = "state"

    def __init__(self, name: str, type_info: TypeInformation | None = None):
        if not isinstance(name, str) or not name:
            msg = f"a state descriptor needs a non-empty string name; got {name!r}"
            raise ConfigurationError(msg)
        self.name = name
        self.type_info = type_info

    def get_name(self) -> str:
        return self.name

    ttl_config: Any = None

    def enable_time_to_live(self, ttl_config: Any) -> None:
        """Expire this state's values ``ttl`` after their last write (or read): see
        :class:`~flowpoint.api.state_ttl.StateTtlConfig`."""
        if not isinstance(ttl_config, StateTtlConfig):
            msg = f"enable_time_to_live() on state {self.name!r} needs a StateTtlConfig (StateTtlConfig.new_builder(Time.seconds(...)).build()); got {ttl_config!r:.80}"
            raise ConfigurationError(msg)
        self.ttl_config = ttl_config

    migration_function: Any = None

    def with_migration(self, function: Any) -> StateDescriptor:
        """Restore this state from a checkpoint or savepoint that holds it with another declared
        type: ``function(old_value)`` gives the new value (a list state's elements and a map
        state's values one by one). Values already of the new type are left alone. A Row type
        that only gained or lost fields needs no function (fields match by name)."""
        if not callable(function):
            msg = f"with_migration() on state {self.name!r} needs a function old_value -> new_value; got {function!r:.80}"
            raise ConfigurationError(msg)
        self.migration_function = function
        return self

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"


class ValueStateDescriptor(StateDescriptor):
    kind = "value"

    def __init__(self, name: str, value_type_info: TypeInformation | None = None):
        super().__init__(name, value_type_info)


class ListStateDescriptor(StateDescriptor):
    kind = "list"

    def __init__(self, name: str, elem_type_info: TypeInformation | None = None):
        super().__init__(name, elem_type_info)


class MapStateDescriptor(StateDescriptor):
    kind = "map"

    def __init__(self, name: str, key_type_info: TypeInformation | None = None, value_type_info: TypeInformation | None = None):
        super().__init__(name, value_type_info)
        self.key_type_info = key_type_info


class ReducingStateDescriptor(StateDescriptor):
    kind = "reducing"

    def __init__(self, name: str, reduce_function: Any, type_info: TypeInformation | None = None):
        super().__init__(name, type_info)
        if isinstance(reduce_function, ReduceFunction):
            self.reduce_function = reduce_function
        elif callable(reduce_function):
            self.reduce_function = ReduceFunctionWrapper(reduce_function)
        else:
            msg = f"ReducingStateDescriptor {name!r} needs a ReduceFunction or a callable; got {reduce_function!r:.80}"
            raise ConfigurationError(msg)


class AggregatingStateDescriptor(StateDescriptor):
    kind = "aggregating"

    def __init__(self, name: str, agg_function: AggregateFunction, state_type_info: TypeInformation | None = None):
        super().__init__(name, state_type_info)
        if not isinstance(agg_function, AggregateFunction):
            msg = f"AggregatingStateDescriptor {name!r} needs an AggregateFunction; got {agg_function!r:.80}"
            raise ConfigurationError(msg)
        self.agg_function = agg_function


class State(ABC):
    @abstractmethod
    def clear(self) -> None: ...


class ValueState(State, Generic[T]):
    @abstractmethod
    def value(self) -> Any: ...

    @abstractmethod
    def update(self, value: Any) -> None: ...


class AppendingState(State, Generic[IN, OUT]):
    @abstractmethod
    def get(self) -> Any: ...

    @abstractmethod
    def add(self, value: Any) -> None: ...


class MergingState(AppendingState):
    pass


class ListState(MergingState):
    @abstractmethod
    def update(self, values: list[Any]) -> None: ...

    @abstractmethod
    def add_all(self, values: list[Any]) -> None: ...

    def __iter__(self):
        return iter(self.get())


class ReducingState(MergingState):
    pass


class AggregatingState(MergingState):
    pass


class MapState(State, Generic[K, V]):
    @abstractmethod
    def get(self, key: Any) -> Any: ...

    @abstractmethod
    def put(self, key: Any, value: Any) -> None: ...

    @abstractmethod
    def put_all(self, dict_value: dict[Any, Any]) -> None: ...

    @abstractmethod
    def remove(self, key: Any) -> None: ...

    @abstractmethod
    def contains(self, key: Any) -> bool: ...

    @abstractmethod
    def items(self) -> Iterable[tuple[Any, Any]]: ...

    @abstractmethod
    def keys(self) -> Iterable[Any]: ...

    @abstractmethod
    def values(self) -> Iterable[Any]: ...

    @abstractmethod
    def is_empty(self) -> bool: ...

    def __getitem__(self, key: Any) -> Any:
        return self.get(key)

    def __setitem__(self, key: Any, value: Any) -> None:
        self.put(key, value)

    def __delitem__(self, key: Any) -> None:
        self.remove(key)

    def __contains__(self, key: Any) -> bool:
        return self.contains(key)

    def __iter__(self):
        return iter(self.keys())
