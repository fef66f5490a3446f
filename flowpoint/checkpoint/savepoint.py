"""Savepoints: the canonical, backend-independent, relocatable snapshot of a job (docs/architecture.md, section 7).

Layout::

    <target dir>/savepoint-<job-id[:6]>-<12 hex>/_metadata                  CheckpointMetadata, kind "savepoint"
    <target dir>/savepoint-<job-id[:6]>-<12 hex>/<uid>-<hash>-<p>.parquet   one per operator uid and parallel instance

Every path in ``_metadata`` is relative to the savepoint directory, so the directory can be
moved anywhere and restored from. Each Parquet file holds rows::

    key_group int32, key binary, state_name string, namespace binary, user_key binary, value binary

``key``, ``user_key`` and ``value`` are pickled (:func:`flowpoint.tasks.batches.dumps`). MapState
has one row per user key; every other kind one row per key with a null ``user_key``. The
namespace is null (window contents are MapState whose user key is the window). The kind of each
state is recorded in the operator's ``states`` entry of ``_metadata``; ``declared`` says whether
the kind is known from the state's descriptor (RocksDB, the state writer) or inferred from the
values (the HashMap backend keeps no kinds: a dict is taken for MapState, a list for ListState).
For a state whose values are named tuples, ``value_class`` records the class and its field names
(from one value), so that a job whose class lost a field restores them by name
(:mod:`flowpoint.state.compatibility`).

Every file's size, row count and SHA-256 are recorded, and checked before a restore starts
(:mod:`flowpoint.checkpoint.integrity`), and again by the task that reads the file: a truncated
or corrupt file is refused with its name (CorruptStateError), never half-restored.

The pickled columns are user values: restoring or reading a savepoint's state unpickles them,
so a savepoint must be trusted before it is restored or read. :func:`describe` and
:func:`dispose_savepoint` read only ``_metadata`` (data) and never unpickle anything.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import pickle
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from flowpoint.checkpoint.filesystem import CheckpointStorageAccess, split_uri
from flowpoint.checkpoint.integrity import (
    CHECKSUM_FIELD,
    check_bytes,
    check_tables,
    check_values,
    corrupt,
    metadata_checksum,
    undecodable,
)
from flowpoint.checkpoint.metadata import (
    FORMAT_VERSION,
    METADATA_FILE,
    OLD_FORMAT_VERSIONS,
    CheckpointMetadata,
    OperatorState,
    SplitPosition,
    StateFile,
    SubtaskState,
    read_metadata,
    write_metadata,
)
from flowpoint.checkpoint.part_writer import copy_part, write_savepoint_part
from flowpoint.checkpoint.parts import (
    RestoredFile,
    apply_part,
    load_part,
    restore_native,
    writes_native_files,
)
from flowpoint.checkpoint.signing import default_keyring
from flowpoint.clock import now_ms
from flowpoint.errors import (
    CheckpointError,
    ConfigurationError,
    CorruptStateError,
    StateMigrationError,
)
from flowpoint.pickles import dumps
from flowpoint.state.compatibility import infer_kind, restoring_loads, sample_value_class
from flowpoint.state.key_identity import state_key, user_key
from flowpoint.state.keygroups import assign_to_key_group
from flowpoint.state.rocksdb import RocksDBKeyedStateBackend
from flowpoint.state.rocksdb_changelog import replay

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping

    from flowpoint.checkpoint.signing import Keyring

log = logging.getLogger("flowpoint")

SCHEMA = pa.schema([
    ("key_group", pa.int32()),
    ("key", pa.binary()),
    ("state_name", pa.string()),
    ("namespace", pa.binary()),
    ("user_key", pa.binary()),
    ("value", pa.binary()),
])
CANONICAL = "canonical"
STATE_KINDS = ("value", "list", "map", "reducing", "aggregating")


def savepoint_dir_name(job_id: str) -> str:
    """``savepoint-<job-id[:6]>-<12 hex>`` (as Flink names them)."""
    return f"savepoint-{job_id[:6]}-{uuid.uuid4().hex[:12]}"


def resolve_target(target_directory: str | None, config: Any) -> str:
    """The directory savepoints go to: the argument, else ``state.savepoints.dir``."""
    target = target_directory or (config.get("state.savepoints.dir") if config is not None else None)
    if not target:
        msg = (
            "no savepoint directory: pass a target directory (trigger_savepoint('file:///data/savepoints'), "
            "`flowpoint savepoint <job-id> <dir>`) or set state.savepoints.dir (env.set_default_savepoint_directory)"
        )
        raise ConfigurationError(msg)
    return str(target)


# -- encoding ----------------------------------------------------------------------------------


@dataclass
class EncodedPart:
    """One operator's state of one key-group range as Parquet rows."""

    table: pa.Table
    num_keys: int
    states: dict[str, dict[str, Any]] = field(default_factory=dict)  # name -> {kind, declared, keys, rows}


