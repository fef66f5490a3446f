"""HashMap working state: Python dicts in the task's process, with an undo log per epoch.

The state kinds are those of ``kinds.py``, over one :class:`HeapTable` per state name: a dict
``{key: value}`` and the epoch's undo log. The first write to a key in an epoch records the
key's previous value in the undo log; at the end of the epoch the touched keys form the epoch's
*delta*. If the epoch commits, the undo log is dropped (cost: the number of touched keys); if it
does not (a failed or superseded task attempt), the undo log restores the committed values.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from flowpoint.api.state import StateDescriptor, ValueStateDescriptor
from flowpoint.state.compatibility import (
    Recorded,
    check_redeclared,
    migrate_table,
    on_register,
    worth_scanning,
)
from flowpoint.state.key_identity import CurrentKey, key_table
from flowpoint.state.kinds import (
    ABSENT,
    ATOMIC,
    KeyedValueState,
    immutable,
    keyed_state,
    private_copy,
)

# delta: {state name: (puts {key: value}, deletes [key])}
Delta = dict[str, tuple[dict[Any, Any], list[Any]]]


def puts_and_deletes(table: dict, keys: Iterable[Any]) -> tuple[dict[Any, Any], list[Any]]:
    """``keys`` of one state as a delta entry: their values now, or a delete for those gone."""
    puts: dict[Any, Any] = {}
    deletes: list[Any] = []
    for key in keys:
        value = table.get(key, ABSENT)
        if value is ABSENT:
            deletes.append(key)
        else:
            puts[key] = value
    return puts, deletes


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
        self.migrated: set[str] = set()  # restored states already brought to their declared schema
        self._states: dict[str, Any] = {}

    # -- state registration -------------------------------------------------------------------

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        name = descriptor.name
        known = self.kinds.get(name)
        check_redeclared(self, descriptor, known)
        if known is None:
            migrate = on_register(self, descriptor, self.restored_states.get(name))
            table = self.tables.get(name)
            if migrate is not None and table and worth_scanning(migrate, descriptor.kind, next(iter(table.values()))):
                migrate_table(descriptor.kind, table, migrate)
        self.kinds[name] = descriptor.kind
        table = HeapTable(self.tables.setdefault(name, {}), self.undo.setdefault(name, {}))
        state = HeapValueState(self, table, descriptor) if type(descriptor) is ValueStateDescriptor else keyed_state(self, table, descriptor)
        self._states[name] = state
        return state

    # -- epoch lifecycle -----------------------------------------------------------------------

    def delta(self) -> Delta:
        """The changes of the current epoch (touched keys and their new values)."""
        return {name: puts_and_deletes(self.tables[name], undo) for name, undo in self.undo.items() if undo}

    def changed_keys(self) -> int:
        return sum(len(u) for u in self.undo.values())

    def changed_values(self) -> Iterator[tuple[str, Any, Any]]:
        """``(state name, key, value)`` of every value written in the current epoch (what
        :meth:`delta` will pickle): to name the one that cannot be pickled."""
        for name, undo in self.undo.items():
            table = self.tables[name]
            for key in undo:
                value = table.get(key, ABSENT)
                if value is not ABSENT:
                    yield name, key, value

    def commit(self) -> None:
        for undo in self.undo.values():
            undo.clear()

    def rollback(self) -> None:
        for name, undo in self.undo.items():
            table = self.tables[name]
            for key, old in undo.items():
                if old is ABSENT:
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


class HeapTable:
    """One state's table (``kinds.py``): ``data`` holds the values, ``undo`` the value each key
    had before its first change in the current epoch (the backend's undo log)."""

    __slots__ = ("data", "undo")

    def __init__(self, data: dict, undo: dict):
        self.data = data
        self.undo = undo

    def read(self, key: Any) -> Any:
        value = self.data.get(key, ABSENT)
        if value is ABSENT or type(value) in ATOMIC or key in self.undo:
            return value
        if not immutable(value):  # user code may change it in place: keep the value to undo to
            self.undo[key] = private_copy(value)
        return value

    current = read  # ListState's list, an accumulator: changed in place as a read value may be

    def elements(self, key: Any) -> Any:
        value = self.data.get(key, ABSENT)
        if value is ABSENT or all(map(immutable, value)):
            return value  # not marked as changed: the caller copies the list
        return self.read(key)  # the elements handed out may be changed in place

    def write(self, key: Any, value: Any) -> None:
        undo = self.undo
        if key not in undo:
            undo[key] = self.data.get(key, ABSENT)
        self.data[key] = value

    def remove(self, key: Any) -> None:
        data = self.data
        if key in data:
            undo = self.undo
            if key not in undo:
                undo[key] = data[key]
            del data[key]

    # -- MapState: a dict per key -------------------------------------------------------------

    def _guarded(self, key: Any) -> dict:
        """The key's map, once its values may reach user code (None if it has none)."""
        current = self.data.get(key)
        if current is not None and key not in self.undo and not all(map(immutable, current.values())):
            self.undo[key] = {k: private_copy(v) for k, v in current.items()}
        return current

    def _touch(self, key: Any) -> dict:
        data = self.data
        current = data.get(key)
        if key not in self.undo:
            self.undo[key] = ABSENT if current is None else private_copy(current)
        if current is None:
            current = data[key] = {}
        return current

    def map_get(self, key: Any, uk: Any) -> Any:
        current = self.data.get(key)
        if current is None:
            return ABSENT
        value = current.get(uk, ABSENT)
        if value is ABSENT or immutable(value):
            return value
        return self._guarded(key)[uk]

    def map_put(self, key: Any, uk: Any, value: Any) -> None:
        self._touch(key)[uk] = value

    def map_put_all(self, key: Any, values: dict) -> None:
        self._touch(key).update(values)

    def map_remove(self, key: Any, uk: Any) -> None:
        current = self.data.get(key)
        if current is not None and uk in current:
            current = self._touch(key)
            del current[uk]
            if not current:
                del self.data[key]

    def map_contains(self, key: Any, uk: Any) -> bool:
        current = self.data.get(key)
        return current is not None and uk in current

    def map_items(self, key: Any) -> list:
        current = self._guarded(key)
        return [] if current is None else list(current.items())

    def map_keys(self, key: Any) -> list:
        return list(self.data.get(key, ()))

    def map_values(self, key: Any) -> list:
        current = self._guarded(key)
        return [] if current is None else list(current.values())

    def map_is_empty(self, key: Any) -> bool:
        return not self.data.get(key)


class HeapValueState(KeyedValueState):
    """``ValueState`` over a :class:`HeapTable` with the table's read and write inlined: the
    per-record path of a keyed count is one dict read and one write (plus the undo log's check),
    not two calls more. A value user code could change in place goes through ``HeapTable.read``."""

    __slots__ = ("_data", "_undo")

    def __init__(self, backend: Any, table: HeapTable, descriptor: StateDescriptor):
        super().__init__(backend, table, descriptor)
        self._data = table.data  # the backend's dicts of this state: never replaced, only changed
        self._undo = table.undo

    def value(self) -> Any:
        key = self._b._sk
        if key is None:
            self._key()
        v = self._data.get(key, ABSENT)
        if v is ABSENT:
            return None
        if type(v) in ATOMIC:
            return v
        return self._t.read(key)

    def update(self, value: Any) -> None:
        key = self._b._sk
        if key is None:
            self._key()
        if value is None:
            self._t.remove(key)
            return
        undo = self._undo
        if key not in undo:
            undo[key] = self._data.get(key, ABSENT)
        self._data[key] = value
