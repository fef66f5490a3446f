"""The ``_metadata`` file of a checkpoint or savepoint (DESIGN section 7).

JSON in UTF-8, indented so a person can read it, with ``"format_version": 1``. It is written
atomically and written last: a checkpoint is COMPLETE exactly when its ``_metadata`` exists and
parses with a format version this code reads.

Every :class:`StateFile` path is relative to the directory the metadata is read against (for a
checkpoint the job's checkpoint directory: ``chk-7/op-0.pkl``, ``shared/<uuid>.sst``), never
absolute, so the directory can be moved or copied elsewhere and still restores.

Values that JSON cannot hold exactly (source positions, pending sink transactions, tuples,
objects) are stored as ``{"__pickle__": "<base64 of a cloudpickle>"}`` and come back equal.
"""

from __future__ import annotations

import base64
import json
import math
import pickle
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowpoint.errors import CheckpointError

if TYPE_CHECKING:
    from flowpoint.checkpoint.storage import CheckpointStorageAccess

FORMAT_VERSION = 1
METADATA_FILE = "_metadata"
PICKLE_KEY = "__pickle__"
KINDS = ("checkpoint", "savepoint")
FILE_KINDS = ("full", "sst", "private", "canonical")


# -- values: JSON when exact, pickled otherwise ------------------------------------------------


def _plain(value: Any) -> bool:
    """True if ``value`` survives a JSON round trip unchanged (types included)."""
    t = type(value)
    if value is None or t in (bool, int, str):
        return True
    if t is float:
        return math.isfinite(value)
    if t is list:
        return all(_plain(v) for v in value)
    if t is dict:
        if PICKLE_KEY in value:
            return False
        return all(type(k) is str and _plain(v) for k, v in value.items())
    return False


def encode_value(value: Any) -> Any:
    """``value`` itself if JSON holds it exactly, else ``{"__pickle__": base64}``."""
    if _plain(value):
        return value
    import cloudpickle

    try:
        data = cloudpickle.dumps(value, protocol=pickle.DEFAULT_PROTOCOL)
    except Exception as e:
        msg = f"cannot store {type(value).__name__} value {value!r:.200} in checkpoint metadata: it is neither JSON nor picklable ({e})"
        raise CheckpointError(msg) from e
    return {PICKLE_KEY: base64.b64encode(data).decode("ascii")}


def decode_value(value: Any) -> Any:
    if type(value) is dict and PICKLE_KEY in value:
        if len(value) != 1 or not isinstance(value[PICKLE_KEY], str):
            msg = f"malformed pickled value in checkpoint metadata: {value!r:.200}"
            raise CheckpointError(msg)
        return pickle.loads(base64.b64decode(value[PICKLE_KEY]))  # noqa: S301 - our own checkpoint files
    return value


def _encode_map(values: dict[str, Any]) -> dict[str, Any]:
    return {str(k): encode_value(v) for k, v in values.items()}


def _decode_map(values: dict[str, Any]) -> dict[str, Any]:
    return {k: decode_value(v) for k, v in values.items()}


# -- the records -------------------------------------------------------------------------------


@dataclass
class StateFile:
    """One file of a checkpoint."""

    path: str  # relative: "chk-7/op-count-part-0.pkl" or "shared/<uuid>.sst"
    size: int
    kind: str  # "full" (a whole snapshot), "sst" (shared RocksDB file), "private" (MANIFEST, CURRENT, OPTIONS, ...), "canonical" (savepoint Parquet rows)
    local_name: str | None = None  # the file's name inside the task's local DB directory (RocksDB restore)
    rows: int | None = None  # canonical files: the Parquet row count (checked against the footer on restore)
    sha256: str | None = None  # canonical files: checksum of the whole file (checked on restore)

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"path": self.path, "size": self.size, "kind": self.kind}
        if self.local_name is not None:
            d["local_name"] = self.local_name
        if self.rows is not None:
            d["rows"] = self.rows
        if self.sha256 is not None:
            d["sha256"] = self.sha256
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> StateFile:
        rows = d.get("rows")
        return cls(str(d["path"]), int(d["size"]), str(d["kind"]), d.get("local_name"), None if rows is None else int(rows), d.get("sha256"))