def encode_tables(tables: Mapping[str, Mapping[Any, Any]], kinds: Mapping[str, str], max_parallelism: int, declared: bool = False) -> EncodedPart:
    """``{state name: {key: value}}`` (the backends' snapshot form) as canonical rows."""
    kg_col: list[int] = []
    key_col: list[bytes] = []
    name_col: list[str] = []
    uk_col: list[bytes | None] = []
    val_col: list[bytes] = []
    keys: set[Any] = set()
    states: dict[str, dict[str, Any]] = {}
    for name in sorted(tables):
        table = tables[name]
        if not table:
            continue
        kind = kinds.get(name) or ""
        known = declared and kind in STATE_KINDS
        if not known:
            kind = infer_kind(table)
        rows = 0
        for key, value in table.items():
            kb = dumps(user_key(key))
            kg = assign_to_key_group(key, max_parallelism)
            keys.add(kb)
            if kind == "map" and isinstance(value, dict) and value:
                for uk, v in value.items():
                    kg_col.append(kg)
                    key_col.append(kb)
                    name_col.append(name)
                    uk_col.append(dumps(uk))
                    val_col.append(dumps(v))
                    rows += 1
            else:  # a whole value (an empty map is kept as one row with a null user key)
                kg_col.append(kg)
                key_col.append(kb)
                name_col.append(name)
                uk_col.append(None)
                val_col.append(dumps(value))
                rows += 1
        states[name] = {"kind": kind, "declared": known, "keys": len(table), "rows": rows}
        cls = sample_value_class(kind, table)
        if cls is not None:  # named tuples that later lose a field are restored by name
            states[name]["value_class"] = cls
    arrays = [
        pa.array(kg_col, pa.int32()),
        pa.array(key_col, pa.binary()),
        pa.array(name_col, pa.string()),
        pa.nulls(len(kg_col), pa.binary()),
        pa.array(uk_col, pa.binary()),
        pa.array(val_col, pa.binary()),
    ]
    return EncodedPart(pa.Table.from_arrays(arrays, schema=SCHEMA), len(keys), states)


def decode_rows(table: pa.Table, kinds: Mapping[str, str], key_groups: tuple[int, int] | None = None,
                uri: str = "(savepoint rows)", uid: str | None = None, load_value: Callable[[bytes], Any] = pickle.loads) -> dict[str, dict[Any, Any]]:
    """Canonical rows (of file ``uri``) back to ``{state name: {key: value}}``; only key groups
    ``first..last`` if given (rescaling). Values are unpickled with ``load_value`` (keys and map
    keys with ``pickle.loads``): a restore remaps named tuples whose fields changed
    (state/compatibility.py). A key or value that does not unpickle raises StateDecodeError
    naming ``uri``."""
    try:
        out = _decode_rows(table, kinds, key_groups, load_value)
    except StateMigrationError:
        raise
    except Exception as e:  # noqa: BLE001 - unpickling raises anything
        raise undecodable(uri, e, uid, "savepoint file") from e
    for name, values in out.items():  # a whole ListState value is a list, a MapState one a dict
        check_values(values.values(), kinds.get(name), uri, uid, name, "savepoint file")
    return out


