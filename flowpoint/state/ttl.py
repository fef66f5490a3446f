"""Keyed state with a time-to-live (``descriptor.enable_time_to_live(StateTtlConfig...)``).

TTL is a state table (``kinds.py``) that wraps the backend's own table (HashMap or RocksDB
alike), so each kind of state is written once: the kind reads and writes user values, the TTL
table stores them with their last access time and hides the expired ones. A value is stored as
``(value, last access ms)``, a list as such pairs (each element with its own time), a map as
``user key -> (value, last access ms)``; reducing and aggregating states keep ``(accumulator,
last access ms)`` as a value state of the same name does. The backend's table is registered
under the plain kind it stores (value, list or map), as it always was, so checkpoints and
savepoints hold the same bytes. Time is the operator's processing time, the epoch's
(``clock.processing_time``).

Expired values (``last access + ttl <= now``) are removed whenever their key's state is read, and
by a background pass after an epoch (:meth:`TtlTable.cleanup`): every epoch with
``cleanup_full_snapshot()``, else at most once per TTL period per task, so an expired value is gone
from checkpoints and savepoints at most two TTL periods after its last access even if its key is
never touched again. ``disable_cleanup_in_background()`` leaves only the removal on access.
"""

from __future__ import annotations

from typing import Any

from flowpoint.api.state import (
    ListStateDescriptor,
    MapStateDescriptor,
    StateDescriptor,
    ValueStateDescriptor,
)
from flowpoint.state.kinds import ABSENT


class TtlTable:
    """What the three TTL tables share: the wrapped table, the config, the clock and the
    background cleanup."""

    __slots__ = ("inner", "name", "config", "ttl", "return_expired", "update_on_read", "clock", "backend", "last_pass")

    def __init__(self, inner: Any, descriptor: StateDescriptor, clock: Any, backend: Any):
        self.inner = inner  # the backend's table of this state
        self.name = descriptor.name
        self.config = descriptor.ttl_config
        self.ttl = self.config.ttl_ms
        self.return_expired = self.config.return_expired
        self.update_on_read = self.config.update_on_read
        self.clock = clock
        self.backend = backend
        self.last_pass: int | None = None

    def now(self) -> int:
        return int(self.clock.processing_time)

    def remove(self, key: Any) -> None:
        self.inner.remove(key)

    # -- background cleanup, after an epoch ------------------------------------------------------

    def cleanup(self) -> int:
        """Remove the expired values of every key (see the module docstring for when); returns how
        many keys were looked at."""
        strategies = self.config.get_cleanup_strategies()
        if not strategies.is_cleanup_in_background() and not strategies.in_full_snapshot():
            return 0
        now = self.now()
        if not strategies.in_full_snapshot() and self.last_pass is not None and now - self.last_pass < self.ttl:
            return 0
        self.last_pass = now
        backend = self.backend
        looked = 0
        try:
            for key, _ in backend.iter_entries(self.name):
                backend.current_key = key
                self.clean(backend._sk, now)
                looked += 1
        finally:
            backend.current_key = None
        return looked

    def clean(self, key: Any, now: int) -> None:
        raise NotImplementedError


class TtlValueTable(TtlTable):
    """One ``(value, last access)`` pair per key: value, reducing and aggregating states."""

    __slots__ = ()

    def read(self, key: Any) -> Any:
        stored = self.inner.read(key)
        if stored is ABSENT:
            return ABSENT
        value, ts = stored
        now = self.now()
        if ts + self.ttl <= now:
            self.inner.remove(key)
            if not self.return_expired:
                return ABSENT
        elif self.update_on_read and ts != now:
            self.inner.write(key, (value, now))
        return ABSENT if value is None else value

    def current(self, key: Any) -> Any:
        """The accumulator to add to: an expired one counts as none (it is overwritten)."""
        stored = self.inner.current(key)
        if stored is ABSENT or stored[1] + self.ttl <= self.now() or stored[0] is None:
            return ABSENT
        return stored[0]

    def write(self, key: Any, value: Any) -> None:
        self.inner.write(key, (value, self.now()))

    def clean(self, key: Any, now: int) -> None:
        stored = self.inner.read(key)
        if stored is not ABSENT and stored[1] + self.ttl <= now:
            self.inner.remove(key)


