"""Restored state against the state a job declares, as Flink checks it when a state is
registered after a restore (``StateMigrationException``).

A checkpoint or savepoint records each state's kind (value, list, map, reducing, aggregating):
*declared* when the writing job had registered the state (every RocksDB state, and HashMap
states since issue 17), else *inferred* from the values (a dict is taken for a map, a list for a
list, anything else for a value). When the restored job registers a state of another kind under
the same name, the task fails once, naming the operator, the state and both kinds; it never
hands the old value to the new state's user code, where it would fail at every restart.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from flowpoint.errors import StateMigrationError

# kinds an inferred kind cannot be: a value that is neither a list nor a dict is not a list or
# map state's, a dict is not a list state's and a list is not a map state's
_INFERRED_MISFITS = {"value": {"list", "map"}, "list": {"map"}, "map": {"list"}}

Recorded = tuple[str, bool]  # (kind, declared)


def recorded_kinds(files: Iterable[Any], uid: str, tables: Mapping[str, Mapping[Any, Any]] | None = None) -> dict[str, Recorded]:
    """The kinds a restore recorded for operator ``uid`` (from the restored files' metadata),
    with kinds inferred from ``tables`` for states the metadata does not record."""
    from flowpoint.checkpoint.savepoint import infer_kind

    out: dict[str, Recorded] = {}
    for f in files:
        if f.uid != uid:
            continue
        declared = set(f.declared)
        for name, kind in f.kinds:
            if name not in out or (name in declared and not out[name][1]):
                out[name] = (kind, name in declared)
    for name, table in (tables or {}).items():
        if name not in out and table:
            out[name] = (infer_kind(table), False)
    return out


def operator_label(name: str, uid: str | None) -> str:
    """How an error names a keyed operator: its name and uid (one of them when they are one)."""
    if not uid or uid == name:
        return f"operator uid {name!r}"
    return f"operator {name!r} (uid {uid!r})"


def check_restored_kind(operator: str, name: str, kind: str, recorded: Recorded | None) -> None:
    """Refuse to register state ``name`` as ``kind`` when the restored state of that name has
    another kind (declared), or values no state of that kind can hold (inferred)."""
    if recorded is None or name.startswith("_"):  # flowpoint's own states (timers, windows) keep their kinds
        return
    old, declared = recorded
    if old == kind:
        return
    if declared or kind in _INFERRED_MISFITS.get(old, ()):
        how = "" if declared else " (as its values show)"
        msg = (
            f"{operator} declares state {name!r} as {kind} state, but the checkpoint or savepoint it was "
            f"restored from holds {name!r} as {old} state{how}. A state's kind cannot change across a restore: "
            f"declare it as {old} state again, give the new state another name (and restore with "
            "--allow-non-restored-state if the old one goes), or migrate the savepoint with flowpoint.state_io"
        )
        raise StateMigrationError(msg)