def _decode_rows(table: pa.Table, kinds: Mapping[str, str], key_groups: tuple[int, int] | None, load_value: Callable[[bytes], Any]) -> dict[str, dict[Any, Any]]:
    if key_groups is not None:
        first, last = key_groups
        kg = table.column("key_group")
        table = table.filter(pc.and_(pc.greater_equal(kg, first), pc.less_equal(kg, last)))
    out: dict[str, dict[Any, Any]] = {}
    loads = pickle.loads
    names = table.column("state_name").to_pylist()
    key_col = table.column("key").to_pylist()
    uk_col = table.column("user_key").to_pylist()
    val_col = table.column("value").to_pylist()
    key_cache: dict[bytes, Any] = {}
    for name, kb, ukb, vb in zip(names, key_col, uk_col, val_col, strict=True):
        key = key_cache.get(kb)
        if key is None:
            key = key_cache[kb] = state_key(loads(kb))
        into = out.setdefault(name, {})
        kind = kinds.get(name, "value")
        if kind == "map" and ukb is not None:
            m = into.get(key)
            if m is None:
                m = into[key] = {}
            m[loads(ukb)] = load_value(vb)
        else:
            into[key] = load_value(vb)
    return out


def parquet_bytes(table: pa.Table) -> bytes:
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    return buf.getvalue()


def read_parquet(data: bytes, where: str) -> pa.Table:
    try:
        return pq.read_table(pa.BufferReader(data))
    except Exception as e:
        msg = f"savepoint file {where} is not a readable Parquet file ({type(e).__name__}: {e}); it is corrupt or truncated. Restore from another savepoint or checkpoint"
        raise CorruptStateError(msg, path=where) from e


# -- writing a savepoint -----------------------------------------------------------------------


@dataclass
class PartState:
    """What a savepoint holds for one operator and parallel instance."""

    index: int
    key_group_start: int
    key_group_end: int
    tables: dict[str, dict[Any, Any]]
    kinds: dict[str, str] = field(default_factory=dict)
    declared: bool = False


@dataclass
class OperatorSnapshot:
    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    parts: list[PartState]


def create_savepoint_dir(target: str, job_id: str, options: Mapping[str, Any] | None = None, directory_name: str | None = None) -> CheckpointStorageAccess:
    """A new, empty savepoint directory below ``target``; an existing one is refused, and so is a
    local ``target`` another user owns or can write (InsecurePathError; created if missing)."""
    root = CheckpointStorageAccess(target, options)
    root.check_trusted("savepoint directory", "state.savepoints.dir or the savepoint target", create=True)
    name = directory_name or savepoint_dir_name(job_id)
    if root.exists(name):
        msg = f"savepoint directory {root.uri(name)} already exists; choose another target directory"
        raise CheckpointError(msg)
    access = root.child(name)
    access.make_dirs()
    return access


def write_parts(savepoint_uri: str, options: Mapping[str, Any], uids: list[str], index: int, key_group_start: int, key_group_end: int, tables: Mapping[str, Mapping[str, Mapping[Any, Any]]], kinds: Mapping[str, Mapping[str, str]], schemas: Mapping[str, Mapping[str, dict]], max_parallelism: int) -> list[tuple[str, SubtaskState, dict[str, dict[str, Any]]]]:
    """Every operator's part (:func:`write_part`) of parallel instance ``index`` holding key groups
    ``key_group_start..key_group_end`` in the savepoint directory ``savepoint_uri`` (storage
    ``options``): ``[(uid, subtask entry, per-state counts)]``. What a savepoint's task writes on
    either runtime (a continuous subtask at the savepoint's barrier, a Spark state job between
    epochs); ``tables``, ``kinds``, ``schemas`` by uid."""
    access = CheckpointStorageAccess(savepoint_uri, options)
    out = []
    for uid in uids:
        sub, states = write_part(access, uid, index, key_group_start, key_group_end, tables.get(uid, {}), kinds.get(uid, {}),
                                 max_parallelism, declared=uid in kinds, schemas=schemas.get(uid))
        out.append((uid, sub, states))
    return out


