"""One epoch's changes of a RocksDB backend as DB bytes (flowpoint/state/rocksdb.py): the
overlay of its tables against the DB (:func:`diff`), and a committed delta written into a
WriteBatch (:func:`write_delta`).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from flowpoint.pickles import dumps
from flowpoint.state.kinds import ABSENT
from flowpoint.state.rocksdb_keys import META_COUNT, MISS, key_bytes, pack_u64, prefix_end
from flowpoint.state.rocksdb_table import MapOverlay, RawValue

_loads = pickle.loads
_pickle_dumps = pickle.dumps
_MISS = MISS
_ABSENT = ABSENT


@dataclass
class RocksDBDelta:
    """One epoch's changes of one backend, as DB bytes. Applied in this order: prefix deletes,
    deletes, puts (the three never name the same DB key twice)."""

    puts: dict[bytes, bytes] = field(default_factory=dict)
    deletes: list[bytes] = field(default_factory=list)
    prefix_deletes: list[bytes] = field(default_factory=list)
    states: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (state id, kind)
    key_count_change: int = 0

    def __bool__(self) -> bool:
        return bool(self.puts or self.deletes or self.prefix_deletes)

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes) + len(self.prefix_deletes)

    def nbytes(self) -> int:
        return (
            sum(len(k) + len(v) for k, v in self.puts.items())
            + sum(map(len, self.deletes))
            + sum(map(len, self.prefix_deletes))
        )



# the working state's delta files pickle it by this name (as before the class had a module of
# its own): files written before and after read alike
RocksDBDelta.__module__ = "flowpoint.state.rocksdb"


def has_prefix(b: Any, prefix: bytes) -> bool:
    """Whether backend ``b``'s DB holds a key starting with ``prefix``."""
    for _ in b._scan(prefix, prefix_end(prefix), keys_only=True):
        return True
    return False


def map_exists_after(b: Any, mo: MapOverlay) -> bool:
    """Whether the key of map overlay ``mo`` has an entry once the overlay is written."""
    for v in mo.entries.values():
        if v is not _ABSENT:
            return True
    if mo.complete:
        return False
    for kb in b._scan(mo.prefix, prefix_end(mo.prefix), keys_only=True):  # type: ignore[arg-type]
        if mo.entries.get(_loads(kb[len(mo.prefix) :]), _MISS) is not _ABSENT:  # type: ignore[arg-type]
            return True
    return False


def diff(b: Any, encode_values: bool) -> RocksDBDelta:
    """The overlay against the DB: byte-level changes (values only if ``encode_values``)
    and the change in the number of (state, key) pairs."""
    out = RocksDBDelta()
    get = b._get
    for table in b._tables.values():
        touched = False
        if table.kind != "map":
            absent = _ABSENT
            cache, orig = table.cache, table.orig
            for key in table.dirty:
                value = cache[key]
                known = orig.get(key)
                if known is None:  # written without being read: look the old value up
                    kb = b._db_key(table, key)
                    before = get(kb)
                    orig[key] = (kb, before)
                else:
                    kb, before = known
                if value is absent:
                    if before is None:
                        continue
                    out.deletes.append(kb)
                    out.key_count_change -= 1
                else:
                    if encode_values:
                        try:
                            vb = _pickle_dumps(value, 5)
                        except Exception:
                            vb = dumps(value)
                        if vb == before:
                            continue
                        out.puts[kb] = vb
                    else:
                        out.puts[kb] = b""
                    if before is None:
                        out.key_count_change += 1
                touched = True
        else:
            for key, mo in table.maps.items():
                if not mo.dirty and not mo.cleared:
                    continue
                if mo.prefix is None:
                    mo.prefix = b._db_key(table, key)
                prefix = mo.prefix
                existed = has_prefix(b, prefix)
                if mo.cleared and existed:
                    out.prefix_deletes.append(prefix)
                    touched = True
                for uk in mo.dirty:
                    value = mo.entries[uk]
                    ekb = prefix + key_bytes(uk)
                    if mo.cleared:
                        before = None
                    else:
                        before = mo.orig.get(uk, _MISS)
                        if before is _MISS:
                            before = mo.orig[uk] = get(ekb)
                    if value is _ABSENT:
                        if before is None:
                            continue
                        out.deletes.append(ekb)
                    else:
                        if type(value) is RawValue:
                            continue
                        if encode_values:
                            vb = dumps(value)
                            if vb == before:
                                continue
                            out.puts[ekb] = vb
                        else:
                            out.puts[ekb] = b""
                    touched = True
                out.key_count_change += map_exists_after(b, mo) - existed
        if touched:
            out.states[table.name] = (table.sid, table.kind)
    return out


def changed_values(tables: dict) -> Iterator[tuple[str, Any, Any]]:
    """``(state name, key, value)`` of every value written in the current epoch (what
    the delta will pickle; a MapState entry's value as ``{user key: value}``): to name
    the one that cannot be pickled."""
    for table in tables.values():
        if table.kind != "map":
            absent = _ABSENT
            for key in table.dirty:
                value = table.cache.get(key, absent)
                if value is not absent:
                    yield table.name, key, value
            continue
        for key, mo in table.maps.items():
            for uk in mo.dirty:
                value = mo.entries.get(uk, _ABSENT)
                if value is not _ABSENT and type(value) is not RawValue:
                    yield table.name, key, {uk: value}


def changed_keys(tables: dict) -> int:
    n = 0
    for table in tables.values():
        n += len(table.dirty)
        for mo in table.maps.values():
            if mo.dirty or mo.cleared:
                n += 1
    return n


def write_delta(b: Any, wb: Any, delta: RocksDBDelta) -> None:
    """Put committed ``delta`` into WriteBatch ``wb`` of backend ``b``: its states registered
    (their ids as this DB has them: another DB's delta may name others), then its prefix
    deletes, deletes and puts, and the new number of (state, key) pairs."""
    remap: dict[int, bytes] = {}
    for name, (sid, kind) in delta.states.items():
        local = b._ensure_state(name, kind, sid, wb)
        if local != sid:
            remap[sid] = bytes([local])
        table = b._tables.get(name)
        if table is not None and table.sid != local:  # pragma: no cover - defensive
            table.sid, table.sidb = local, bytes([local])

    if remap:

        def fix(kb: bytes) -> bytes:
            r = remap.get(kb[2])
            return kb if r is None else kb[:2] + r + kb[3:]

    else:

        def fix(kb: bytes) -> bytes:
            return kb

    for prefix in delta.prefix_deletes:
        prefix = fix(prefix)
        wb.delete_range(prefix, prefix_end(prefix))
    delete, put = wb.delete, wb.put
    if remap:
        for kb in delta.deletes:
            delete(fix(kb))
        for kb, vb in delta.puts.items():
            put(fix(kb), vb)
    else:
        for kb in delta.deletes:
            delete(kb)
        for kb, vb in delta.puts.items():
            put(kb, vb)
    if delta.key_count_change:
        b._count += delta.key_count_change
        wb.put(META_COUNT, pack_u64(b._count))
