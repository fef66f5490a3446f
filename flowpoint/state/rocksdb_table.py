"""The RocksDB backend's state tables (flowpoint/state/rocksdb.py): one per state name, the
*overlay* of the values read or written this epoch over the committed DB, decoded lazily; the
state kinds of ``kinds.py`` read and write through it. MapState keeps one DB entry per user key.
:class:`RocksDBValueState` inlines its table's read and write (the per-record path).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from flowpoint.errors import StateDecodeError
from flowpoint.state.kinds import ABSENT, ATOMIC, KeyedValueState, immutable
from flowpoint.state.rocksdb_keys import MISS, key_bytes, prefix_end

_loads = pickle.loads
_MISS = MISS
_ABSENT = ABSENT  # overlay tombstone: no value for the key (kinds.py)


class RawValue:
    """A map value read from the DB and not yet handed to user code (kept as bytes, so that
    ``contains``/``keys`` never mark mutable values as possibly changed)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


class MapOverlay:
    """The overlay of one key's map: entries read or written this epoch."""

    __slots__ = ("entries", "dirty", "orig", "cleared", "complete", "prefix")

    def __init__(self) -> None:
        self.entries: dict[Any, Any] = {}  # user key -> value | RawValue | _ABSENT
        self.dirty: set[Any] = set()  # user keys to write
        self.orig: dict[Any, bytes | None] = {}  # user key -> DB bytes before the epoch
        self.cleared = False  # a prefix delete precedes the entries
        self.complete = False  # entries hold every live entry (after a scan or a clear)
        self.prefix: bytes | None = None