def write_part(access: CheckpointStorageAccess, uid: str, index: int, key_group_start: int, key_group_end: int, tables: Mapping[str, Mapping[Any, Any]], kinds: Mapping[str, str], max_parallelism: int, declared: bool = False, schemas: Mapping[str, dict] | None = None) -> tuple[SubtaskState, dict[str, dict[str, Any]]]:
    """Write one operator's state of one parallel instance as a Parquet file (run by the task
    that holds the state); returns its subtask entry and per-state counts (and declared
    schemas) for ``_metadata``."""
    enc = encode_tables(tables, kinds, max_parallelism, declared)
    for name, schema in (schemas or {}).items():
        if name in enc.states and schema is not None:
            enc.states[name]["schema"] = schema
    h = write_savepoint_part(access, uid, index, parquet_bytes(enc.table), enc.table.num_rows)
    f = StateFile(h.path, h.size, CANONICAL, rows=h.rows, sha256=h.sha256)
    return SubtaskState(index, key_group_start, key_group_end, [f], enc.num_keys, h.size, h.size), enc.states


def assemble_operator(uid: str, name: str, parallelism: int, max_parallelism: int, parts: list[tuple[SubtaskState, dict[str, dict[str, Any]]]]) -> OperatorState | None:
    """An operator's ``_metadata`` entry from its parts; None if it holds no state at all."""
    if not any(states for _sub, states in parts):
        return None
    merged: dict[str, dict[str, Any]] = {}
    for _sub, states in parts:
        for sname, info in states.items():
            into = merged.setdefault(sname, {"kind": info["kind"], "declared": info["declared"], "keys": 0, "rows": 0})
            into["keys"] += info["keys"]
            into["rows"] += info["rows"]
            if info["declared"] and not into["declared"]:
                into["kind"], into["declared"] = info["kind"], True
            if info.get("schema") is not None:
                into.setdefault("schema", info["schema"])
            if info.get("value_class") is not None:
                into.setdefault("value_class", info["value_class"])
    subtasks = sorted((sub for sub, _ in parts), key=lambda sub: sub.index)
    return OperatorState(uid, name, parallelism, max_parallelism, CANONICAL, subtasks, merged)


def complete_savepoint(
    access: CheckpointStorageAccess,
    *,
    job_id: str,
    job_name: str,
    checkpoint_id: int,
    epoch: int,
    backend: str,
    operators: list[OperatorState],
    max_parallelism: int,
    trigger_time_ms: int,
    sources: list[SplitPosition] | None = None,
    sinks: dict[str, Any] | None = None,
    watermarks: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
    keyring: Keyring | None = None,
) -> str:
    """Write ``_metadata`` (atomically, last, signed with ``keyring``'s key: default this
    installation's): the savepoint exists from then on."""
    total = sum(sub.state_size for op in operators for sub in op.subtasks)
    meta = CheckpointMetadata(
        checkpoint_id=int(checkpoint_id),
        job_id=job_id,
        job_name=job_name,
        kind="savepoint",
        epoch=int(epoch),
        trigger_time_ms=trigger_time_ms,
        completed_time_ms=now_ms(),
        max_parallelism=max_parallelism,
        backend=backend,
        incremental=False,
        operators=operators,
        sources=list(sources or []),
        sinks=dict(sinks or {}),
        watermarks=dict(watermarks or {}),
        stats={"state_size": total, **(stats or {})},
    )
    write_metadata(access, "", meta, keyring)
    return access.uri()


NATIVE = "NATIVE"  # _metadata stats["savepoint_format"] of a native savepoint


