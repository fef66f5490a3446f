"""Checksums of checkpoints and savepoints: every byte a restore reads is verified (docs/architecture.md, section 10a).

The scheme (docs/checkpoints.md, "Integrity"):

- every state file in ``_metadata`` (HashMap ``.pkl`` parts, RocksDB files in ``chk-<n>/`` and
  ``shared/``, savepoint Parquet files) records its size and SHA-256, computed by the task that
  wrote it and returned in its acknowledgement;
- ``_metadata`` records ``metadata_sha256``, the SHA-256 of its own canonical form: the JSON
  object without that field, keys sorted, no whitespace, UTF-8 (:func:`metadata_checksum`). It
  covers everything else in the file: source positions, watermarks, sink and operator state, and
  the files' sizes and checksums;
- before any task starts, the driver reads ``_metadata`` and checks its checksum, then checks
  that every file exists with its size, then streams every file once and compares its SHA-256
  (``checkpoint/verification.py``): checkpoint storage is readable by the driver (local directory,
  S3, HDFS, ...), the executors' local disks need not be;
- a task that reads a file to restore from checks its size and SHA-256 again before it decodes
  anything (:func:`check_bytes`).

A mismatch raises :class:`~flowpoint.errors.CorruptStateError` naming the file (``.path``), which
no restart can fix: the job fails at once, and another checkpoint or savepoint must be restored.
A file that matches its checksum but does not decode (unpickle) raises its subclass
:class:`~flowpoint.errors.StateDecodeError` the same way (:func:`decode`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

from flowpoint.errors import CorruptStateError, StateDecodeError, StateMigrationError

CHECKSUM_FIELD = "metadata_sha256"
HINT = "restore from another checkpoint or savepoint (e.g. the previous retained checkpoint)"


def canonical_bytes(d: dict[str, Any]) -> bytes:
    """The canonical form of a JSON object: keys sorted, no whitespace, UTF-8."""
    return json.dumps(d, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False).encode("utf-8")


def metadata_checksum(d: dict[str, Any]) -> str:
    """SHA-256 of ``d`` (a ``_metadata`` object) in canonical form, without its checksum field."""
    return hashlib.sha256(canonical_bytes({k: v for k, v in d.items() if k != CHECKSUM_FIELD})).hexdigest()


def is_sha256(value: Any) -> bool:
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def corrupt(uri: str, problem: str, uid: str | None = None, what: str = "state file") -> CorruptStateError:
    owner = f" (operator uid {uid!r})" if uid else ""
    return CorruptStateError(f"{what} {uri}{owner} {problem}: it is corrupt, truncated or replaced; {HINT}", path=uri)


def undecodable(uri: str, error: BaseException, uid: str | None = None, what: str = "state file", hint: str = HINT) -> StateDecodeError:
    """The error for a file that matched its checksum but could not be decoded."""
    owner = f" (operator uid {uid!r})" if uid else ""
    msg = (
        f"{what} {uri}{owner} matches its recorded checksum but cannot be decoded ({type(error).__name__}: "
        f"{str(error)[:300]}): it was damaged before its checksum was computed or rewritten together with it, or the "
        f"job no longer defines a class or module its state uses; {hint}"
    )
    return StateDecodeError(msg, path=uri)


def decode(loads: Callable[[bytes], Any], data: bytes, uri: str, uid: str | None = None, what: str = "state file", hint: str = HINT) -> Any:
    """``loads(data)`` of a verified file; any failure becomes a StateDecodeError naming ``uri``
    (no restart can fix it: the job fails once). A StateMigrationError (a named tuple's new field
    without a default, state/compatibility.py) is raised as it is."""
    try:
        return loads(data)
    except StateMigrationError:
        raise
    except Exception as e:  # noqa: BLE001 - unpickling raises anything (EOFError, AttributeError, ...)
        raise undecodable(uri, e, uid, what, hint) from e


SHAPES = {"list": (list, "a list"), "map": (dict, "a dict")}  # what a value of each state kind must be (others: anything)


def misshapen(uri: str, problem: str, uid: str | None = None, state: str | None = None, what: str = "state file", hint: str = HINT) -> StateDecodeError:
    """The error for a verified file that decodes, but not to the shape its kind of state needs
    (a table per state name, a list for ListState, a dict for MapState): no restart fixes it."""
    owner = f" (operator uid {uid!r}" + (f", state {state!r})" if state else ")") if uid else (f" (state {state!r})" if state else "")
    msg = (
        f"{what} {uri}{owner} matches its recorded checksum but does not hold what flowpoint wrote there: {problem}. It was "
        f"written by other code, or damaged before its checksum was computed; {hint}"
    )
    return StateDecodeError(msg, path=uri)


def check_tables(payload: Any, changelog: bool, uri: str, uid: str | None, kinds: dict[str, str] | None = None, what: str = "checkpoint file") -> None:
    """Raise :func:`misshapen` unless ``payload`` (an unpickled HashMap part) is ``{state name:
    {key: value}}`` (``changelog``: ``{state name: (puts {key: value}, deletes [key])}``), every
    value of a ListState a list and of a MapState a dict (``kinds``: state name -> kind)."""
    if not isinstance(payload, dict):
        raise misshapen(uri, f"it holds a {type(payload).__name__}, not a table per state", uid, None, what)
    for name, table in payload.items():
        if not isinstance(name, str):
            raise misshapen(uri, f"it names a state by a {type(name).__name__}", uid, None, what)
        if changelog:
            if not isinstance(table, (tuple, list)) or len(table) != 2 or not isinstance(table[0], dict) or not isinstance(table[1], (list, tuple, set)):
                raise misshapen(uri, f"its changes are a {type(table).__name__}, not (puts, deletes)", uid, name, what)
            table = table[0]
        elif not isinstance(table, dict):
            raise misshapen(uri, f"its table is a {type(table).__name__}, not a dict", uid, name, what)
        check_values(table.values(), (kinds or {}).get(name), uri, uid, name, what)


def check_values(values: Any, kind: str | None, uri: str, uid: str | None, state: str, what: str = "checkpoint file") -> None:
    """Every value of a ``kind`` state has the shape that kind needs (:data:`SHAPES`)."""
    shape = SHAPES.get(kind or "")
    if shape is None:
        return
    cls, name = shape
    for v in values:
        if not isinstance(v, cls):
            raise misshapen(uri, f"a value of this {kind} state is a {type(v).__name__}, not {name}", uid, state, what)


def check_bytes(data: bytes, size: int | None, sha256: str | None, uri: str, uid: str | None = None, what: str = "state file") -> bytes:
    """``data`` if it has ``size`` bytes and SHA-256 ``sha256`` (task side, before decoding);
    CorruptStateError naming ``uri`` otherwise. A missing ``sha256`` is refused: every file of
    a checkpoint or savepoint has one."""
    if size is not None and len(data) != size:
        raise corrupt(uri, f"has {len(data)} bytes, _metadata records {size}", uid, what)
    if not sha256:
        raise corrupt(uri, "has no checksum in _metadata", uid, what)
    if hashlib.sha256(data).hexdigest() != sha256:
        raise corrupt(uri, "does not match the SHA-256 recorded in _metadata", uid, what)
    return data
