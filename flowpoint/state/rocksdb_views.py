"""Whole-state views of a RocksDB backend (flowpoint/state/rocksdb.py): its committed DB content
with the overlay on top, as ``{state name: {key: value}}`` tables (snapshots, savepoints, an
operator's index rebuilt when it opens), counted by key bytes, or written back (restore).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

from flowpoint.pickles import dumps
from flowpoint.state.key_identity import state_key
from flowpoint.state.keygroups import assign_to_key_group
from flowpoint.state.kinds import ABSENT
from flowpoint.state.rocksdb_keys import (
    DATA_END,
    EMPTY_NS,
    META_COUNT,
    UNKNOWN_KIND,
    key_bytes,
    key_group_prefix,
    pack_u32,
    pack_u64,
    parse_db_key,
)
from flowpoint.state.rocksdb_table import RawValue, RocksDBTable

_loads = pickle.loads
_ABSENT = ABSENT


def committed_tables(b: Any) -> dict[str, dict[Any, Any]]:
    names = {sid: (name, kind) for name, (sid, kind) in b._names.items()}
    value_loads = {sid: b._remap.get(name, _loads) for sid, (name, _kind) in names.items()}
    out: dict[str, dict[Any, Any]] = {}
    for kb, raw in b._scan(b"", DATA_END):
        _kg, sid, kbytes, _ns, ukb = parse_db_key(kb)
        name, kind = names.get(sid, (None, None))
        if name is None:  # pragma: no cover - data of an unregistered id
            continue
        table = out.setdefault(name, {})
        key = state_key(_loads(kbytes))
        if kind == "map":
            table.setdefault(key, {})[_loads(ukb)] = value_loads[sid](raw)
        else:
            table[key] = value_loads[sid](raw)
    return out

def snapshot(b: Any) -> dict[str, dict[Any, Any]]:
    """All state (committed DB content with the overlay on top): ``{state name: {key:
    value}}`` as the heap backend's snapshot (MapState values are dicts, ListState lists).
    O(state)."""
    out = committed_tables(b)
    for table in b._tables.values():
        if table.cache or table.maps:
            overlay_onto(table, out.setdefault(table.name, {}))
    return {name: table for name, table in out.items() if table}

def iter_entries(b: Any, state_name: str) -> Iterator[tuple[Any, Any]]:
    """Every ``(key, value)`` of one state, the committed DB content with the overlay on top
    (MapState: the value is the key's dict; keys as stored, so a ``Row`` key comes back as a
    tuple). For rebuilding an in-memory index, such as a timer queue, when an operator opens.
    Costs one seek per key group holding the state plus one read per entry."""
    known = b._names.get(state_name)
    if known is None:
        return iter(())
    sid, kind = known
    entries = committed_entries(b, sid, kind)
    table = b._tables.get(state_name)
    if table is not None and (table.cache or table.maps):
        overlay_onto(table, entries)
    return iter(list(entries.items()))

def committed_entries(b: Any, sid: int, kind: str) -> dict[Any, Any]:
    """``{key: value}`` of one state id in the DB: one iterator that seeks from key group to
    key group, skipping the other states' ranges."""
    from rocksdict import ReadOptions

    ro = ReadOptions()
    ro.set_iterate_upper_bound(DATA_END)
    it = b._require_db().iter(ro)
    sidb = bytes([sid])
    out: dict[Any, Any] = {}
    loads = next((b._remap.get(name, _loads) for name, (s, _k) in b._names.items() if s == sid), _loads)
    it.seek(key_group_prefix(0) + sidb)
    while it.valid():
        kb = it.key()
        if kb[2] != sid:
            group = int.from_bytes(kb[0:2], "big") + (kb[2] > sid)
            it.seek(key_group_prefix(group) + sidb)
            continue
        _kg, _sid, kbytes, _ns, ukb = parse_db_key(kb)
        key = state_key(_loads(kbytes))
        if kind == "map":
            out.setdefault(key, {})[_loads(ukb)] = loads(it.value())
        else:
            out[key] = loads(it.value())
        it.next()
    del it
    return out

def restore(b: Any, tables: dict[str, dict[Any, Any]], kinds: dict[str, str] | None = None) -> None:
    """Replace the DB content with ``tables`` (heap snapshot format) and drop the overlay.

    The kind of each state comes from ``kinds``, from its declaration, or from the DB; a
    state of unknown kind is stored one entry per key and split into per-user-key entries
    if it is later declared as MapState."""
    b._require_db()
    b._drop_overlay()
    b._remap, b._value_classes = {}, {}
    wb = b._batch()
    wb.delete_range(b"", DATA_END)
    count = 0
    maxp = b.max_parallelism
    for name, table in tables.items():
        kind = (kinds or {}).get(name)
        if kind is None:
            known = b._names.get(name)
            kind = known[1] if known is not None else UNKNOWN_KIND
        sid = b._ensure_state(name, kind, batch=wb)
        sidb = bytes([sid])
        for key, value in table.items():
            kb = key_bytes(key)
            dbk = assign_to_key_group(key, maxp).to_bytes(2, "big") + sidb + pack_u32(len(kb)) + kb + EMPTY_NS
            if kind == "map":
                if not value:
                    continue
                for uk, v in value.items():
                    wb.put(dbk + key_bytes(uk), dumps(v))
            else:
                if value is None and kind == "value" or kind == "list" and not value:
                    continue
                wb.put(dbk, dumps(value))
            count += 1
    b._count = count
    wb.put(META_COUNT, pack_u64(count))
    b._write(wb)
    b._forget_log()

def count_by_scan(b: Any) -> int:
    names = {sid: kind for sid, kind in b._names.values()}
    count = 0
    last_map_prefix = None
    for kb in b._scan(b"", DATA_END, keys_only=True):
        if names.get(kb[2]) == "map":
            _kg, _sid, kbytes, ns, ukb = parse_db_key(kb)
            prefix = kb[: len(kb) - len(ukb)]
            if prefix == last_map_prefix:
                continue
            last_map_prefix = prefix
        count += 1
    return count

def keys_per_state(b: Any) -> dict[str, int]:
    """Committed keys per state name, counted from the DB's key bytes (nothing is
    unpickled: safe on files from elsewhere, as ``flowpoint inspect`` needs). O(entries)."""
    names = {sid: (name, kind) for name, (sid, kind) in b._names.items()}
    counts: dict[str, int] = {}
    last_map_prefix = None
    for kb in b._scan(b"", DATA_END, keys_only=True):
        name, kind = names.get(kb[2], (None, None))
        if name is None:
            continue
        if kind == "map":
            _kg, _sid, _kbytes, _ns, ukb = parse_db_key(kb)
            prefix = kb[: len(kb) - len(ukb)]
            if prefix == last_map_prefix:
                continue
            last_map_prefix = prefix
        counts[name] = counts.get(name, 0) + 1
    return counts

def overlay_onto(table: RocksDBTable, target: dict[Any, Any]) -> None:
    """Apply one state's overlay to ``target`` (``{key: value}`` read from the DB)."""
    if table.kind != "map":
        absent = _ABSENT
        for key, value in table.cache.items():
            if value is absent:
                target.pop(key, None)
            else:
                target[key] = value
        return
    for key, mo in table.maps.items():
        current = {} if mo.cleared else target.get(key, {})
        for uk, value in mo.entries.items():
            if value is _ABSENT:
                current.pop(uk, None)
            else:
                current[uk] = _loads(value.raw) if type(value) is RawValue else value
        if current:
            target[key] = current
        else:
            target.pop(key, None)