def native_savepoint(checkpoint_uri: str, target: str, job_id: str, options: Mapping[str, Any] | None = None, keyring: Keyring | None = None) -> str:
    """A native savepoint (Flink's ``formatType: NATIVE``) from the completed FULL checkpoint at
    ``checkpoint_uri`` (its ``chk-<n>`` directory): every file its ``_metadata`` names (the
    backend's own files) copied into a new savepoint directory below ``target``, then
    ``_metadata`` as a savepoint marked NATIVE; self-contained, restored by ``-s`` as a
    checkpoint of the same backend is. FileNotFoundError/CheckpointError when the checkpoint is
    gone (retention removed it) before every file was copied; the incomplete savepoint is removed.
    The checkpoint's signature is verified (``keyring``) and every file checked against its
    SHA-256 as it is copied: the savepoint is signed anew, so it must not sign what others wrote."""
    keyring = keyring or default_keyring()
    chk = CheckpointStorageAccess(checkpoint_uri, options)
    meta = read_metadata(chk, "")
    keyring.verify(meta, chk.uri(METADATA_FILE))
    if meta.kind != "checkpoint":
        msg = f"{checkpoint_uri} is a {meta.kind}, not a checkpoint"
        raise CheckpointError(msg)
    job_dir = CheckpointStorageAccess(split_uri(chk.uri())[0], options)
    access = create_savepoint_dir(target, job_id, options)
    files = {f.path: f for f in meta.files()}
    try:
        for rel in sorted(meta.referenced_files()):
            copy_part(job_dir, access, rel, files[rel].size, files[rel].sha256)
        meta.kind = "savepoint"
        meta.completed_time_ms = now_ms()
        meta.stats = {**meta.stats, "savepoint_format": NATIVE, "from_checkpoint": meta.checkpoint_id}
        write_metadata(access, "", meta, keyring)
    except BaseException:
        discard_incomplete(access)
        raise
    return access.uri()


def discard_incomplete(access: CheckpointStorageAccess) -> None:
    try:
        access.delete("")
    except Exception:  # noqa: BLE001 - the original error matters
        log.warning("could not remove the incomplete savepoint %s", access.uri(), exc_info=True)


def write_savepoint(
    target: str,
    *,
    job_id: str,
    job_name: str,
    checkpoint_id: int,
    epoch: int,
    backend: str,
    operators: list[OperatorSnapshot],
    sources: list[SplitPosition] | None = None,
    sinks: dict[str, Any] | None = None,
    watermarks: dict[str, Any] | None = None,
    stats: dict[str, Any] | None = None,
    directory_name: str | None = None,
    options: Mapping[str, Any] | None = None,
) -> str:
    """Write a savepoint of state held in this process (the state writer) below ``target`` (any
    storage URI); returns the savepoint directory's URI. Data files first, ``_metadata`` last
    (atomically); on a failure the directory goes."""
    t0 = now_ms()
    access = create_savepoint_dir(target, job_id, options, directory_name)
    try:
        ops: list[OperatorState] = []
        for snap in operators:
            if not any(t for part in snap.parts for t in part.tables.values()):
                continue  # an operator without state has nothing to restore (and may be removed)
            parts = [
                write_part(access, snap.uid, part.index, part.key_group_start, part.key_group_end, part.tables, part.kinds, snap.max_parallelism, part.declared)
                for part in snap.parts
            ]
            op = assemble_operator(snap.uid, snap.name, snap.parallelism, snap.max_parallelism, parts)
            if op is not None:
                ops.append(op)
        return complete_savepoint(
            access, job_id=job_id, job_name=job_name, checkpoint_id=checkpoint_id, epoch=epoch, backend=backend,
            operators=ops, max_parallelism=max((o.max_parallelism for o in operators), default=128), trigger_time_ms=t0,
            sources=sources, sinks=sinks, watermarks=watermarks, stats=stats,
        )
    except BaseException:
        discard_incomplete(access)
        raise


# -- reading, checking, disposing --------------------------------------------------------------


def open_savepoint(path: str, options: Mapping[str, Any] | None = None) -> tuple[CheckpointStorageAccess, CheckpointMetadata]:
    """``(access of the directory, metadata)`` of a savepoint or checkpoint directory or its
    ``_metadata`` file; for a checkpoint the access is its job directory (what paths are relative to)."""
    text = str(path).rstrip("/")
    parent, name = split_uri(text)
    if name == METADATA_FILE:
        text = parent
    directory = CheckpointStorageAccess(text, options)
    if not directory.exists():
        msg = f"{directory.uri()} does not exist"
        raise CheckpointError(msg)
    meta = read_metadata(directory, "")
    if meta.kind == "checkpoint":
        return CheckpointStorageAccess(split_uri(directory.uri())[0], options), meta
    return directory, meta