class StampedList:
    """ListState's list as ``add`` appends to it: each element appended with the time now."""

    __slots__ = ("pairs", "now")

    def __init__(self, pairs: list, now: int):
        self.pairs = pairs  # the stored list of (element, last access)
        self.now = now

    def append(self, value: Any) -> None:
        self.pairs.append((value, self.now))

    def extend(self, values: list[Any]) -> None:
        now = self.now
        self.pairs.extend([(v, now) for v in values])


class TtlListTable(TtlTable):
    """A list of ``(element, last access)`` pairs per key: each element expires on its own."""

    __slots__ = ()

    def _store(self, key: Any, pairs: list) -> None:
        if pairs:
            self.inner.write(key, pairs)
        else:
            self.inner.remove(key)

    def elements(self, key: Any) -> Any:
        stored = self.inner.elements(key)
        if stored is ABSENT or not stored:
            return ABSENT
        now = self.now()
        ttl = self.ttl
        live = [(v, ts) for v, ts in stored if ts + ttl > now]
        out = [v for v, _ in (stored if self.return_expired else live)]
        if self.update_on_read:
            self._store(key, [(v, now) for v, _ in live])
        elif len(live) != len(stored):
            self._store(key, live)
        return out

    def current(self, key: Any) -> Any:
        stored = self.inner.current(key)
        return ABSENT if stored is ABSENT else StampedList(stored, self.now())

    def write(self, key: Any, values: list[Any]) -> None:
        now = self.now()
        self.inner.write(key, [(v, now) for v in values])

    def clean(self, key: Any, now: int) -> None:
        stored = self.inner.elements(key)
        if stored is ABSENT:
            return
        live = [(v, ts) for v, ts in stored if ts + self.ttl > now]
        if len(live) != len(stored):
            self._store(key, live)


class TtlMapTable(TtlTable):
    """``user key -> (value, last access)`` per key: each entry expires on its own."""

    __slots__ = ()

    def _live(self, key: Any, uk: Any, stored: Any, now: int) -> bool:
        """Whether an entry is shown; an expired one is removed, a read one touched (on read)."""
        ts = stored[1]
        if ts + self.ttl <= now:
            self.inner.map_remove(key, uk)
            return self.return_expired
        if self.update_on_read and ts != now:
            self.inner.map_put(key, uk, (stored[0], now))
        return True

    def map_get(self, key: Any, uk: Any) -> Any:
        stored = self.inner.map_get(key, uk)
        if stored is ABSENT or not self._live(key, uk, stored, self.now()):
            return ABSENT
        return stored[0]

    def map_put(self, key: Any, uk: Any, value: Any) -> None:
        self.inner.map_put(key, uk, (value, self.now()))

    def map_put_all(self, key: Any, values: dict) -> None:
        now = self.now()
        self.inner.map_put_all(key, {k: (v, now) for k, v in values.items()})

    def map_remove(self, key: Any, uk: Any) -> None:
        self.inner.map_remove(key, uk)

    def map_contains(self, key: Any, uk: Any) -> bool:
        stored = self.inner.map_get(key, uk)
        return stored is not ABSENT and self._live(key, uk, stored, self.now())

    def map_items(self, key: Any) -> list:
        now = self.now()
        return [(uk, stored[0]) for uk, stored in self.inner.map_items(key) if self._live(key, uk, stored, now)]

    def map_keys(self, key: Any) -> list:
        return [uk for uk, _ in self.map_items(key)]

    def map_values(self, key: Any) -> list:
        return [v for _, v in self.map_items(key)]

    def map_is_empty(self, key: Any) -> bool:
        return not self.map_items(key)

    def clean(self, key: Any, now: int) -> None:
        for uk, (_, ts) in self.inner.map_items(key):
            if ts + self.ttl <= now:
                self.inner.map_remove(key, uk)


def ttl_table(backend: Any, descriptor: StateDescriptor, clock: Any) -> TtlTable:
    """The TTL table of ``descriptor`` (whose ``ttl_config`` is set) over the table ``backend``
    registers for its stored form: a value state of the same name for value, reducing and
    aggregating states, a list state for a list state, a map state for a map state."""
    kind = descriptor.kind
    if kind == "list":
        return TtlListTable(backend.get_partitioned_state(ListStateDescriptor(descriptor.name))._t, descriptor, clock, backend)
    if kind == "map":
        return TtlMapTable(backend.get_partitioned_state(MapStateDescriptor(descriptor.name))._t, descriptor, clock, backend)
    return TtlValueTable(backend.get_partitioned_state(ValueStateDescriptor(descriptor.name))._t, descriptor, clock, backend)
