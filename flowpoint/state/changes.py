"""What changed in one keyed state between two snapshots of it (``state_reader(...).diff``):
keys added, removed and changed, a MapState's entries by user key."""

from __future__ import annotations

import pickle
from collections.abc import Mapping
from typing import Any

ADDED, REMOVED, CHANGED = "added", "removed", "changed"
COLUMNS = ("key", "user_key", "change", "before", "after")


def same(a: Any, b: Any) -> bool:
    """Equal values, NaN included (its pickle is the same), and values that do not compare."""
    try:
        if a == b:
            return True
    except Exception:  # noqa: BLE001 - a value whose == raises: its bytes decide
        pass
    try:
        return pickle.dumps(a) == pickle.dumps(b)
    except Exception:  # noqa: BLE001 - a value that does not pickle and is not equal
        return False


def state_changes(before: Mapping[Any, Any], after: Mapping[Any, Any], is_map: bool) -> list[tuple]:
    """``(key, user_key, change, before, after)`` rows: one per key (per key and user key of a
    MapState) that is in one snapshot only or holds another value; ``before`` and ``after`` are
    None where there is none. ``before``/``after`` map the user's keys (KeyedStateMap: NaN
    finds NaN, 1 and True are two keys)."""
    rows: list[tuple] = []
    for key, old in before.items():
        if key not in after:
            rows.extend(_entries(key, old, None, REMOVED, is_map))
        else:
            new = after[key]
            if is_map:
                rows.extend(_map_changes(key, old or {}, new or {}))
            elif not same(old, new):
                rows.append((key, None, CHANGED, old, new))
    for key, new in after.items():
        if key not in before:
            rows.extend(_entries(key, None, new, ADDED, is_map))
    return rows


def _entries(key: Any, old: Any, new: Any, change: str, is_map: bool) -> list[tuple]:
    if not is_map:
        return [(key, None, change, old, new)]
    entries = (old if change == REMOVED else new) or {}
    return [(key, uk, change, v if change == REMOVED else None, v if change == ADDED else None) for uk, v in entries.items()]


def _map_changes(key: Any, old: Mapping, new: Mapping) -> list[tuple]:
    rows = [(key, uk, REMOVED, v, None) for uk, v in old.items() if uk not in new]
    rows += [(key, uk, CHANGED, v, new[uk]) for uk, v in old.items() if uk in new and not same(v, new[uk])]
    rows += [(key, uk, ADDED, None, v) for uk, v in new.items() if uk not in old]
    return rows