def open_for_reading(path: str, options: Mapping[str, Any] | None, keyring: Keyring | None, what: str, setting: str) -> tuple[CheckpointStorageAccess, CheckpointMetadata]:
    """:func:`open_savepoint` for reading its state, which unpickles it: the directory must be
    safe from other users, and ``_metadata`` signed with a key of ``keyring`` (UntrustedStateError
    otherwise); every file read later is checked against the SHA-256 this verified ``_metadata`` records."""
    access, meta = open_savepoint(path, options)
    access.check_trusted(what, setting)
    where = access.uri(f"chk-{meta.checkpoint_id}/_metadata" if meta.kind == "checkpoint" else "_metadata")
    (keyring or default_keyring()).verify(meta, where)
    return access, meta


def read_canonical(access: CheckpointStorageAccess, f: StateFile, uid: str, data: bytes | None = None) -> pa.Table:
    """One canonical file, checked against its recorded size and checksum (before it is
    decoded), and its Parquet footer, schema and row count. CorruptStateError naming it otherwise."""
    where = access.uri(f.path)
    if data is None:
        data = access.read_bytes(f.path)
    return canonical_table(data, where, f.size, f.sha256, f.rows, uid)


def canonical_table(data: bytes, where: str, size: int | None, sha256: str | None, rows: int | None, uid: str | None = None) -> pa.Table:
    """The Parquet rows of a savepoint file's bytes, verified (size, SHA-256, schema, row count)."""
    check_bytes(data, size, sha256, where, uid, "savepoint file")
    table = read_parquet(data, where)
    if not table.schema.equals(SCHEMA):
        raise corrupt(where, f"has columns {table.schema.names}, not the savepoint format's {SCHEMA.names}", uid, "savepoint file")
    if rows is not None and table.num_rows != rows:
        raise corrupt(where, f"has {table.num_rows} rows, _metadata records {rows}", uid, "savepoint file")
    return table


def snapshot_kind(data: bytes) -> tuple[str, Any, set[str]]:
    """``(kind, checkpoint id, paths of the files it lists)`` of a ``_metadata`` file of any
    format version this code knows, without decoding any value (disposing needs no more). Its
    checksum must match if it has one (format version 2); CheckpointError otherwise."""
    try:
        d = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        msg = f"not valid UTF-8 JSON ({e})"
        raise CorruptStateError(msg) from e
    if not isinstance(d, dict) or d.get("format_version") not in (FORMAT_VERSION, *OLD_FORMAT_VERSIONS):
        msg = f"not flowpoint checkpoint metadata (format_version: {d.get('format_version') if isinstance(d, dict) else None!r})"
        raise CheckpointError(msg)
    if d["format_version"] == FORMAT_VERSION and d.get(CHECKSUM_FIELD) != metadata_checksum(d):
        msg = f"it does not match its {CHECKSUM_FIELD}"
        raise CorruptStateError(msg)
    files = {
        f["path"]
        for op in _items(d.get("operators"))
        for sub in _items(op.get("subtasks"))
        for f in _items(sub.get("files"))
        if isinstance(f.get("path"), str)
    }
    return str(d.get("kind")), d.get("checkpoint_id"), files


