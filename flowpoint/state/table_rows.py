"""Keyed state tables as rows, the State Processor API's shape (``state_name, key, namespace,
user_key, value``): what :mod:`flowpoint.state_io` and the Spark adapters' DataFrames show."""

from __future__ import annotations

from flowpoint.state.key_identity import user_key


def state_rows(tables: dict, kinds: dict, state_name: str | None) -> list[tuple]:
    """``tables`` (``{state name: {key: value}}``) as rows, one per key (per user key of a map
    state), the states in name order unless ``state_name`` picks one."""
    rows = []
    for name in (sorted(tables) if state_name is None else [state_name]):
        kind = kinds.get(name)
        for key, value in tables.get(name, {}).items():
            key = user_key(key)
            if kind == "map" or (kind is None and isinstance(value, dict)):
                for uk, v in value.items():
                    rows.append((name, key, None, uk, v))
            else:
                rows.append((name, key, None, None, value))
    return rows