class RocksDBTable:
    """One state's table (``kinds.py``) in RocksDB: an overlay of the values read or written this
    epoch over the DB, decoded lazily; ``dirty`` keys are written by the epoch's delta."""

    __slots__ = ("name", "sid", "sidb", "kind", "cache", "dirty", "orig", "maps", "backend")

    def __init__(self, name: str, sid: int, kind: str, backend: Any) -> None:  # a RocksDBKeyedStateBackend
        self.name = name
        self.sid = sid
        self.sidb = bytes([sid])
        self.kind = kind
        self.backend = backend
        self.cache: dict[Any, Any] = {}  # key -> value (_ABSENT when there is none)
        self.dirty: set[Any] = set()  # keys whose value may differ from the DB's
        self.orig: dict[Any, tuple[bytes, bytes | None]] = {}  # key -> (DB key, DB bytes before the epoch)
        self.maps: dict[Any, MapOverlay] = {}  # MapState only

    def clear(self) -> None:
        self.cache.clear()
        self.dirty.clear()
        self.orig.clear()
        self.maps.clear()

    def _undecodable(self, e: Exception) -> StateDecodeError:
        """A committed value or user key that does not unpickle: no restart can fix it."""
        b = self.backend
        msg = (
            f"a stored value of state {self.name!r} of operator {b.operator_name!r} (RocksDB at {b.db_path}) "
            f"cannot be unpickled ({type(e).__name__}: {str(e)[:300]}): the job no longer defines a class or module "
            f"the state uses, or the restored files were damaged before their checksums were computed; restore from "
            f"another checkpoint or savepoint, or bring the class back"
        )
        return StateDecodeError(msg, path=b.db_path)

    # -- one value per key -----------------------------------------------------------------------

    def _load(self, key: Any) -> Any:
        """The committed value of ``key`` (``_ABSENT`` if none), now cached in the overlay and
        remembered with its DB key and bytes."""
        b = self.backend
        enc = b._enc.get(key)
        if enc is None:
            enc = b._encode(key)
        kb = enc[0] + self.sidb + enc[1]
        raw = b._get(kb)
        self.orig[key] = (kb, raw)
        if raw is None:
            self.cache[key] = _ABSENT
            return _ABSENT
        try:
            value = self.cache[key] = _loads(raw)
        except Exception as e:
            raise self._undecodable(e) from e
        return value

    def peek(self, key: Any) -> Any:
        value = self.cache.get(key, _MISS)
        if value is _MISS:
            value = self._load(key)
        return value

    def read(self, key: Any) -> Any:
        value = self.cache.get(key, _MISS)
        if value is _MISS:
            value = self._load(key)
        if value is not _ABSENT and type(value) not in ATOMIC and not immutable(value):
            self.dirty.add(key)  # user code may change it in place: write it with the delta
        return value

    current = read  # ListState's list, an accumulator: changed in place as a read value may be

    def elements(self, key: Any) -> Any:
        value = self.cache.get(key, _MISS)
        if value is _MISS:
            value = self._load(key)
        if value is _ABSENT or all(map(immutable, value)):
            return value  # not marked as changed: the caller copies the list
        self.dirty.add(key)  # the elements handed out may be changed in place
        return value

    def write(self, key: Any, value: Any) -> None:
        self.cache[key] = value
        self.dirty.add(key)

    def remove(self, key: Any) -> None:
        if self.kind == "map":
            self._map_clear(key)
        elif self.peek(key) is not _ABSENT:
            self.cache[key] = _ABSENT
            self.dirty.add(key)

    # -- MapState: one DB entry per user key ---------------------------------------------------

    def _mo(self, key: Any) -> MapOverlay:
        mo = self.maps.get(key)
        if mo is None:
            mo = self.maps[key] = MapOverlay()
            mo.prefix = self.backend._db_key(self, key)
        return mo

    def _entry(self, mo: MapOverlay, uk: Any) -> Any:
        value = mo.entries.get(uk, _MISS)
        if value is _MISS:
            if mo.complete:
                return _ABSENT
            raw = self.backend._get(mo.prefix + key_bytes(uk))  # type: ignore[operator]
            mo.orig[uk] = raw
            value = mo.entries[uk] = _ABSENT if raw is None else RawValue(raw)
        return value

    def _value(self, mo: MapOverlay, uk: Any, value: Any) -> Any:
        """A value about to be handed to user code."""
        if type(value) is RawValue:
            try:
                value = mo.entries[uk] = _loads(value.raw)
            except Exception as e:
                raise self._undecodable(e) from e
            if not immutable(value):
                mo.dirty.add(uk)
        return value

    def _scan_entries(self, mo: MapOverlay) -> Iterator[tuple[Any, bytes]]:
        prefix = mo.prefix
        n = len(prefix)  # type: ignore[arg-type]
        for kb, raw in self.backend._scan(prefix, prefix_end(prefix)):  # type: ignore[arg-type]
            try:
                uk = _loads(kb[n:])
            except Exception as e:
                raise self._undecodable(e) from e
            yield uk, raw

    def _load_all(self, mo: MapOverlay) -> None:
        if mo.complete:
            return
        entries, orig = mo.entries, mo.orig
        for uk, raw in self._scan_entries(mo):
            if uk not in entries:
                entries[uk] = RawValue(raw)
                orig[uk] = raw
        mo.complete = True

    def map_get(self, key: Any, uk: Any) -> Any:
        mo = self._mo(key)
        value = self._entry(mo, uk)
        if value is _ABSENT:
            return _ABSENT
        return self._value(mo, uk, value)

    def map_put(self, key: Any, uk: Any, value: Any) -> None:
        mo = self._mo(key)
        mo.entries[uk] = value
        mo.dirty.add(uk)

    def map_put_all(self, key: Any, values: dict) -> None:
        mo = self._mo(key)
        mo.entries.update(values)
        mo.dirty.update(values)

    def map_remove(self, key: Any, uk: Any) -> None:
        mo = self._mo(key)
        if self._entry(mo, uk) is not _ABSENT:
            mo.entries[uk] = _ABSENT
            mo.dirty.add(uk)

    def map_contains(self, key: Any, uk: Any) -> bool:
        return self._entry(self._mo(key), uk) is not _ABSENT

    def map_items(self, key: Any) -> list:
        mo = self._mo(key)
        self._load_all(mo)
        return [(uk, self._value(mo, uk, v)) for uk, v in list(mo.entries.items()) if v is not _ABSENT]

    def map_keys(self, key: Any) -> list:
        mo = self._mo(key)
        self._load_all(mo)
        return [uk for uk, v in mo.entries.items() if v is not _ABSENT]

    def map_values(self, key: Any) -> list:
        mo = self._mo(key)
        self._load_all(mo)
        return [self._value(mo, uk, v) for uk, v in list(mo.entries.items()) if v is not _ABSENT]

    def map_is_empty(self, key: Any) -> bool:
        mo = self._mo(key)
        for v in mo.entries.values():
            if v is not _ABSENT:
                return False
        if mo.complete:
            return True
        for uk, raw in self._scan_entries(mo):
            if mo.entries.get(uk, _MISS) is _ABSENT:
                continue
            mo.entries[uk] = RawValue(raw)
            mo.orig[uk] = raw
            return False
        mo.complete = True
        return True

    def _map_clear(self, key: Any) -> None:
        mo = self._mo(key)
        if self.map_is_empty(key):
            return
        mo.entries.clear()
        mo.dirty.clear()
        mo.orig.clear()
        mo.cleared = True
        mo.complete = True


class RocksDBValueState(KeyedValueState):
    """``ValueState`` over a RocksDB :class:`RocksDBTable` with the table's read and write inlined:
    the overlay's dict first, the DB only for a key the epoch has not seen."""

    __slots__ = ()

    def value(self) -> Any:
        key = self._b._sk
        if key is None:
            self._key()
        t = self._t
        v = t.cache.get(key, _MISS)
        if v is _MISS:
            v = t._load(key)
        if v is _ABSENT:
            return None
        if type(v) not in ATOMIC and not immutable(v):
            t.dirty.add(key)  # user code may change it in place: write it with the delta
        return v

    def update(self, value: Any) -> None:
        key = self._b._sk
        if key is None:
            self._key()
        t = self._t
        if value is None:
            t.remove(key)
            return
        t.cache[key] = value
        t.dirty.add(key)