def _items(value: Any) -> list[dict]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def dispose_savepoint(path: str, options: Mapping[str, Any] | None = None) -> list[str]:
    """Delete a savepoint, after checking that it is one (``_metadata`` of kind savepoint;
    anything else is refused with an error naming the path): its ``_metadata`` first, then the
    files it lists, then the directory if that left it empty. Returns the URIs of what was left
    in place (files the savepoint does not list: they are not its to delete)."""
    text = str(path).rstrip("/")
    parent, name = split_uri(text)
    if name == METADATA_FILE:
        text = parent
    directory = CheckpointStorageAccess(text, options)
    if not directory.exists():
        msg = f"cannot dispose {directory.uri()}: it does not exist"
        raise CheckpointError(msg)
    if not directory.is_dir() or not directory.exists(METADATA_FILE):
        msg = f"refusing to dispose {directory.uri()}: it is not a savepoint directory (no {METADATA_FILE} in it)"
        raise CheckpointError(msg)
    directory.check_trusted("the savepoint directory to dispose", "the path given to savepoint -d")
    try:
        kind, checkpoint_id, listed = snapshot_kind(directory.read_bytes(METADATA_FILE))
    except CheckpointError as e:
        msg = f"refusing to dispose {directory.uri()}: its {METADATA_FILE} cannot be read ({e}); delete it by hand if it is a broken savepoint"
        raise CheckpointError(msg) from e
    if kind != "savepoint":
        msg = f"refusing to dispose {directory.uri()}: it is a {kind} (id {checkpoint_id}), not a savepoint; checkpoints are removed by retention"
        raise CheckpointError(msg)
    directory.delete(METADATA_FILE)  # first: a crash midway leaves no savepoint with missing files
    for rel in sorted(listed):
        with contextlib.suppress(CheckpointError):  # a path that is not plain and relative stays
            if directory.exists(rel) and not directory.is_dir(rel):
                directory.delete(rel)
    parents = {"/".join(r.split("/")[:i]) for r in listed for i in range(1, r.count("/") + 1)}  # every ancestor (a native savepoint's chk-<n>/..., shared/...)
    for rel in sorted(parents, key=len, reverse=True) + [""]:
        with contextlib.suppress(CheckpointError):
            directory.delete_empty_dir(rel)
    if not directory.exists():
        return []
    return [directory.uri(name) for name, _is_dir, _size in directory.list_dir()]


