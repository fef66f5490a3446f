"""Namespaced keyed state: keyed state with a second dimension, the namespace (a window).

Flink keys window contents, trigger state and per-window state by (key, namespace). Here a
namespaced state is a MapState of the backend whose map key is the namespace, so both backends,
their deltas, checkpoints, savepoints and rescaling (by key group of the key) work unchanged.
Namespaces are plain, stable values (a :class:`~flowpoint.api.windows.TimeWindow` is stored as
``(start, end)``, see ``Window.to_namespace``). A namespace without a value has no map entry,
and a key without namespaces has no state at all.

Set the backend's current key and :meth:`NamespacedState.set_current_namespace` before use.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flowpoint.api.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from flowpoint.errors import StateAccessError


class NamespacedState:
    """The state of one descriptor across the namespaces of the current key."""

    __slots__ = ("_map", "_descriptor", "namespace")

    def __init__(self, backend: Any, descriptor: StateDescriptor, state_name: str):
        self._map = backend.get_partitioned_state(MapStateDescriptor(state_name))
        self._descriptor = descriptor
        self.namespace: Any = None

    def set_current_namespace(self, namespace: Any) -> None:
        self.namespace = namespace

    def clear(self) -> None:
        """Remove the value of the current key and namespace."""
        self._map.remove(self.namespace)

    def namespaces(self) -> list[Any]:
        """The namespaces of the current key that hold a value."""
        return list(self._map.keys())

    def raw(self) -> Any:
        """The stored value of the current namespace (None if none): for the window operator."""
        return self._map.get(self.namespace)

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merge the values of ``sources`` into ``target`` and remove them (Flink's
        ``InternalMergingState.mergeNamespaces``): sources in order, then onto the target's."""
        m = self._map
        merged: Any = None
        for ns in sources:
            value = m.get(ns)
            if value is None:
                continue
            m.remove(ns)
            merged = value if merged is None else self._merge(merged, value)
        if merged is not None:
            current = m.get(target)
            m.put(target, merged if current is None else self._merge(current, merged))

    def _merge(self, a: Any, b: Any) -> Any:
        msg = f"{type(self).__name__} {self._descriptor.name!r} cannot be merged; only list, reducing and aggregating state merge"
        raise StateAccessError(msg)