@dataclass
class SubtaskState:
    """The state of one parallel instance of an operator: a contiguous key-group range."""

    index: int
    key_group_start: int
    key_group_end: int  # inclusive
    files: list[StateFile]
    num_keys: int
    state_size: int  # bytes of all files
    incremental_size: int  # bytes of the files this checkpoint uploaded

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "key_group_start": self.key_group_start,
            "key_group_end": self.key_group_end,
            "num_keys": self.num_keys,
            "state_size": self.state_size,
            "incremental_size": self.incremental_size,
            "files": [f.to_dict() for f in self.files],
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SubtaskState:
        return cls(
            int(d["index"]), int(d["key_group_start"]), int(d["key_group_end"]),
            [StateFile.from_dict(f) for f in d["files"]],
            int(d["num_keys"]), int(d["state_size"]), int(d["incremental_size"]),
        )


@dataclass
class OperatorState:
    """The state of one operator, found again on restore by its ``uid``."""

    uid: str
    name: str
    parallelism: int
    max_parallelism: int
    backend: str  # "hashmap" | "rocksdb" | "canonical" (savepoint: Parquet rows, any backend)
    subtasks: list[SubtaskState]
    # canonical: per state name {"kind": value|list|map|reducing|aggregating, "declared": bool, "keys": n, "rows": n}
    states: dict[str, dict[str, Any]] | None = None

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {
            "uid": self.uid,
            "name": self.name,
            "parallelism": self.parallelism,
            "max_parallelism": self.max_parallelism,
            "backend": self.backend,
            "subtasks": [s.to_dict() for s in self.subtasks],
        }
        if self.states is not None:
            d["states"] = self.states
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> OperatorState:
        states = d.get("states")
        return cls(
            str(d["uid"]), str(d["name"]), int(d["parallelism"]), int(d["max_parallelism"]), str(d["backend"]),
            [SubtaskState.from_dict(s) for s in d["subtasks"]],
            None if states is None else {str(k): dict(v) for k, v in states.items()},
        )


@dataclass
class SplitPosition:
    """Where a source split was at the checkpoint's cut."""

    source_uid: str
    split_index: int
    split_id: str
    position: Any  # a JSON value, or anything picklable
    finished: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_uid": self.source_uid,
            "split_index": self.split_index,
            "split_id": self.split_id,
            "position": encode_value(self.position),
            "finished": self.finished,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplitPosition:
        return cls(str(d["source_uid"]), int(d["split_index"]), str(d["split_id"]), decode_value(d["position"]), bool(d["finished"]))


