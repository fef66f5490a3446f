"""HashMap working state: Python dicts in the task's process, with an undo log per epoch.

Each state name has a table ``{key: value}``. The first write to a key in an epoch records the
key's previous value in the undo log; at the end of the epoch the touched keys form the epoch's
*delta*. If the epoch commits, the undo log is dropped (cost: the number of touched keys); if it
does not (a failed or superseded task attempt), the undo log restores the committed values.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
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
from flowpoint.state.compatibility import (
    Recorded,
    declared_schema,
    migrate_table,
    operator_label,
    restored_state_migration,
    worth_scanning,
)
from flowpoint.state.key_identity import CurrentKey, key_table

_MISSING: Any = object()

_ATOMIC = frozenset({int, float, bool, str, bytes, complex, type(None)})


def _immutable(value: Any) -> bool:
    t = type(value)
    if t in _ATOMIC:
        return True
    if t is tuple or t is Row:
        return all(type(x) in _ATOMIC for x in value)
    return False


def _private(value: Any) -> Any:
    """A copy of a value for the undo log. User code may mutate the object state handed it
    (``v = state.value(); v.append(x); state.update(v)``) and aggregate or reduce functions may
    mutate their accumulator: the undo log must not share such objects with the table."""
    if value is _MISSING or _immutable(value):
        return value
    return copy.deepcopy(value)

# delta: {state name: (puts {key: value}, deletes [key])}
Delta = dict[str, tuple[dict[Any, Any], list[Any]]]


class HeapKeyedStateBackend(CurrentKey):
    """The keyed state of one operator for one key-group range, held in memory."""

    def __init__(self, operator_name: str, uid: str | None = None):
        self.operator_name = operator_name
        self.uid = uid
        self.tables: dict[str, dict[Any, Any]] = {}
        self.undo: dict[str, dict[Any, Any]] = {}
        self.kinds: dict[str, str] = {}
        self.restored_states: dict[str, Recorded] = {}  # what a restore recorded (compatibility.py)
        self.schemas: dict[str, dict | None] = {}  # declared in this run
        self._migrated: set[str] = set()  # restored states already brought to their declared schema
        self._states: dict[str, Any] = {}

    # -- state registration -------------------------------------------------------------------

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        name = descriptor.name
        known = self.kinds.get(name)
        if known is not None and known != descriptor.kind:
            msg = (
                f"operator {self.operator_name!r} declares state {name!r} as {descriptor.kind} state, "
                f"but it was declared as {known} state before; give the two states different names"
            )
            raise StateAccessError(msg)
        if known is None:
            label = operator_label(self.operator_name, self.uid)
            migrate = restored_state_migration(label, descriptor, self.restored_states.get(name))
            table = self.tables.get(name)
            if migrate is not None and table and name not in self._migrated:
                if worth_scanning(migrate, descriptor.kind, next(iter(table.values()))):
                    migrate_table(descriptor.kind, table, migrate)
                self._migrated.add(name)
            self.schemas[name] = declared_schema(descriptor)
        self.kinds[name] = descriptor.kind
        table = self.tables.setdefault(name, {})
        undo = self.undo.setdefault(name, {})
        cls = _STATE_CLASSES[type(descriptor)]
        state = cls(self, table, undo, descriptor)
        self._states[name] = state
        return state

    # -- epoch lifecycle -----------------------------------------------------------------------

    def delta(self) -> Delta:
        """The changes of the current epoch (touched keys and their new values)."""
        out: Delta = {}
        for name, undo in self.undo.items():
            if not undo:
                continue
            table = self.tables[name]
            puts: dict[Any, Any] = {}
            deletes: list[Any] = []
            for key in undo:
                value = table.get(key, _MISSING)
                if value is _MISSING:
                    deletes.append(key)
                else:
                    puts[key] = value
            out[name] = (puts, deletes)
        return out

    def changed_keys(self) -> int:
        return sum(len(u) for u in self.undo.values())

    def changed_values(self) -> Iterator[tuple[str, Any, Any]]:
        """``(state name, key, value)`` of every value written in the current epoch (what
        :meth:`delta` will pickle): to name the one that cannot be pickled."""
        for name, undo in self.undo.items():
            table = self.tables[name]
            for key in undo:
                value = table.get(key, _MISSING)
                if value is not _MISSING:
                    yield name, key, value

    def commit(self) -> None:
        for undo in self.undo.values():
            undo.clear()

    def rollback(self) -> None:
        for name, undo in self.undo.items():
            table = self.tables[name]
            for key, old in undo.items():
                if old is _MISSING:
                    table.pop(key, None)
                else:
                    table[key] = old
            undo.clear()

    def apply(self, delta: Delta) -> None:
        for name, (puts, deletes) in delta.items():
            table = self.tables.setdefault(name, {})
            self.undo.setdefault(name, {})
            table.update(key_table(puts))
            for key in key_table(dict.fromkeys(deletes)):
                table.pop(key, None)

    def snapshot(self) -> dict[str, dict[Any, Any]]:
        """All committed state (call after ``commit``): ``{state name: {key: value}}``."""
        return {name: table for name, table in self.tables.items() if table}

    def restore(self, tables: dict[str, dict[Any, Any]]) -> None:
        for name, table in tables.items():
            self.tables.setdefault(name, {}).update(key_table(table))
            self.undo.setdefault(name, {})

    def num_keys(self) -> int:
        return sum(len(t) for t in self.tables.values())

    def iter_entries(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` of one state, this epoch's changes included (MapState: the value
        is the key's dict). For rebuilding an in-memory index, such as a timer queue, when an
        operator opens; the values are the table's own objects: read them, do not change them."""
        return iter(list(self.tables.get(state_name, {}).items()))