def describe(path: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """A summary of a savepoint or retained checkpoint (what ``flowpoint inspect`` prints):
    operators by uid with name, parallelism, max parallelism, states (kind, keys), bytes; sources.

    Safe on a file from anywhere: it reads ``_metadata`` (data, checked against its checksum)
    and unpickles nothing. Only a RocksDB checkpoint's key counts per state are not in
    ``_metadata``: they are counted in its files (verified first) from the keys' bytes."""
    access, meta = open_savepoint(path, options)
    operators = []
    for op in meta.operators:
        states = {n: {"kind": s.get("kind"), "keys": s.get("keys")} for n, s in sorted((op.states or {}).items())}
        if writes_native_files(op.backend):
            for n, count in sorted(count_native_keys(access, op).items()):
                states.setdefault(n, {"kind": None, "keys": None})["keys"] = count
        operators.append({
            "uid": op.uid,
            "name": op.name,
            "parallelism": op.parallelism,
            "max_parallelism": op.max_parallelism,
            "backend": op.backend,
            "states": states,
            "state_names": sorted(states),
            "keys": sum(s.num_keys for s in op.subtasks),
            "bytes": sum(s.state_size for s in op.subtasks),
        })
    sources: dict[str, dict[str, Any]] = {}
    for sp in meta.sources:
        s = sources.setdefault(sp.source_uid, {"uid": sp.source_uid, "splits": 0, "finished": 0})
        s["splits"] += 1
        s["finished"] += int(sp.finished)
    return {
        "path": access.uri() if meta.kind == "savepoint" else access.uri(f"chk-{meta.checkpoint_id}"),
        "kind": meta.kind,
        "checkpoint_id": meta.checkpoint_id,
        "job_id": meta.job_id,
        "job_name": meta.job_name,
        "epoch": meta.epoch,
        "runtime": meta.stats.get("runtime"),  # the runtime that wrote it (None: not recorded)
        "completed_time_ms": meta.completed_time_ms,
        "max_parallelism": meta.max_parallelism,
        "backend": meta.backend,
        "bytes": meta.state_size(),
        "operators": operators,
        "sources": list(sources.values()),
        "sinks": sorted(meta.sinks),
    }


def operator_kinds(op: OperatorState, declared_only: bool = False) -> dict[str, str]:
    return {n: s["kind"] for n, s in (op.states or {}).items() if s.get("kind") and (s.get("declared") or not declared_only)}


def load_operator_state(access: CheckpointStorageAccess, meta: CheckpointMetadata, uid: str) -> dict[str, dict[Any, Any]]:
    """All keyed state of operator ``uid``: ``{state name: {key: value}}``, from a savepoint or a
    retained checkpoint (HashMap snapshots or RocksDB files), read in this process."""
    op = require_operator(access, meta, uid)
    merged: dict[str, dict[Any, Any]] = {}
    for sub in op.subtasks:
        for name, table in load_subtask_state(access, op, sub).items():
            merged.setdefault(name, {}).update(table)
    return merged


def require_operator(access: CheckpointStorageAccess, meta: CheckpointMetadata, uid: str) -> OperatorState:
    op = meta.operator(uid)
    if op is None:
        msg = f"{meta.kind} {meta.checkpoint_id} at {access.uri()} has no state of operator uid {uid!r}; it has {sorted(o.uid for o in meta.operators)}"
        raise CheckpointError(msg)
    return op


def load_subtask_state(access: CheckpointStorageAccess, op: OperatorState, sub: SubtaskState) -> dict[str, dict[Any, Any]]:
    """One parallel instance's keyed state of operator ``op`` (run where the files are read:
    a Spark task of the state reader, or this process)."""
    merged: dict[str, dict[Any, Any]] = {}
    loads = restoring_loads(recorded_value_classes(op).values())  # named tuples whose class changed fields, by name
    if op.backend == CANONICAL:
        kinds = operator_kinds(op)
        for f in sub.files:
            for name, table in decode_rows(read_canonical(access, f, op.uid), kinds, None, access.uri(f.path), op.uid, loads).items():
                merged.setdefault(name, {}).update(table)
        return merged

    if writes_native_files(op.backend):
        with _native_db(access, op, sub) as b:
            return b.snapshot()

    kinds = operator_kinds(op)
    for f in sub.files:  # a full snapshot, then the changelog parts written after it (in order)
        uri = access.uri(f.path)
        data = check_bytes(access.read_bytes(f.path), f.size, f.sha256, uri, op.uid, "checkpoint file")
        payload = load_part(data, uri, op.uid, loads)
        check_tables(payload, f.kind == "changelog", uri, op.uid, kinds)
        apply_part(merged, f.kind == "changelog", payload)
    return merged


def recorded_value_classes(op: OperatorState) -> dict[str, dict]:
    """``{state name: {"namedtuple", "fields"}}`` as ``_metadata`` records it for operator ``op``."""
    return {n: s["value_class"] for n, s in (op.states or {}).items() if isinstance(s.get("value_class"), dict)}


def count_native_keys(access: CheckpointStorageAccess, op: OperatorState) -> dict[str, int]:
    """Keys per state name of a RocksDB checkpoint's operator, counted from the keys' bytes in
    its files (each verified against its checksum first); nothing is unpickled."""
    counts: dict[str, int] = {}
    for sub in op.subtasks:
        with _native_db(access, op, sub) as b:
            for name, n in b.keys_per_state().items():
                counts[name] = counts.get(name, 0) + n
    return counts


@contextlib.contextmanager
def _native_db(access: CheckpointStorageAccess, op: OperatorState, sub: SubtaskState) -> Iterator[Any]:
    """One parallel instance's RocksDB, restored from verified files into a temporary directory."""
    import os
    import shutil
    import tempfile

    tmp = tempfile.mkdtemp(prefix="flowpoint-inspect-")
    try:
        files = tuple((access.uri(f.path), f.local_name or f.path.rsplit("/", 1)[-1], f.size, f.sha256) for f in sub.files)
        path = os.path.join(tmp, f"db-{sub.index}")
        logs = restore_native(path, [RestoredFile(op.uid, access.uri(), sub.state_size, files=files)], access.options)
        b = RocksDBKeyedStateBackend(op.uid, path, op.max_parallelism)
        b.open()
        replay(b, logs)  # a changelog chain's parts (state.backend.changelog.enabled)
        b.remap_named_tuples(recorded_value_classes(op))
        try:
            yield b
        finally:
            b.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
