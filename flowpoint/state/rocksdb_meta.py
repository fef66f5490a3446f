"""What a RocksDB backend's DB records of itself (flowpoint/state/rocksdb.py), under ``META``:
the id and kind of each state name, the committed epoch, the number of (state, key) pairs and
the layout version.
"""

from __future__ import annotations

from typing import Any

from flowpoint.errors import StateAccessError
from flowpoint.state import rocksdb_migration, rocksdb_views
from flowpoint.state.rocksdb_keys import (
    FORMAT_VERSION,
    MAX_STATES,
    META_COUNT,
    META_FORMAT,
    META_STATE,
    META_VERSION,
    UNKNOWN_KIND,
    pack_u64,
    prefix_end,
    unpack_u64,
)


def load_meta(b: Any) -> None:
    """Read what the DB records of itself once it is open: its states' ids and kinds, the
    committed epoch and the number of (state, key) pairs (counted once for a DB from before the
    count was kept); its layout version is checked."""
    db = b._db
    b._names.clear()
    end = prefix_end(META_STATE)
    for k, v in b._scan(META_STATE, end):
        b._names[k[len(META_STATE) :].decode("utf-8")] = (v[0], v[1:].decode("ascii"))
    raw = db.get(META_VERSION)
    b._version = unpack_u64(raw)[0] if raw is not None else 0
    raw = db.get(META_COUNT)
    if raw is None:
        wb = b._batch()
        b._count = rocksdb_views.count_by_scan(b)
        wb.put(META_COUNT, pack_u64(b._count))
        wb.put(META_FORMAT, pack_u64(FORMAT_VERSION))
        b._write(wb)
    else:
        b._count = unpack_u64(raw)[0]
    raw = db.get(META_FORMAT)
    if raw is not None and unpack_u64(raw)[0] != FORMAT_VERSION:
        msg = f"the RocksDB state at {b.db_path} has layout version {unpack_u64(raw)[0]}; this flowpoint reads version {FORMAT_VERSION}"
        raise StateAccessError(msg)
    for name, table in b._tables.items():  # states declared before a close/open
        known = b._names.get(name)
        if known is None or known[0] != table.sid:
            sid = ensure_state(b, name, table.kind, table.sid)
            table.sid, table.sidb = sid, bytes([sid])

def ensure_state(b: Any, name: str, kind: str, preferred: int | None = None, batch: Any = None) -> int:
    """The state id of ``name`` in this DB, registering it (or its kind) if needed."""
    known = b._names.get(name)
    if known is not None:
        sid, k = known
        if k == kind or kind == UNKNOWN_KIND:
            return sid
        if k != UNKNOWN_KIND:
            msg = (
                f"operator {b.operator_name!r} declares state {name!r} as {kind} state, "
                f"but it was declared as {k} state before; give the two states different names"
            )
            raise StateAccessError(msg)
        if kind == "map":
            rocksdb_migration.migrate_to_map(b, sid)
    else:
        used = {s for s, _ in b._names.values()}
        if preferred is not None and preferred not in used:
            sid = preferred
        else:
            sid = next((i for i in range(MAX_STATES) if i not in used), -1)
            if sid < 0:
                msg = f"operator {b.operator_name!r} declares more than {MAX_STATES} keyed states; the RocksDB backend holds at most {MAX_STATES}"
                raise StateAccessError(msg)
    b._names[name] = (sid, kind)
    entry = (META_STATE + name.encode("utf-8"), bytes([sid]) + kind.encode("ascii"))
    if batch is not None:
        batch.put(*entry)
    else:
        wb = b._batch()
        wb.put(*entry)
        b._write(wb)
    return sid
