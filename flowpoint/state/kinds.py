"""The five kinds of keyed state, written once over a state table that each backend implements.

A backend (HashMap in ``heap.py``, RocksDB in ``rocksdb.py``) keeps one *state table* per state
name: the state's working values with read-your-writes semantics for the current epoch, and what
changed since the last commit (HashMap: an undo log over dicts; RocksDB: an overlay over the DB,
decoded lazily). The state kinds below give a table its meaning (ValueState's None, ListState's
append, the reduce and aggregate functions, MapState's entries) and never see how it is stored,
so both backends behave alike by construction. The backend's current key is its state key
(``key_identity.py``): tables are keyed by key identity.

A table provides, for a state key ``k`` (``ABSENT`` when there is no value):

- ``read(k)``: the value to show (ValueState, ReducingState and AggregatingState ``get``),
  which user code may now change in place (the table keeps what it needs to undo or write that
  change);
- ``current(k)``: the value to add to (ListState's list, which ``add`` appends to in place; the
  reduce or aggregate accumulator), which may be changed in place; a plain table's ``current``
  is its ``read``;
- ``elements(k)``: ListState's list to show, which the caller copies and does not change (a
  list of immutable elements is not marked as changed);
- ``write(k, value)``, ``remove(k)``;
- MapState's entries of ``k``: ``map_get``, ``map_put``, ``map_put_all``, ``map_remove``,
  ``map_contains``, ``map_items``, ``map_keys``, ``map_values``, ``map_is_empty`` (``remove(k)``
  clears the whole map).

The backends' tables store the values as they are. A state with a time-to-live gets the same
kind over a TTL table (``ttl.py``) that wraps the backend's table: it stores each value (list
element, map entry) with its last access time and hides the expired ones, so the kinds never
see the timestamps and states without TTL never pass through it.
"""

from __future__ import annotations

import copy
from typing import Any

from flowpoint.api.row import Row
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
from flowpoint.state.chunked_list import ChunkedList

ABSENT: Any = object()  # no value for the key (a table's answer; ValueState shows it as None)

ATOMIC = frozenset({int, float, bool, str, bytes, complex, type(None)})


def immutable(value: Any) -> bool:
    """Values user code cannot change in place (so a table need not guard them)."""
    t = type(value)
    if t in ATOMIC:
        return True
    if t is tuple or isinstance(value, Row):
        return all(type(x) in ATOMIC for x in value)
    if t is ChunkedList:  # never changed in place; its Python values may be
        return value.frozen
    return False


def private_copy(value: Any) -> Any:
    """A copy that shares nothing user code could change with ``value`` (for an undo log)."""
    if value is ABSENT or immutable(value):
        return value
    t = type(value)
    if t is list and all(map(immutable, value)):
        return list(value)
    if t is dict and all(map(immutable, value.values())):
        return dict(value)
    return copy.deepcopy(value)


class _KeyedState:
    __slots__ = ("_b", "_t", "_descriptor")

    def __init__(self, backend: Any, table: Any, descriptor: StateDescriptor):
        self._b = backend
        self._t = table
        self._descriptor = descriptor

    def _key(self) -> Any:
        key = self._b._sk
        if key is None:
            msg = (
                f"state {self._descriptor.name!r} of operator {self._b.operator_name!r} was used "
                f"outside of a keyed context (no current key); use keyed state only while processing "
                f"an element of a keyed stream"
            )
            raise StateAccessError(msg)
        return key

    def clear(self) -> None:
        self._t.remove(self._key())


class KeyedValueState(_KeyedState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        key = self._b._sk
        if key is None:
            self._key()
        v = self._t.read(key)
        return None if v is ABSENT else v

    def update(self, value: Any) -> None:
        key = self._b._sk
        if key is None:
            self._key()
        if value is None:
            self._t.remove(key)
        else:
            self._t.write(key, value)


class KeyedListState(_KeyedState, ListState):
    __slots__ = ()

    def get(self) -> list:
        current = self._t.elements(self._key())
        if current is ABSENT:
            return []
        return list(current)

    def add(self, value: Any) -> None:
        if value is None:
            msg = f"list state {self._descriptor.name!r}: cannot add None"
            raise StateAccessError(msg)
        key = self._key()
        current = self._t.current(key)
        if current is ABSENT:
            self._t.write(key, [value])
        else:
            current.append(value)

    def add_all(self, values: list[Any]) -> None:
        key = self._key()
        if not values:
            return
        current = self._t.current(key)
        if current is ABSENT:
            self._t.write(key, list(values))
        else:
            current.extend(values)

    def update(self, values: list[Any]) -> None:
        key = self._key()
        if values:
            self._t.write(key, list(values))
        else:
            self._t.remove(key)


class KeyedMapState(_KeyedState, MapState):
    __slots__ = ()

    def get(self, key: Any) -> Any:
        v = self._t.map_get(self._key(), key)
        return None if v is ABSENT else v

    def put(self, key: Any, value: Any) -> None:
        self._t.map_put(self._key(), key, value)

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        k = self._key()
        if dict_value:
            self._t.map_put_all(k, dict_value)

    def remove(self, key: Any) -> None:
        self._t.map_remove(self._key(), key)

    def contains(self, key: Any) -> bool:
        return self._t.map_contains(self._key(), key)

    def items(self):
        return self._t.map_items(self._key())

    def keys(self):
        return self._t.map_keys(self._key())

    def values(self):
        return self._t.map_values(self._key())

    def is_empty(self) -> bool:
        return self._t.map_is_empty(self._key())


class KeyedReducingState(_KeyedState, ReducingState):
    __slots__ = ()

    def get(self) -> Any:
        v = self._t.read(self._key())
        return None if v is ABSENT else v

    def add(self, value: Any) -> None:
        key = self._key()
        current = self._t.current(key)  # the reduce function may change it in place
        if current is ABSENT:
            self._t.write(key, value)
        else:
            self._t.write(key, self._descriptor.reduce_function.reduce(current, value))  # type: ignore[attr-defined]


class KeyedAggregatingState(_KeyedState, AggregatingState):
    __slots__ = ()

    def get(self) -> Any:
        acc = self._t.read(self._key())
        if acc is ABSENT:
            return None
        return self._descriptor.agg_function.get_result(acc)  # type: ignore[attr-defined]

    def add(self, value: Any) -> None:
        key = self._key()
        fn = self._descriptor.agg_function  # type: ignore[attr-defined]
        current = self._t.current(key)  # the aggregate function may change it in place
        acc = fn.create_accumulator() if current is ABSENT else current
        self._t.write(key, fn.add(value, acc))


STATE_CLASSES = {
    ValueStateDescriptor: KeyedValueState,
    ListStateDescriptor: KeyedListState,
    MapStateDescriptor: KeyedMapState,
    ReducingStateDescriptor: KeyedReducingState,
    AggregatingStateDescriptor: KeyedAggregatingState,
}


def keyed_state(backend: Any, table: Any, descriptor: StateDescriptor) -> Any:
    """The state object of ``descriptor`` over ``table``."""
    return STATE_CLASSES[type(descriptor)](backend, table, descriptor)
