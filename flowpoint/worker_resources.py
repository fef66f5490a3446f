"""What one Python worker process keeps between tasks: its caches and its clients.

An executor's Python worker outlives its tasks, so it keeps what is costly to build again: the
working state of the partitions it held (partition/working.py), storage clients and the files it
wrote lately (partition/durable.py), decoded stage plans (spark/epoch_launcher.py and
spark/connect/epoch_launcher.py), parsed CSV files (connectors/files.py), Kafka consumers
(connectors/kafka/reader.py) and RocksDB's shared block cache (state/rocksdb.py). A continuous
slot runs several subtasks as threads of one such process (docs/architecture.md, section 4b),
so all of these are owned by one :class:`WorkerResources` per process (:func:`worker`), and
every one is safe to use from several threads:

- :class:`BoundedCache` is a dict behind one lock. ``get_or_create`` builds a missing value
  once, whatever the number of threads asking (the others wait for it; the lock is not held
  while it is built, so other keys are served meanwhile). It keeps at most ``max_entries``
  values and, with ``weigh``, at most ``max_weight`` in total, dropping the least recently
  used; ``close`` is called on what it drops (outside the lock).
- :class:`ClientPool` lends clients that must not be used by two threads at once (a Kafka
  consumer is assigned one partition by its reader): ``lease`` hands out an idle client of the
  configuration or builds one, and takes it back at the end. At most ``max_idle`` idle clients
  are kept, per pool, and the ones dropped are closed; a client in use is never closed.

The per-record path never goes through these locks: a task takes its state, plan and clients
once, when it starts (or once per epoch), and uses them alone.

A fork (Spark's Python daemon forks its workers) must not inherit a lock another thread held,
nor share a parent's network clients: after ``os.fork`` the child starts with a new, empty
:class:`WorkerResources` (``os.register_at_fork``, and a check of the process id for forks
that bypass it). What the parent held is left alone in the child, never closed there (closing
a parent's client in a child would talk on the parent's connections).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from typing import Any, Generic, TypeVar

V = TypeVar("V")

__all__ = ["BoundedCache", "ClientPool", "WorkerResources", "worker"]


def _close_quietly(close: Callable[[Any], None] | None, values: list) -> None:
    if close is None:
        return
    for v in values:
        try:
            close(v)
        except Exception:  # noqa: BLE001 - closing what is no longer used is best effort
            pass


class _Pending:
    """A value being built by one thread; others wait for it."""

    __slots__ = ("done", "error", "value")

    def __init__(self) -> None:
        self.done = threading.Event()
        self.value: Any = None
        self.error: BaseException | None = None


class BoundedCache(Generic[V]):
    """A thread-safe LRU dict of at most ``max_entries`` values (and, with ``weigh``, at most
    ``max_weight`` in total; a value heavier than ``max_weight`` is returned but not kept).
    ``close`` is called on every value it drops (evicted, replaced, popped or cleared).
    None is no value: ``get`` answers None for a missing key, so None is never kept."""

    def __init__(self, name: str, max_entries: int, *, close: Callable[[V], None] | None = None,
                 weigh: Callable[[V], int] | None = None, max_weight: int | None = None) -> None:
        if max_entries < 1:
            msg = f"cache {name!r}: max_entries must be at least 1, got {max_entries}"
            raise ValueError(msg)
        self.name = name
        self.max_entries = max_entries
        self.max_weight = max_weight
        self._close = close
        self._weigh = weigh
        self._lock = threading.Lock()
        self._values: OrderedDict[Hashable, V] = OrderedDict()
        self._weights: dict[Hashable, int] = {}
        self._weight = 0
        self._pending: dict[Hashable, _Pending] = {}

    def __len__(self) -> int:
        with self._lock:
            return len(self._values)

    @property
    def weight(self) -> int:
        with self._lock:
            return self._weight

    def get(self, key: Hashable) -> V | None:
        with self._lock:
            v = self._values.get(key)
            if v is not None:
                self._values.move_to_end(key)
            return v

    def keys(self) -> list:
        with self._lock:
            return list(self._values)

    def get_or_create(self, key: Hashable, create: Callable[[], V]) -> V:
        """The value of ``key``, built by ``create()`` once when it is missing (a thread that
        asks meanwhile waits for that value; if ``create`` raises, the next asker tries again)."""
        while True:
            with self._lock:
                v = self._values.get(key)
                if v is not None:
                    self._values.move_to_end(key)
                    return v
                pending = self._pending.get(key)
                mine = pending is None
                if mine:
                    pending = self._pending[key] = _Pending()
            assert pending is not None
            if not mine:
                pending.done.wait()
                if pending.error is None:
                    return pending.value
                continue  # its creator failed (and raised): build it here
            try:
                v = create()
            except BaseException as e:
                with self._lock:
                    del self._pending[key]
                pending.error = e
                pending.done.set()
                raise
            with self._lock:
                del self._pending[key]
                dropped = self._store(key, v)
            pending.value = v
            pending.done.set()
            _close_quietly(self._close, dropped)
            return v

    def put(self, key: Hashable, value: V) -> None:
        with self._lock:
            dropped = self._store(key, value)
        _close_quietly(self._close, dropped)

    def pop(self, key: Hashable) -> V | None:
        with self._lock:
            v = self._values.pop(key, None)
            self._weight -= self._weights.pop(key, 0)
        if v is not None:
            _close_quietly(self._close, [v])
        return v

    def remove_if(self, predicate: Callable[[Hashable], bool]) -> int:
        """Drop (and close) every entry whose key satisfies ``predicate``; their number."""
        with self._lock:
            keys = [k for k in self._values if predicate(k)]
            dropped = [self._values.pop(k) for k in keys]
            for k in keys:
                self._weight -= self._weights.pop(k, 0)
        _close_quietly(self._close, dropped)
        return len(dropped)

    def clear(self) -> None:
        self.remove_if(lambda _k: True)

    def _store(self, key: Hashable, value: V) -> list:
        """Under the lock: keep ``value``; what was dropped, to be closed outside the lock."""
        dropped = []
        old = self._values.pop(key, None)
        self._weight -= self._weights.pop(key, 0)
        if old is not None and old is not value:
            dropped.append(old)
        if value is None:
            return dropped
        w = self._weigh(value) if self._weigh is not None else 0
        if self.max_weight is not None and w > self.max_weight:
            return dropped  # too heavy to keep: the caller has it, the cache does not
        self._values[key] = value
        if w:
            self._weights[key] = w
            self._weight += w
        while len(self._values) > self.max_entries or (self.max_weight is not None and self._weight > self.max_weight):
            k, v = self._values.popitem(last=False)
            self._weight -= self._weights.pop(k, 0)
            dropped.append(v)
        return dropped


class ClientPool(Generic[V]):
    """Clients lent to one user at a time, kept idle per configuration key for the next."""

    def __init__(self, name: str, max_idle: int, close: Callable[[V], None]) -> None:
        self.name = name
        self.max_idle = max_idle
        self._close = close
        self._lock = threading.Lock()
        self._idle: OrderedDict[tuple[Hashable, int], V] = OrderedDict()  # (key, id) -> client, least recent first
        self.in_use = 0

    def idle(self) -> int:
        with self._lock:
            return len(self._idle)

    @contextmanager
    def lease(self, key: Hashable, create: Callable[[], V]) -> Iterator[V]:
        """An idle client of ``key`` or a new one, for this thread alone until the block ends;
        then it is idle again (closed instead when the block raised: its state is unknown)."""
        client = None
        with self._lock:
            for k in self._idle:
                if k[0] == key:
                    client = self._idle.pop(k)
                    break
            self.in_use += 1
        try:
            if client is None:
                client = create()
            yield client
        except BaseException:
            with self._lock:
                self.in_use -= 1
            if client is not None:
                _close_quietly(self._close, [client])
            raise
        with self._lock:
            self.in_use -= 1
            self._idle[(key, id(client))] = client
            dropped = []
            while len(self._idle) > self.max_idle:
                dropped.append(self._idle.popitem(last=False)[1])
        _close_quietly(self._close, dropped)

    def close_idle(self) -> None:
        with self._lock:
            dropped = list(self._idle.values())
            self._idle.clear()
        _close_quietly(self._close, dropped)


class WorkerResources:
    """This process's caches and clients, by name: each module asks for its own with
    :meth:`cache` or :meth:`pool`, and builds it the first time (sizes stay with the module
    that knows them)."""

    def __init__(self) -> None:
        self.pid = os.getpid()
        self._lock = threading.Lock()
        self._parts: dict[str, Any] = {}

    def part(self, name: str, build: Callable[[], V]) -> V:
        """The named cache, pool or shared object of this worker, built once by ``build()``."""
        p = self._parts.get(name)
        if p is None:
            with self._lock:
                p = self._parts.get(name)
                if p is None:
                    p = self._parts[name] = build()
        return p

    def cache(self, name: str, max_entries: int, **kw: Any) -> BoundedCache:
        return self.part(name, lambda: BoundedCache(name, max_entries, **kw))

    def pool(self, name: str, max_idle: int, close: Callable[[Any], None]) -> ClientPool:
        return self.part(name, lambda: ClientPool(name, max_idle, close))

    def names(self) -> list[str]:
        with self._lock:
            return sorted(self._parts)


_current = WorkerResources()
_inherited: list[WorkerResources] = []  # a parent's, after a fork: kept, never used or closed


def worker() -> WorkerResources:
    """This process's :class:`WorkerResources` (a new one in a forked child)."""
    w = _current
    if w.pid != os.getpid():
        _after_fork()
        w = _current
    return w


def _after_fork() -> None:
    global _current
    if _current.pid != os.getpid():
        _inherited.append(_current)
        _current = WorkerResources()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