@dataclass
class CheckpointMetadata:
    """Everything a restore needs, and what the ``flowpoint checkpoints`` listing shows."""

    checkpoint_id: int
    job_id: str
    job_name: str
    kind: str  # "checkpoint" | "savepoint"
    epoch: int  # the epoch the checkpoint's cut follows
    trigger_time_ms: int
    completed_time_ms: int
    max_parallelism: int
    backend: str
    incremental: bool
    operators: list[OperatorState]
    sources: list[SplitPosition]
    sinks: dict[str, Any]  # pending sink transactions per sink uid
    watermarks: dict[str, Any]  # "channels": {channel: [watermark, idle]}, "generators": {key: pickled state}
    stats: dict[str, Any]  # sync_ms, async_ms, state_size, incremental_size, tasks_acknowledged, ...
    format_version: int = FORMAT_VERSION

    # -- derived -------------------------------------------------------------------------------

    def files(self) -> list[StateFile]:
        return [f for op in self.operators for sub in op.subtasks for f in sub.files]

    def referenced_files(self) -> set[str]:
        """The relative paths of every file this checkpoint needs."""
        return {f.path for f in self.files()}

    def state_size(self) -> int:
        """Bytes of all files the checkpoint needs (shared ones included), without ``_metadata``."""
        sizes: dict[str, int] = {}
        for f in self.files():
            sizes[f.path] = f.size
        return sum(sizes.values())

    def operator(self, uid: str) -> OperatorState | None:
        return next((op for op in self.operators if op.uid == uid), None)

    # -- JSON ----------------------------------------------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        d = {
            "format_version": self.format_version,
            "kind": self.kind,
            "checkpoint_id": self.checkpoint_id,
            "job_id": self.job_id,
            "job_name": self.job_name,
            "epoch": self.epoch,
            "trigger_time_ms": self.trigger_time_ms,
            "completed_time_ms": self.completed_time_ms,
            "max_parallelism": self.max_parallelism,
            "backend": self.backend,
            "incremental": self.incremental,
            "stats": _encode_map(self.stats),
            "watermarks": _encode_map(self.watermarks),
            "sources": [s.to_dict() for s in self.sources],
            "sinks": _encode_map(self.sinks),
            "operators": [op.to_dict() for op in self.operators],
        }
        return d

    def to_json(self) -> str:
        self.validate()
        return json.dumps(self.to_dict(), indent=1, ensure_ascii=False, allow_nan=False) + "\n"

    def to_bytes(self) -> bytes:
        return self.to_json().encode("utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckpointMetadata:
        if not isinstance(d, dict):
            msg = f"checkpoint metadata must be a JSON object, not {type(d).__name__}"
            raise CheckpointError(msg)
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
                msg = f"checkpoint metadata format version {version} was written by a newer flowpoint; this one reads version {FORMAT_VERSION}: upgrade flowpoint"
            else:
                msg = f"not flowpoint checkpoint metadata of format version {FORMAT_VERSION} (format_version: {version!r})"
            raise CheckpointError(msg)
        try:
            meta = cls(
                checkpoint_id=int(d["checkpoint_id"]),
                job_id=str(d["job_id"]),
                job_name=str(d["job_name"]),
                kind=str(d["kind"]),
                epoch=int(d["epoch"]),
                trigger_time_ms=int(d["trigger_time_ms"]),
                completed_time_ms=int(d["completed_time_ms"]),
                max_parallelism=int(d["max_parallelism"]),
                backend=str(d["backend"]),
                incremental=bool(d["incremental"]),
                operators=[OperatorState.from_dict(op) for op in d["operators"]],
                sources=[SplitPosition.from_dict(s) for s in d["sources"]],
                sinks=_decode_map(d["sinks"]),
                watermarks=_decode_map(d["watermarks"]),
                stats=_decode_map(d["stats"]),
                format_version=version,
            )
        except CheckpointError:
            raise
        except KeyError as e:
            msg = f"checkpoint metadata lacks the field {e.args[0]!r}"
            raise CheckpointError(msg) from e
        except Exception as e:
            msg = f"checkpoint metadata is malformed: {type(e).__name__}: {e}"
            raise CheckpointError(msg) from e
        meta.validate()
        return meta

    @classmethod
    def from_json(cls, text: str | bytes) -> CheckpointMetadata:
        try:
            if isinstance(text, (bytes, bytearray, memoryview)):
                text = bytes(text).decode("utf-8")
            data = json.loads(text)
        except (UnicodeDecodeError, ValueError) as e:
            msg = f"checkpoint metadata is not valid UTF-8 JSON ({e}); the file is corrupt or truncated"
            raise CheckpointError(msg) from e
        return cls.from_dict(data)

    def validate(self) -> None:
        """Refuse metadata that could not be restored (wrong kind, absolute or escaping paths)."""
        if self.kind not in KINDS:
            msg = f"checkpoint metadata kind must be one of {KINDS}, not {self.kind!r}"
            raise CheckpointError(msg)
        for f in self.files():
            p = f.path
            if not p or p.startswith("/") or "://" in p or ".." in p.split("/") or "\\" in p:
                msg = f"state file path {p!r} of checkpoint {self.checkpoint_id} must be relative to the checkpoint directory (no '/', '..' or scheme)"
                raise CheckpointError(msg)


# -- files -------------------------------------------------------------------------------------


def metadata_path(rel_dir: str) -> str:
    rel_dir = rel_dir.strip("/")
    return f"{rel_dir}/{METADATA_FILE}" if rel_dir else METADATA_FILE


def write_metadata(access: CheckpointStorageAccess, rel_dir: str, metadata: CheckpointMetadata) -> str:
    """Write ``<rel_dir>/_metadata`` atomically; returns its relative path."""
    rel = metadata_path(rel_dir)
    access.write_bytes(rel, metadata.to_bytes())
    return rel


def read_metadata(access: CheckpointStorageAccess, rel_dir: str) -> CheckpointMetadata:
    """The metadata in ``<rel_dir>/_metadata``; CheckpointError naming the file if it is missing,
    corrupt or of another format version."""
    rel = metadata_path(rel_dir)
    if not access.exists(rel):
        where = access.uri(rel_dir)
        msg = f"{access.uri(rel)} does not exist: {where} is not a completed checkpoint or savepoint (it may be still in progress, aborted, or deleted by retention)"
        raise CheckpointError(msg)
    data = access.read_bytes(rel)
    try:
        return CheckpointMetadata.from_json(data)
    except CheckpointError as e:
        msg = f"cannot use {access.uri(rel)}: {e}"
        raise CheckpointError(msg) from e
