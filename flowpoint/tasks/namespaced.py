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
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from flowpoint.errors import StateAccessError
from flowpoint.state.kinds import (
    ABSENT,
    KeyedAggregatingState,
    KeyedListState,
    KeyedMapState,
    KeyedReducingState,
    KeyedValueState,
)


class NamespaceTable:
    """The state table (``state/kinds.py``) of one namespaced state: its values by namespace, held
    in the backend's MapState of the current key. A MapState kind's map is one dict per
    namespace, replaced (never changed in place) on every write."""

    __slots__ = ("m",)

    def __init__(self, m: Any):
        self.m = m

    def peek(self, ns: Any) -> Any:
        value = self.m.get(ns)
        return ABSENT if value is None else value

    read = peek  # the backend's MapState keeps what user code changes in a value it got
    current = peek
    elements = peek

    def write(self, ns: Any, value: Any) -> None:
        self.m.put(ns, value)

    def remove(self, ns: Any) -> None:
        self.m.remove(ns)

    def _dict(self, ns: Any) -> dict:
        return self.m.get(ns) or {}

    def _store(self, ns: Any, d: dict) -> None:
        if d:
            self.m.put(ns, d)
        else:
            self.m.remove(ns)

    def map_get(self, ns: Any, uk: Any) -> Any:
        return self._dict(ns).get(uk, ABSENT)

    def map_put(self, ns: Any, uk: Any, value: Any) -> None:
        self._store(ns, {**self._dict(ns), uk: value})

    def map_put_all(self, ns: Any, values: dict) -> None:
        self._store(ns, {**self._dict(ns), **values})

    def map_remove(self, ns: Any, uk: Any) -> None:
        d = self._dict(ns)
        if uk in d:
            d = dict(d)
            del d[uk]
            self._store(ns, d)

    def map_contains(self, ns: Any, uk: Any) -> bool:
        return uk in self._dict(ns)

    def map_items(self, ns: Any) -> list:
        return list(self._dict(ns).items())

    def map_keys(self, ns: Any) -> list:
        return list(self._dict(ns).keys())

    def map_values(self, ns: Any) -> list:
        return list(self._dict(ns).values())

    def map_is_empty(self, ns: Any) -> bool:
        return not self._dict(ns)


class _Scope:
    """What the state kinds see as their backend: the current namespace is their key."""

    __slots__ = ("_sk", "operator_name")

    def __init__(self, operator_name: str):
        self._sk: Any = None
        self.operator_name = operator_name


class NamespacedState:
    """The state of one descriptor across the namespaces of the current key: a state kind of
    ``state/kinds.py`` over a :class:`NamespaceTable`, plus what windows need (the namespaces
    holding a value, merging namespaces)."""

    __slots__ = ()

    def __init__(self, backend: Any, descriptor: StateDescriptor, state_name: str):
        table = NamespaceTable(backend.get_partitioned_state(MapStateDescriptor(state_name)))
        super().__init__(_Scope(backend.operator_name), table, descriptor)  # type: ignore[call-arg]

    @property
    def namespace(self) -> Any:
        return self._b._sk  # type: ignore[attr-defined]

    @namespace.setter
    def namespace(self, namespace: Any) -> None:
        self._b._sk = namespace  # type: ignore[attr-defined]

    def set_current_namespace(self, namespace: Any) -> None:
        self._b._sk = namespace  # type: ignore[attr-defined]

    def namespaces(self) -> list[Any]:
        """The namespaces of the current key that hold a value."""
        return list(self._t.m.keys())  # type: ignore[attr-defined]

    def raw(self) -> Any:
        """The stored value of the current namespace (None if none): for the window operator."""
        return self._t.m.get(self._b._sk)  # type: ignore[attr-defined]

    def merge_namespaces(self, target: Any, sources: Iterable[Any]) -> None:
        """Merge the values of ``sources`` into ``target`` and remove them (Flink's
        ``InternalMergingState.mergeNamespaces``): sources in order, then onto the target's."""
        m = self._t.m  # type: ignore[attr-defined]
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
        msg = f"{type(self).__name__} {self._descriptor.name!r} cannot be merged; only list, reducing and aggregating state merge"  # type: ignore[attr-defined]
        raise StateAccessError(msg)


class NamespacedValueState(NamespacedState, KeyedValueState):
    __slots__ = ()


class NamespacedListState(NamespacedState, KeyedListState):
    __slots__ = ()

    def _merge(self, a: Any, b: Any) -> Any:
        return [*a, *b]


class NamespacedReducingState(NamespacedState, KeyedReducingState):
    __slots__ = ()

    def _merge(self, a: Any, b: Any) -> Any:
        return self._descriptor.reduce_function.reduce(a, b)  # type: ignore[attr-defined]


class NamespacedAggregatingState(NamespacedState, KeyedAggregatingState):
    """Holds the accumulator; ``get()`` is the function's result for it."""

    __slots__ = ()

    def merge_accumulator(self, partial: Any) -> None:
        """Merge a partial accumulator (of records aggregated elsewhere) into this one."""
        m, ns = self._t.m, self._b._sk
        acc = m.get(ns)
        m.put(ns, partial if acc is None else self._descriptor.agg_function.merge(acc, partial))  # type: ignore[attr-defined]

    def _merge(self, a: Any, b: Any) -> Any:
        return self._descriptor.agg_function.merge(a, b)  # type: ignore[attr-defined]


class NamespacedMapState(NamespacedState, KeyedMapState):
    """A map per namespace, stored as one dict (copied on write)."""

    __slots__ = ()


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
