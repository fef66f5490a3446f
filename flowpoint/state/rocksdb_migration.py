"""Restored RocksDB state brought to what the job declares now (flowpoint/state/rocksdb.py;
compatibility.py has the rules): a state restored before its kind was known split into MapState
entries, values migrated to their declared schema or unpickled by field name and written again,
and the named tuple class of a state's stored values for ``_metadata``.
"""

from __future__ import annotations

import pickle
from typing import Any

from flowpoint.pickles import dumps
from flowpoint.state.compatibility import (
    Recorded,
    migrate_value,
    on_register,
    remapping_loads,
    value_class,
    worth_scanning,
)
from flowpoint.state.rocksdb_keys import (
    DATA_END,
    META_COUNT,
    UNKNOWN_KIND,
    key_bytes,
    key_group_prefix,
    pack_u64,
)

_loads = pickle.loads


def migrate_to_map(b: Any, sid: int) -> None:
    """A state restored before its kind was known holds whole dicts; a MapState keeps one
    entry per user key."""
    wb = b._batch()
    emptied = 0
    for kb, raw in b._scan(b"", DATA_END):
        if kb[2] != sid:
            continue
        wb.delete(kb)
        value = _loads(raw)
        if not value:
            emptied += 1
        for uk, v in value.items():
            wb.put(kb + key_bytes(uk), dumps(v))
    if emptied:
        b._count -= emptied
        wb.put(META_COUNT, pack_u64(b._count))
    b._write(wb)
    b._forget_log()  # rewritten in place: the changelog cannot replay it


def migrate_values(b: Any, sid: int, kind: str, migrate: Any, loads: Any = None) -> None:
    """Bring every restored value of one state to its declared schema (compatibility.py).
    With ``loads`` (the state's named tuples were pickled with older fields), every value is
    unpickled with it and written again, so that later reads need no remapping."""
    wb = b._batch()
    changed = 0
    first = loads is None
    loads = loads or _loads
    as_kind = "list" if kind == "list" else "value"  # a map entry is one value
    for kb, raw in b._scan(b"", DATA_END):
        if kb[2] != sid:
            continue
        value = loads(raw)
        if first:
            first = False
            if not worth_scanning(migrate, as_kind, value):
                return
        new = value if migrate is None else migrate_value(as_kind, value, migrate)
        if new is not value or loads is not _loads:
            wb.put(kb, dumps(new))
            changed += 1
    if changed:
        b._write(wb)
        b._forget_log()  # rewritten in place: the changelog cannot replay it


def stored_value_class(b: Any, name: str) -> dict | None:
    """The named tuple class and fields of state ``name``'s stored values, for ``_metadata``
    (compatibility.value_class): as restored while they are not rewritten yet, else from the
    first stored value (one seek per key group holding data before it; remembered once
    found)."""
    if name in b._remap:
        recorded = b.restored_states.get(name)
        return recorded.value_class if recorded is not None else None
    if name in b._value_classes:
        return b._value_classes[name]
    known = b._names.get(name)
    if known is None:
        return None
    sid, kind = known
    raw = first_value(b, sid)
    if raw is None:
        return None
    out = b._value_classes[name] = value_class("list" if kind == "list" else "value", _loads(raw))
    return out


def first_value(b: Any, sid: int) -> bytes | None:
    from rocksdict import ReadOptions

    ro = ReadOptions()
    ro.set_iterate_upper_bound(DATA_END)
    it = b._require_db().iter(ro)
    sidb = bytes([sid])
    it.seek(key_group_prefix(0) + sidb)
    try:
        while it.valid():
            kb = it.key()
            if kb[2] == sid:
                return it.value()
            it.seek(key_group_prefix(int.from_bytes(kb[0:2], "big") + (kb[2] > sid)) + sidb)
        return None
    finally:
        del it


def register(b: Any, descriptor: Any) -> int:
    """The state id of a state declared for the first time in this process: its kind checked
    against what the DB and the restore recorded, its values migrated to the declared schema
    (or rebuilt by field name) if they need it (compatibility.py)."""
    name, kind = descriptor.name, descriptor.kind
    known = b._names.get(name)
    recorded = b.restored_states.get(name)
    if known is not None and known[1] != UNKNOWN_KIND:  # the DB knows the declared kind
        recorded = Recorded(known[1], True, recorded.schema if recorded is not None else None)
    migrate = on_register(b, descriptor, recorded)
    sid = b._ensure_state(name, kind)
    remap = b._remap.get(name)
    if migrate is not None or remap is not None:
        migrate_values(b, sid, kind, migrate, remap)
        b._remap.pop(name, None)
        b._value_classes.pop(name, None)
    return sid


def remapping(value_classes: dict[str, dict | None]) -> dict[str, Any]:
    """State name -> the unpickler that rebuilds its named tuples by field name, for the states
    whose recorded class (``value_classes``) has other fields than the class has now."""
    out = {}
    for name, cls in value_classes.items():
        loads = remapping_loads([cls])
        if loads is not None:
            out[name] = loads
    return out
