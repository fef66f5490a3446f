"""One key identity: two keys are the same key exactly when their canonical bytes are equal.

Python's own equality disagrees with that in both directions: ``float("nan") != float("nan")``,
while ``1 == 1.0 == True`` and ``(1, "a") == (True, "a")``; lists and dicts cannot be dict keys at
all. PyFlink compares keys as serialized bytes, and so does flowpoint, everywhere a key is
compared: key groups, both backends' tables and in-epoch overlays, timers, ``get_keyed_state``
and savepoints (``docs/state.md``, "Key identity").

Inside the state layer a key is held as its *state key*: the key itself when Python's equality
already is the canonical one (exactly ``str``, ``int`` or ``bytes``: the common case costs
nothing), else a :class:`StateKey` that compares and hashes by canonical bytes and carries the
user's key. User code always sees the user's key (:func:`user_key`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from flowpoint.state.keygroups import PLAIN_KEY_TYPES, StateKey, state_key

__all__ = ["CurrentKey", "KeyedStateMap", "StateKey", "key_table", "keyed_state_maps", "state_key", "user_key"]


def user_key(key: Any) -> Any:
    """The user's key of a state key (the key itself for plain ones)."""
    return key.key if type(key) is StateKey else key


def key_table(table: Mapping[Any, Any]) -> dict[Any, Any]:
    """``table`` with every key as its state key (restoring files written with plain keys).
    Keys that are one state key are one entry: the last one wins, as a later write would."""
    if all(type(k) is str or type(k) is int or type(k) is bytes or type(k) is StateKey for k in table):
        return table if type(table) is dict else dict(table)
    return {state_key(k): v for k, v in table.items()}


class KeyedStateMap(Mapping):
    """``{key: value}`` of one keyed state as the user reads it (``get_keyed_state``,
    ``state_reader(...).keyed_state_dict``): iteration yields the user's keys, lookup accepts
    any key with the same identity (``m[float("nan")]`` finds the NaN key, ``m[1]`` and
    ``m[True]`` are two entries). It compares equal to a dict with the same keys and values."""

    __slots__ = ("_table",)

    def __init__(self, table: Mapping[Any, Any] | None = None) -> None:
        self._table: dict[Any, Any] = key_table(table or {})

    def __getitem__(self, key: Any) -> Any:
        return self._table[state_key(key)]

    def __contains__(self, key: object) -> bool:
        try:
            return state_key(key) in self._table
        except Exception:  # noqa: BLE001  (a value that cannot be a key is not in the map)
            return False

    def __iter__(self) -> Iterator[Any]:
        return (user_key(k) for k in self._table)

    def __len__(self) -> int:
        return len(self._table)

    def items(self):  # type: ignore[override]
        return [(user_key(k), v) for k, v in self._table.items()]

    def keys(self):  # type: ignore[override]
        return [user_key(k) for k in self._table]

    def values(self):  # type: ignore[override]
        return list(self._table.values())

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Mapping):
            return NotImplemented
        if len(other) != len(self._table):
            return False
        try:
            others = key_table(other)
        except Exception:  # noqa: BLE001
            return False
        return len(others) == len(self._table) and others == self._table

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return "{" + ", ".join(f"{k!r}: {v!r}" for k, v in self.items()) + "}"


def keyed_state_maps(tables: Mapping[str, Mapping[Any, Any]]) -> dict[str, KeyedStateMap]:
    """``{state name: {key: value}}`` as the user reads it: one :class:`KeyedStateMap` per state."""
    return {name: KeyedStateMap(table) for name, table in tables.items()}


class CurrentKey:
    """The current key of a keyed backend: ``current_key`` is the user's key (what
    ``ctx.get_current_key()`` returns), ``current_state_key`` its identity, which the backend's
    tables, overlays and timers are keyed by. Setting either form sets both."""

    _key: Any = None
    _sk: Any = None

    @property
    def current_key(self) -> Any:
        return self._key

    @current_key.setter
    def current_key(self, key: Any) -> None:
        t = type(key)
        if t is str or t is int or t is bytes or key is None:
            self._key = self._sk = key
        elif t is tuple:  # state_key's plain tuples, inlined: the per-record path of tuple keys
            self._key = key
            for x in key:
                if type(x) not in PLAIN_KEY_TYPES:
                    self._sk = state_key(key)
                    return
            self._sk = key
        elif t is StateKey:
            self._key = key.key
            self._sk = key
        else:
            self._key = key
            self._sk = state_key(key)

    @property
    def current_state_key(self) -> Any:
        return self._sk