class _HeapState:
    __slots__ = ("_backend", "_table", "_undo", "_descriptor")

    def __init__(self, backend: HeapKeyedStateBackend, table: dict, undo: dict, descriptor: StateDescriptor):
        self._backend = backend
        self._table = table
        self._undo = undo
        self._descriptor = descriptor

    def _key(self) -> Any:
        key = self._backend._sk
        if key is None:
            msg = (
                f"state {self._descriptor.name!r} of operator {self._backend.operator_name!r} was used "
                f"outside of a keyed context (no current key); use keyed state only while processing "
                f"an element of a keyed stream"
            )
            raise StateAccessError(msg)
        return key

    def _guard(self, key: Any, value: Any) -> Any:
        """Before a mutable value is handed to user code, keep a private copy in the undo log
        (once per key and epoch): a rollback restores it, and the delta includes the key in case
        the value is mutated in place without a write."""
        if key not in self._undo and value is not _MISSING and not _immutable(value):
            self._undo[key] = copy.deepcopy(value)
        return value

    def clear(self) -> None:
        key = self._key()
        table = self._table
        if key in table:
            undo = self._undo
            if key not in undo:
                undo[key] = table[key]
            del table[key]


class HeapValueState(_HeapState, ValueState):
    __slots__ = ()

    def value(self) -> Any:
        key = self._backend._sk
        if key is None:
            self._key()
        value = self._table.get(key)
        if value is None or key in self._undo or type(value) in _ATOMIC:
            return value
        return self._guard(key, value)

    def update(self, value: Any) -> None:
        key = self._backend._sk
        if key is None:
            self._key()
        table = self._table
        undo = self._undo
        if key not in undo:
            undo[key] = table.get(key, _MISSING)
        if value is None:
            table.pop(key, None)
        else:
            table[key] = value


