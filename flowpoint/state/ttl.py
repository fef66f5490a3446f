"""Keyed state with a time-to-live (``descriptor.enable_time_to_live(StateTtlConfig...)``).

The TTL states wrap the backend's own states (HashMap or RocksDB alike): a value is stored as
``(value, last access ms)``, a list as such pairs, a map as ``user key -> (value, last access
ms)``; reducing and aggregating states keep ``(accumulator, last access ms)`` in a value state of
the same name. Time is the operator's processing time, the epoch's (``clock.processing_time``).

Expired values (``last access + ttl <= now``) are removed whenever their key's state is read, and
by a background pass after an epoch (:meth:`TtlState.cleanup`): every epoch with
``cleanup_full_snapshot()``, else at most once per TTL period per task, so an expired value is gone
from checkpoints and savepoints at most two TTL periods after its last access even if its key is
never touched again. ``disable_cleanup_in_background()`` leaves only the removal on access.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flowpoint.api.state import (
    AggregatingState,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    StateDescriptor,
    ValueState,
    ValueStateDescriptor,
)


class TtlState:
    """Shared by the TTL states: the config, the clock and the background cleanup."""

    def __init__(self, inner: Any, descriptor: StateDescriptor, clock: Any, backend: Any):
        self.inner = inner
        self.descriptor = descriptor
        self.config = descriptor.ttl_config
        self.ttl = self.config.ttl_ms
        self.clock = clock
        self.backend = backend
        self.last_pass: int | None = None

    def now(self) -> int:
        return int(self.clock.processing_time)

    def expired(self, ts: int, now: int) -> bool:
        return ts + self.ttl <= now

    def clear(self) -> None:
        self.inner.clear()

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
            for key, _ in backend.iter_entries(self.descriptor.name):
                backend.current_key = key
                self.clean_current(now)
                looked += 1
        finally:
            backend.current_key = None
        return looked

    def clean_current(self, now: int) -> None:
        raise NotImplementedError


class _TtlSingle(TtlState):
    """One ``(value, last access)`` pair per key: value, reducing and aggregating states."""

    def _read(self) -> Any:
        stored = self.inner.value()
        if stored is None:
            return None
        value, ts = stored
        now = self.now()
        if self.expired(ts, now):
            self.inner.clear()
            return value if self.config.return_expired else None
        if self.config.update_on_read and ts != now:
            self.inner.update((value, now))
        return value

    def clean_current(self, now: int) -> None:
        stored = self.inner.value()
        if stored is not None and self.expired(stored[1], now):
            self.inner.clear()


class TtlValueState(_TtlSingle, ValueState):
    def value(self) -> Any:
        return self._read()

    def update(self, value: Any) -> None:
        if value is None:
            self.inner.clear()
        else:
            self.inner.update((value, self.now()))


class TtlListState(TtlState, ListState):
    def _unexpired(self, stored: list, now: int) -> list:
        return [(v, ts) for v, ts in stored if not self.expired(ts, now)]

    def get(self) -> list:
        stored = self.inner.get() or []
        if not stored:
            return []
        now = self.now()
        live = self._unexpired(stored, now)
        out = [v for v, _ in (stored if self.config.return_expired else live)]
        if self.config.update_on_read:
            live = [(v, now) for v, _ in live]
            self.inner.update(live)
        elif len(live) != len(stored):
            self.inner.update(live)
        return out

    def add(self, value: Any) -> None:
        self.inner.add((value, self.now()))

    def add_all(self, values: list[Any]) -> None:
        now = self.now()
        self.inner.add_all([(v, now) for v in values])

    def update(self, values: list[Any]) -> None:
        now = self.now()
        self.inner.update([(v, now) for v in values])

    def clean_current(self, now: int) -> None:
        stored = self.inner.get() or []
        live = self._unexpired(stored, now)
        if len(live) != len(stored):
            self.inner.update(live)


class TtlMapState(TtlState, MapState):
    def _live(self, user_key: Any, stored: Any, now: int) -> tuple[bool, Any]:
        """``(visible, value)`` of one entry; an expired one is removed."""
        value, ts = stored
        if self.expired(ts, now):
            self.inner.remove(user_key)
            return self.config.return_expired, value
        if self.config.update_on_read and ts != now:
            self.inner.put(user_key, (value, now))
        return True, value

    def get(self, key: Any) -> Any:
        stored = self.inner.get(key)
        if stored is None:
            return None
        visible, value = self._live(key, stored, self.now())
        return value if visible else None

    def put(self, key: Any, value: Any) -> None:
        self.inner.put(key, (value, self.now()))

    def put_all(self, dict_value: dict[Any, Any]) -> None:
        now = self.now()
        self.inner.put_all({k: (v, now) for k, v in dict_value.items()})

    def remove(self, key: Any) -> None:
        self.inner.remove(key)

    def contains(self, key: Any) -> bool:
        stored = self.inner.get(key)
        return stored is not None and self._live(key, stored, self.now())[0]

    def items(self) -> Iterator[tuple[Any, Any]]:
        now = self.now()
        out = []
        for k, stored in list(self.inner.items()):
            visible, value = self._live(k, stored, now)
            if visible:
                out.append((k, value))
        return iter(out)

    def keys(self) -> Iterator[Any]:
        return iter([k for k, _ in self.items()])

    def values(self) -> Iterator[Any]:
        return iter([v for _, v in self.items()])

    def is_empty(self) -> bool:
        return not any(True for _ in self.items())

    def clean_current(self, now: int) -> None:
        for k, (_, ts) in list(self.inner.items()):
            if self.expired(ts, now):
                self.inner.remove(k)


class _TtlAccumulating(_TtlSingle):
    """Reducing and aggregating states: ``(accumulator, last access)`` in a value state."""

    def _live_accumulator(self) -> tuple[Any, int]:
        """The accumulator to add to (None when there is none or it expired) and the time."""
        stored = self.inner.value()
        now = self.now()
        return (None if stored is None or self.expired(stored[1], now) else stored[0]), now


class TtlReducingState(_TtlAccumulating, ReducingState):
    def get(self) -> Any:
        return self._read()

    def add(self, value: Any) -> None:
        current, now = self._live_accumulator()
        new = value if current is None else self.descriptor.reduce_function.reduce(current, value)
        self.inner.update((new, now))


class TtlAggregatingState(_TtlAccumulating, AggregatingState):
    def get(self) -> Any:
        acc = self._read()
        return None if acc is None else self.descriptor.agg_function.get_result(acc)

    def add(self, value: Any) -> None:
        f = self.descriptor.agg_function
        acc, now = self._live_accumulator()
        self.inner.update((f.add(value, f.create_accumulator() if acc is None else acc), now))


def ttl_state(backend: Any, descriptor: StateDescriptor, clock: Any) -> TtlState:
    """The TTL state for ``descriptor`` (whose ``ttl_config`` is set) over ``backend``."""
    kind = descriptor.kind
    if kind == "value":
        return TtlValueState(backend.get_partitioned_state(ValueStateDescriptor(descriptor.name)), descriptor, clock, backend)
    if kind == "list":
        return TtlListState(backend.get_partitioned_state(ListStateDescriptor(descriptor.name)), descriptor, clock, backend)
    if kind == "map":
        return TtlMapState(backend.get_partitioned_state(MapStateDescriptor(descriptor.name)), descriptor, clock, backend)
    inner = backend.get_partitioned_state(ValueStateDescriptor(descriptor.name))
    if kind == "reducing":
        return TtlReducingState(inner, descriptor, clock, backend)
    return TtlAggregatingState(inner, descriptor, clock, backend)
