"""The ``_metadata`` file of a checkpoint or savepoint (docs/architecture.md, section 7).

JSON in UTF-8, indented so a person can read it, with ``"format_version": 2``. It is written
atomically and written last: a checkpoint is COMPLETE exactly when its ``_metadata`` exists,
parses, matches its own checksum and has a format version this code reads.

Every :class:`StateFile` path is relative to the directory the metadata is read against (for a
checkpoint the job's checkpoint directory: ``chk-7/op-0.pkl``, ``shared/<uuid>.sst``), never
absolute, so the directory can be moved or copied elsewhere and still restores. Every file
records its size and SHA-256, and ``metadata_sha256`` is the SHA-256 of the file's own
canonical form (:mod:`flowpoint.checkpoint.integrity`): a mismatch is a
:class:`~flowpoint.errors.CorruptStateError` naming the file.

Values are data (:mod:`flowpoint.checkpoint.values`): reading ``_metadata`` runs no code.
Source positions and statistics must be data; a sink's driver state and operator state that
are not data are kept pickled and opaque until a restore loads them.

Format version 1 (flowpoint before integrity checks: base64 pickles in source positions, no
checksums) is refused with a message saying so: flowpoint is pre-1.0 and keeps no reader for it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.integrity import CHECKSUM_FIELD, is_sha256, metadata_checksum
from flowpoint.checkpoint.signing import SIGNATURE_FIELD, default_keyring, signed_digest
from flowpoint.checkpoint.values import NotData, from_data, to_data, user_to_data
from flowpoint.errors import CheckpointError, CorruptStateError

if TYPE_CHECKING:
    from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
    from flowpoint.checkpoint.signing import Keyring

FORMAT_VERSION = 2
OLD_FORMAT_VERSIONS = (1,)
METADATA_FILE = "_metadata"
KINDS = ("checkpoint", "savepoint")
FILE_KINDS = ("full", "changelog", "sst", "private", "canonical")


def _data(value: Any, where: str) -> Any:
    try:
        return to_data(value, where)
    except NotData as e:
        msg = f"cannot store {e}: checkpoint metadata holds only data (None, bool, int, float, str, bytes, lists, tuples, dicts)"
        raise CheckpointError(msg) from e


def _user_map(values: dict[str, Any], where: str) -> dict[str, Any]:
    return {str(k): user_to_data(v, f"{where} {k!r}") for k, v in values.items()}


def _read_user_map(values: Any) -> dict[str, Any]:
    if not isinstance(values, dict):
        msg = f"expected an object, not {type(values).__name__}"
        raise CheckpointError(msg)
    return {str(k): from_data(v, user=True) for k, v in values.items()}


def _read_data_map(values: Any) -> dict[str, Any]:
    if not isinstance(values, dict):
        msg = f"expected an object, not {type(values).__name__}"
        raise CheckpointError(msg)
    return {str(k): from_data(v) for k, v in values.items()}


# -- the records -------------------------------------------------------------------------------


@dataclass
class StateFile:
    """One file of a checkpoint."""

    path: str  # relative: "chk-7/op-count-part-0.pkl" or "shared/<uuid>.sst"
    size: int
    # "full" (a whole snapshot), "changelog" (HashMap: the keys set and deleted since the part
    # before it in the subtask's list), "sst" (shared RocksDB file), "private" (MANIFEST,
    # CURRENT, OPTIONS, ...), "canonical" (savepoint Parquet rows)
    kind: str
    local_name: str | None = None  # the file's name inside the task's local DB directory (RocksDB restore)
    rows: int | None = None  # canonical files: the Parquet row count (checked against the footer on restore)
    sha256: str | None = None  # SHA-256 of the whole file (required; checked before a restore and by the task reading it)

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
    """The state of one parallel instance of an operator: a contiguous key-group range. A
    HashMap subtask's ``files`` are a full snapshot followed by the changelog parts written after
    it, in order (restore applies them in that order)."""

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
    position: Any  # data (Source.encode_position): the split's payload and start, and the position
    finished: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "source_uid": self.source_uid,
            "split_index": self.split_index,
            "split_id": self.split_id,
            "position": _data(self.position, f"the position of split {self.split_id!r} of source {self.source_uid!r}"),
            "finished": self.finished,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SplitPosition:
        return cls(str(d["source_uid"]), int(d["split_index"]), str(d["split_id"]), from_data(d["position"]), bool(d["finished"]))


@dataclass
class ChannelStateFile(StateFile):
    """An unaligned checkpoint's in-flight records written by one subtask (tasks/channel_state.py):
    ``stages`` are the head uids of the stages whose input it holds, ``writer`` the subtask."""

    stages: list[str] = field(default_factory=list)
    writer: str = ""

    def __init__(self, path: str, size: int, sha256: str | None, stages: list[str], writer: str) -> None:
        super().__init__(path, size, "channel", None, None, sha256)
        self.stages = list(stages)
        self.writer = writer

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "size": self.size, "sha256": self.sha256, "stages": list(self.stages), "writer": self.writer}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> ChannelStateFile:
        stages = d.get("stages", [])
        if not isinstance(stages, list) or not all(isinstance(x, str) for x in stages):
            msg = f"channel state file {d.get('path')!r}: 'stages' must be a list of operator uids"
            raise CheckpointError(msg)
        return cls(str(d["path"]), int(d["size"]), d.get("sha256"), stages, str(d.get("writer", "")))


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
    watermarks: dict[str, Any]  # "channels": {channel: [watermark, idle]}, "generators": {key: pickled state as bytes}, "operator_state": {...}
    stats: dict[str, Any]  # sync_ms, async_ms, state_size, incremental_size, tasks_acknowledged, ...
    format_version: int = FORMAT_VERSION
    # read from a file (not part of the JSON object): its ``metadata_hmac`` and the digest that
    # signature covers (checkpoint/signing.py); None for metadata built in this process
    signature: Any = field(default=None, repr=False, compare=False)
    signed_digest: bytes | None = field(default=None, repr=False, compare=False)
    # unaligned checkpoints: the records in flight at the cut (tasks/channel_state.py)
    channel_state: list[ChannelStateFile] = field(default_factory=list)

    # -- derived -------------------------------------------------------------------------------

    def files(self) -> list[StateFile]:
        return [f for op in self.operators for sub in op.subtasks for f in sub.files] + list(self.channel_state)

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
            "stats": {str(k): _data(v, f"statistic {k!r}") for k, v in self.stats.items()},
            "watermarks": _user_map(self.watermarks, "watermark state"),
            "sources": [s.to_dict() for s in self.sources],
            "sinks": _user_map(self.sinks, "the driver state of sink"),
            "operators": [op.to_dict() for op in self.operators],
        }
        if self.channel_state:
            d["channel_state"] = [f.to_dict() for f in self.channel_state]
        return d

    def to_json(self, keyring: Keyring | None = None) -> str:
        """The file's text: the JSON object signed with ``keyring``'s key (``metadata_hmac``;
        default: this installation's, checkpoint/signing.py), then ``metadata_sha256`` over its
        canonical form."""
        self.validate()
        d = self.to_dict()
        d[SIGNATURE_FIELD] = (keyring or default_keyring()).sign(d)
        d[CHECKSUM_FIELD] = metadata_checksum(d)
        return json.dumps(d, indent=1, ensure_ascii=False, allow_nan=False) + "\n"

    def to_bytes(self, keyring: Keyring | None = None) -> bytes:
        return self.to_json(keyring).encode("utf-8")

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> CheckpointMetadata:
        if not isinstance(d, dict):
            msg = f"checkpoint metadata must be a JSON object, not {type(d).__name__}"
            raise CheckpointError(msg)
        version = d.get("format_version")
        if version != FORMAT_VERSION:
            if isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION:
                msg = f"checkpoint metadata format version {version} was written by a newer flowpoint; this one reads version {FORMAT_VERSION}: upgrade flowpoint"
            elif version in OLD_FORMAT_VERSIONS:
                msg = (
                    f"checkpoint metadata format version {version} was written by an earlier flowpoint, before checkpoints "
                    f"carried checksums and kept source positions as data (pickles were run when it was read). flowpoint is "
                    f"pre-1.0 and does not read it: start the job without restoring, or restore it with the flowpoint that "
                    f"wrote it and take a new savepoint with this one (format version {FORMAT_VERSION})"
                )
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
                sinks=_read_user_map(d["sinks"]),
                watermarks=_read_user_map(d["watermarks"]),
                stats=_read_data_map(d["stats"]),
                format_version=version,
                channel_state=[ChannelStateFile.from_dict(f) for f in d.get("channel_state", [])],
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
        """Parse and check a ``_metadata`` file's content: CorruptStateError if it is not JSON or
        does not match its checksum, CheckpointError if it is of another format version or
        malformed. Runs no code (no unpickling)."""
        try:
            if isinstance(text, (bytes, bytearray, memoryview)):
                text = bytes(text).decode("utf-8")
            data = json.loads(text)
        except (UnicodeDecodeError, ValueError, RecursionError) as e:
            msg = f"checkpoint metadata is not valid UTF-8 JSON ({e}); the file is corrupt or truncated"
            raise CorruptStateError(msg) from e
        if not isinstance(data, dict):
            msg = f"checkpoint metadata must be a JSON object, not {type(data).__name__}; the file is corrupt"
            raise CorruptStateError(msg)
        claimed = data.get(CHECKSUM_FIELD)
        version = data.get("format_version")
        if claimed is None:
            old = version in OLD_FORMAT_VERSIONS or (isinstance(version, int) and not isinstance(version, bool) and version > FORMAT_VERSION)
            if not old:
                msg = f"checkpoint metadata has no {CHECKSUM_FIELD}; the file is corrupt or not written by flowpoint"
                raise CorruptStateError(msg)
        elif claimed != metadata_checksum(data):
            msg = f"checkpoint metadata does not match its {CHECKSUM_FIELD}: the file is corrupt or was changed"
            raise CorruptStateError(msg)

        meta = cls.from_dict({k: v for k, v in data.items() if k not in (CHECKSUM_FIELD, SIGNATURE_FIELD)})
        meta.signature = data.get(SIGNATURE_FIELD)
        meta.signed_digest = signed_digest(data)
        return meta

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
            if not is_sha256(f.sha256):
                msg = f"state file {p!r} of {self.kind} {self.checkpoint_id} has no SHA-256 checksum ({f.sha256!r}): every file must have one"
                raise CheckpointError(msg)


# -- files -------------------------------------------------------------------------------------


def metadata_path(rel_dir: str) -> str:
    rel_dir = rel_dir.strip("/")
    return f"{rel_dir}/{METADATA_FILE}" if rel_dir else METADATA_FILE


def write_metadata(access: CheckpointStorageAccess, rel_dir: str, metadata: CheckpointMetadata, keyring: Keyring | None = None) -> str:
    """Write ``<rel_dir>/_metadata`` atomically, signed with ``keyring``'s key (default: this
    installation's); returns its relative path."""
    rel = metadata_path(rel_dir)
    access.write_bytes(rel, metadata.to_bytes(keyring))
    return rel


def read_metadata(access: CheckpointStorageAccess, rel_dir: str) -> CheckpointMetadata:
    """The metadata in ``<rel_dir>/_metadata``; CheckpointError naming the file if it is missing,
    corrupt or of another format version. Its signature is not checked here (reading runs no
    code): a restore checks it (:meth:`flowpoint.checkpoint.signing.Keyring.verify`)."""
    rel = metadata_path(rel_dir)
    if not access.exists(rel):
        where = access.uri(rel_dir)
        msg = f"{access.uri(rel)} does not exist: {where} is not a completed checkpoint or savepoint (it may be still in progress, aborted, or deleted by retention)"
        raise CheckpointError(msg)
    data = access.read_bytes(rel)
    return parse_metadata(data, access.uri(rel))


def parse_metadata(data: bytes, uri: str) -> CheckpointMetadata:
    """:meth:`CheckpointMetadata.from_json` with errors naming the file ``uri``."""
    try:
        return CheckpointMetadata.from_json(data)
    except CorruptStateError as e:
        msg = f"{uri}: {e}; restore from another checkpoint or savepoint"
        raise CorruptStateError(msg, path=uri) from e
    except CheckpointError as e:
        msg = f"cannot use {uri}: {e}"
        raise CheckpointError(msg) from e