class NamespacedValueState(NamespacedState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        return self._map.get(self.namespace)

    def update(self, value: Any) -> None:
        if value is None:
            self._map.remove(self.namespace)
        else:
            self._map.put(self.namespace, value)


class NamespacedListState(NamespacedState, ListState):
    __slots__ = ()

    def get(self) -> list:
        current = self._map.get(self.namespace)
        return [] if current is None else list(current)

    def add(self, value: Any) -> None:
        if value is None:
            msg = f"list state {self._descriptor.name!r}: cannot add None"
            raise StateAccessError(msg)
        m, ns = self._map, self.namespace
        current = m.get(ns)
        if current is None:
            m.put(ns, [value])
        else:
            current.append(value)
            m.put(ns, current)

    def add_all(self, values: list[Any]) -> None:
        if not values:
            return
        m, ns = self._map, self.namespace
        current = m.get(ns)
        m.put(ns, list(values) if current is None else [*current, *values])

    def update(self, values: list[Any]) -> None:
        if values:
            self._map.put(self.namespace, list(values))
        else:
            self._map.remove(self.namespace)

    def _merge(self, a: Any, b: Any) -> Any:
        return [*a, *b]


class NamespacedReducingState(NamespacedState, ReducingState):
    __slots__ = ()

    def get(self) -> Any:
        return self._map.get(self.namespace)

    def add(self, value: Any) -> None:
        m, ns = self._map, self.namespace
        current = m.get(ns)
        m.put(ns, value if current is None else self._descriptor.reduce_function.reduce(current, value))  # type: ignore[attr-defined]

    def _merge(self, a: Any, b: Any) -> Any:
        return self._descriptor.reduce_function.reduce(a, b)  # type: ignore[attr-defined]


class NamespacedAggregatingState(NamespacedState, AggregatingState):
    """Holds the accumulator; ``get()`` is the function's result for it."""

    __slots__ = ()

    def get(self) -> Any:
        acc = self._map.get(self.namespace)
        return None if acc is None else self._descriptor.agg_function.get_result(acc)  # type: ignore[attr-defined]

    def add(self, value: Any) -> None:
        fn = self._descriptor.agg_function  # type: ignore[attr-defined]
        m, ns = self._map, self.namespace
        acc = m.get(ns)
        if acc is None:
            acc = fn.create_accumulator()
        m.put(ns, fn.add(value, acc))

    def merge_accumulator(self, partial: Any) -> None:
        """Merge a partial accumulator (of records aggregated elsewhere) into this one."""
        m, ns = self._map, self.namespace
        acc = m.get(ns)
        m.put(ns, partial if acc is None else self._descriptor.agg_function.merge(acc, partial))  # type: ignore[attr-defined]

    def _merge(self, a: Any, b: Any) -> Any:
        return self._descriptor.agg_function.merge(a, b)  # type: ignore[attr-defined]


class NamespacedMapState(NamespacedState, MapState):
    """A map per namespace, stored as one dict (copied on write)."""

    __slots__ = ()

    def _dict(self) -> dict:
        return self._map.get(self.namespace) or {}

    def _write(self, d: dict) -> None:
        if d:
            self._map.put(self.namespace, d)
        else:
            self._map.remove(self.namespace)

    def get(self, key: Any) -> Any:
        return self._dict().get(key)

    def put(self, key: Any, value: Any) -> None:
        d = dict(self._dict())
        d[key] = value
        self._write(d)

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        if dict_value:
            self._write({**self._dict(), **dict_value})

    def remove(self, key: Any) -> None:
        d = self._dict()
        if key in d:
            d = dict(d)
            del d[key]
            self._write(d)

    def contains(self, key: Any) -> bool:
        return key in self._dict()

    def items(self):
        return list(self._dict().items())

    def keys(self):
        return list(self._dict().keys())

    def values(self):
        return list(self._dict().values())

    def is_empty(self) -> bool:
        return not self._dict()


_CLASSES: dict[type, type] = {
    ValueStateDescriptor: NamespacedValueState,
    ListStateDescriptor: NamespacedListState,
    MapStateDescriptor: NamespacedMapState,
    ReducingStateDescriptor: NamespacedReducingState,
    AggregatingStateDescriptor: NamespacedAggregatingState,
}


def namespaced_state(backend: Any, descriptor: StateDescriptor, prefix: str = "") -> NamespacedState:
    """The namespaced state of ``descriptor``, stored as the backend's MapState ``prefix + name``."""
    for klass in type(descriptor).__mro__:
        cls = _CLASSES.get(klass)
        if cls is not None:
            return cls(backend, descriptor, prefix + descriptor.name)
    msg = f"unknown state descriptor {descriptor!r}"
    raise StateAccessError(msg)


class NamespacedStateStore:
    """A ``KeyedStateStore`` (``get_state``, ``get_list_state``, ...) whose states are scoped to
    one namespace: triggers' ``ctx.get_partitioned_state`` and ``context.window_state()``."""

    def __init__(self, backend: Any, prefix: str):
        self.backend = backend
        self.prefix = prefix
        self.namespace: Any = None
        self._states: dict[str, NamespacedState] = {}

    def state(self, descriptor: StateDescriptor) -> Any:
        s = self._states.get(descriptor.name)
        if s is None:
            s = self._states[descriptor.name] = namespaced_state(self.backend, descriptor, self.prefix)
        elif s._descriptor.kind != descriptor.kind:
            msg = (
                f"state {descriptor.name!r} is declared as {descriptor.kind} state, but it was declared as "
                f"{s._descriptor.kind} state before; give the two states different names"
            )
            raise StateAccessError(msg)
        s.namespace = self.namespace
        return s

    get_state = state
    get_list_state = state
    get_map_state = state
    get_reducing_state = state
    get_aggregating_state = state
    get_partitioned_state = state

    def merge(self, descriptor: StateDescriptor, target: Any, sources: Iterable[Any]) -> None:
        s = self.state(descriptor)
        s.merge_namespaces(target, sources)
        s.namespace = self.namespace