class HeapListState(_HeapState, ListState):
    __slots__ = ()

    def _touch(self, key: Any) -> list:
        table = self._table
        current = table.get(key)
        if key not in self._undo:
            if current is None:
                self._undo[key] = _MISSING
            else:
                self._undo[key] = list(current) if all(map(_immutable, current)) else copy.deepcopy(current)
        if current is None:
            current = table[key] = []
        return current

    def get(self) -> list:
        key = self._key()
        current = self._table.get(key)
        if current is None:
            return []
        if key not in self._undo and not all(map(_immutable, current)):
            self._undo[key] = copy.deepcopy(current)
        return list(current)

    def add(self, value: Any) -> None:
        if value is None:
            msg = f"list state {self._descriptor.name!r}: cannot add None"
            raise StateAccessError(msg)
        self._touch(self._key()).append(value)

    def add_all(self, values: list[Any]) -> None:
        key = self._key()
        if values:
            self._touch(key).extend(values)

    def update(self, values: list[Any]) -> None:
        key = self._key()
        self._touch(key)
        if values:
            self._table[key] = list(values)
        else:
            del self._table[key]


class HeapMapState(_HeapState, MapState):
    __slots__ = ()

    def _current(self) -> dict:
        return self._table.get(self._key(), {})

    def _snapshot(self, current: dict) -> dict:
        if all(map(_immutable, current.values())):
            return dict(current)
        return {k: _private(v) for k, v in current.items()}

    def _reading(self) -> dict:
        """The current key's map, before user code sees values that may be mutable."""
        key = self._key()
        current = self._table.get(key)
        if current is None:
            return {}
        if key not in self._undo and not all(map(_immutable, current.values())):
            self._undo[key] = self._snapshot(current)
        return current

    def _touch(self) -> dict:
        key = self._key()
        table = self._table
        current = table.get(key)
        if key not in self._undo:
            self._undo[key] = _MISSING if current is None else self._snapshot(current)
        if current is None:
            current = table[key] = {}
        return current

    def get(self, key: Any) -> Any:
        value = self._current().get(key)
        if type(value) in _ATOMIC or _immutable(value):
            return value
        return self._reading().get(key)

    def put(self, key: Any, value: Any) -> None:
        self._touch()[key] = value

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        self._key()
        if dict_value:
            self._touch().update(dict_value)

    def remove(self, key: Any) -> None:
        if key in self._current():
            current = self._touch()
            del current[key]
            if not current:
                del self._table[self._backend._sk]

    def contains(self, key: Any) -> bool:
        return key in self._current()

    def items(self):
        return list(self._reading().items())

    def keys(self):
        return list(self._current().keys())

    def values(self):
        return list(self._reading().values())

    def is_empty(self) -> bool:
        return not self._current()


class HeapReducingState(_HeapState, ReducingState):
    __slots__ = ()

    def get(self) -> Any:
        key = self._key()
        value = self._table.get(key)
        return value if value is None else self._guard(key, value)

    def add(self, value: Any) -> None:
        key = self._key()
        table = self._table
        current = table.get(key, _MISSING)
        if key not in self._undo:
            self._undo[key] = _private(current)
        if current is _MISSING:
            table[key] = value
        else:
            table[key] = self._descriptor.reduce_function.reduce(current, value)  # type: ignore[attr-defined]


class HeapAggregatingState(_HeapState, AggregatingState):
    __slots__ = ()

    def get(self) -> Any:
        key = self._key()
        acc = self._table.get(key, _MISSING)
        if acc is _MISSING:
            return None
        return self._descriptor.agg_function.get_result(self._guard(key, acc))  # type: ignore[attr-defined]

    def add(self, value: Any) -> None:
        key = self._key()
        table = self._table
        fn = self._descriptor.agg_function  # type: ignore[attr-defined]
        current = table.get(key, _MISSING)
        if key not in self._undo:
            self._undo[key] = _private(current)
        acc = fn.create_accumulator() if current is _MISSING else current
        table[key] = fn.add(value, acc)


_STATE_CLASSES = {
    ValueStateDescriptor: HeapValueState,
    ListStateDescriptor: HeapListState,
    MapStateDescriptor: HeapMapState,
    ReducingStateDescriptor: HeapReducingState,
    AggregatingStateDescriptor: HeapAggregatingState,
}
