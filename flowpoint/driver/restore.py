"""Restoring a job from a completed checkpoint: state by operator uid, source positions, sinks.

State maps to operators by ``uid``. A keyed operator's snapshot files carry the key-group range
they cover, so a job may restore with another parallelism (each new partition loads the files
whose range overlaps its own and keeps only its key groups), but never with another max
parallelism (the number of key groups), which is refused with both values. A savepoint's
canonical Parquet files (``OperatorState.backend == "canonical"``) restore the same way into
either backend.

Before anything runs, :func:`plan_restore` checks ``_metadata``'s signature (who wrote it:
checkpoint/signing.py; a checkpoint or savepoint of another installation, or one changed after it
was signed, is refused with UntrustedStateError unless trusted), then checks every file the restore will read against the
size and SHA-256 that ``_metadata`` records (``_metadata`` itself was checked against its own
checksum when it was read): a mismatch is a CorruptStateError naming the file, and the job
fails without starting a task or restarting. The tasks check each file again as they read it.

Source positions are data in ``_metadata`` (:meth:`Source.encode_position`); a sink's driver
state and operator state are user values, unpickled here only if the job stored them pickled.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.filesystem import CheckpointStorageAccess, read_uri_bytes
from flowpoint.checkpoint.metadata import CheckpointMetadata, SplitPosition
from flowpoint.checkpoint.parts import RestoredFile, can_restore_checkpoint, writes_native_files
from flowpoint.checkpoint.signing import Keyring, default_keyring
from flowpoint.checkpoint.values import NotData, load_user, to_data
from flowpoint.checkpoint.verification import verify_state_files
from flowpoint.errors import CheckpointError, SerializationError
from flowpoint.partition.committed_chain import CommittedChain
from flowpoint.state.compatibility import schema_json
from flowpoint.state.keygroups import key_group_range_for_operator
from flowpoint.tasks.channel_state import RestoredChannelFile

if TYPE_CHECKING:
    from collections.abc import Mapping

    from flowpoint.graph.jobgraph import JobGraph, Node


@dataclass
class RestoredJob:
    checkpoint_id: int
    epoch: int
    chains: dict[tuple[int, int], CommittedChain]
    positions: dict[tuple[str, int], tuple[Any, Any, bool]]  # (source uid, split index) -> (split, position, finished)
    sinks: dict[str, Any]
    records_read: int
    dropped_uids: list[str] = field(default_factory=list)
    watermarks: dict[str, Any] = field(default_factory=dict)  # see CheckpointMetadata.watermarks
    # an unaligned checkpoint's in-flight records: receiving stage head uid -> its files
    channel_state: dict[str, tuple] = field(default_factory=dict)


def split_position(node: Node, index: int, split: Any, position: Any, finished: bool) -> SplitPosition:
    """A source split's position for ``_metadata``, as data (:meth:`Source.encode_position`).
    A position that is not data fails the job (no restart can fix it) naming the source."""
    source = node.t.source
    try:
        data = source.encode_position(split, position)
        to_data(data, "position")
    except (NotData, TypeError) as e:
        msg = (
            f"source {node.describe()} (uid {node.uid!r}): the position of split {split.split_id!r} cannot be stored in a "
            f"checkpoint: {e}. Checkpoint metadata holds only data (None, bool, int, float, str, bytes, lists, tuples, "
            f"dicts), never pickles: keep split payloads and positions to those, or override "
            f"{type(source).__qualname__}.encode_position and decode_position to convert them"
        )
        raise SerializationError(msg) from e
    return SplitPosition(node.uid, index, split.split_id, data, finished)


def _decode_position(node: Node, sp: SplitPosition, where: str) -> tuple[Any, Any]:
    try:
        return node.t.source.decode_position(sp.split_id, sp.position)
    except Exception as e:
        msg = (
            f"{where}: the position of split {sp.split_id!r} of source uid {sp.source_uid!r} cannot be read by "
            f"{type(node.t.source).__qualname__}.decode_position ({type(e).__name__}: {e}); the source's position "
            "format changed: restore with the source that wrote it, or allow dropping the source's positions by giving it a new uid"
        )
        raise CheckpointError(msg) from e


def plan_restore(meta: CheckpointMetadata, job_dir_uri: str, graph: JobGraph, backend: str, allow_non_restored: bool = False, options: Mapping[str, Any] | None = None, keyring: Keyring | None = None) -> RestoredJob:
    """Check who wrote the checkpoint (``_metadata``'s signature, ``keyring``: default this
    installation's key; UntrustedStateError naming the file), map it onto ``graph``, then verify
    every file the restore reads (size and SHA-256, streamed on this driver; CorruptStateError
    naming the first bad file), all before anything is decoded and any task starts. Errors name
    the uid, the file or the setting and say what to do."""
    metadata_uri = job_dir_uri.rstrip("/") + (f"/chk-{meta.checkpoint_id}" if meta.kind == "checkpoint" else "") + "/_metadata"
    (keyring or default_keyring()).verify(meta, metadata_uri)
    where = f"checkpoint {meta.checkpoint_id} of job {meta.job_name!r} ({job_dir_uri})"
    by_uid = {n.uid: n for n in graph.nodes.values()}
    chains: dict[tuple[int, int], list[RestoredFile]] = {}
    dropped: list[str] = []
    native = [op for op in meta.operators if op.backend != "canonical"]
    if native and not can_restore_checkpoint(meta.backend, backend):
        msg = (
            f"{where} was written by the {meta.backend} state backend and cannot be restored into {backend}: "
            f"its files are in {meta.backend}'s native format. Restore with state.backend.type: {meta.backend}, "
            "or take a savepoint (the portable format) and restore from that"
        )
        raise CheckpointError(msg)
    for op in meta.operators:
        node = by_uid.get(op.uid)
        if node is None or not node.keyed:
            if allow_non_restored:
                dropped.append(op.uid)
                continue
            what = "no operator with this uid" if node is None else f"operator {node.name!r} with this uid keeps no keyed state"
            msg = (
                f"{where} holds state of operator uid {op.uid!r} ({op.name}), but the job has {what}. "
                "Give the operator its old uid, or allow dropping that state (--allow-non-restored-state)"
            )
            raise CheckpointError(msg)
        if op.max_parallelism != node.max_parallelism:
            msg = (
                f"{where}: operator uid {op.uid!r} was checkpointed with max parallelism {op.max_parallelism}, "
                f"the job now has {node.max_parallelism}. The max parallelism (number of key groups) cannot change "
                f"across a restore: set_max_parallelism({op.max_parallelism}) on the operator or the environment"
            )
            raise CheckpointError(msg)
        stage = graph.stages[node.stage_id]
        base = job_dir_uri.rstrip("/")
        if op.backend == "canonical":
            _plan_canonical(op, base, stage, meta.epoch, chains)
            continue
        if writes_native_files(op.backend):
            _plan_native(op, base, stage, meta.epoch, chains, where)
        else:
            _plan_heap(op, base, stage, meta.epoch, chains)
    positions = _positions(meta, graph, where, allow_non_restored, dropped)
    verify_state_files(CheckpointStorageAccess(job_dir_uri, options), meta)
    restored_chains = {k: CommittedChain(last_epoch=meta.epoch, restored=tuple(v)) for k, v in chains.items()}
    sinks = {k: load_user(v, metadata_uri, f"the driver state of sink uid {k!r} in") for k, v in meta.sinks.items()}
    watermarks = {k: load_user(v, metadata_uri, f"the {k} state in") for k, v in meta.watermarks.items()}
    return RestoredJob(
        meta.checkpoint_id, meta.epoch, restored_chains, positions, sinks,
        int(meta.stats.get("records_read", 0)), sorted(set(dropped)), watermarks,
        _channel_state(meta, job_dir_uri.rstrip("/"), graph, where, allow_non_restored),
    )


def _plan_native(op: Any, base: str, stage: Any, epoch: int, chains: dict, where: str) -> None:
    """A RocksDB operator's files: each subtask's DB (and changelog) to the partition of the same
    index; a RocksDB checkpoint restores only at its own parallelism."""
    if op.parallelism != stage.parallelism:
        msg = (
            f"{where}: operator uid {op.uid!r} was checkpointed by RocksDB with parallelism {op.parallelism}, "
            f"the job now runs it with {stage.parallelism}. Restore a RocksDB checkpoint with its own parallelism "
            f"(-p {op.parallelism}), or rescale through a savepoint"
        )
        raise CheckpointError(msg)
    kinds, declared, schemas, classes = _recorded_kinds(op)
    for sub in op.subtasks:
        files = tuple((f"{base}/{f.path}", f.local_name or f.path.rsplit("/", 1)[-1], f.size, f.sha256) for f in sub.files)
        chains.setdefault((stage.id, sub.index), []).append(RestoredFile(op.uid, base, sub.state_size, files=files, epoch=epoch, kinds=kinds, declared=declared, schemas=schemas, value_classes=classes))


def _plan_heap(op: Any, base: str, stage: Any, epoch: int, chains: dict) -> None:
    """A HashMap operator's parts: each new partition reads every part whose key groups overlap
    its own, filtered to its key groups unless the part lies wholly inside them (any parallelism)."""
    kinds, declared, schemas, classes = _recorded_kinds(op)
    for p in range(stage.parallelism):
        mine = key_group_range_for_operator(stage.max_parallelism, stage.parallelism, p)
        for sub in op.subtasks:
            if sub.key_group_end < mine.start or sub.key_group_start > mine.end:
                continue
            whole = mine.start <= sub.key_group_start and sub.key_group_end <= mine.end
            for f in sub.files:  # a full snapshot, then the changelog parts after it, applied in order
                uri = f"{base}/{f.path}"
                kg = None if whole else (mine.start, mine.end, stage.max_parallelism)
                # driver-memory storage (JobManagerCheckpointStorage) is invisible to executors: ship the bytes
                data = read_uri_bytes(uri) if uri.startswith("memory://") else None
                fmt = "changelog" if f.kind == "changelog" else "pickle"
                chains.setdefault((stage.id, p), []).append(
                    RestoredFile(op.uid, uri, f.size, kg, data, epoch=epoch, format=fmt, kinds=kinds, declared=declared, schemas=schemas, value_classes=classes, sha256=f.sha256)
                )


def _positions(meta: CheckpointMetadata, graph: JobGraph, where: str, allow_non_restored: bool, dropped: list[str]) -> dict[tuple[str, int], tuple[Any, Any, bool]]:
    """Each source split's restored ``(split, position, finished)``; a source uid the job lacks is
    refused, or with ``allow_non_restored`` added to ``dropped``."""
    positions: dict[tuple[str, int], tuple[Any, Any, bool]] = {}
    sources = {n.uid: n for n in graph.sources()}
    for sp in meta.sources:
        if sp.source_uid not in sources:
            if allow_non_restored:
                dropped.append(sp.source_uid)
                continue
            msg = (
                f"{where} holds the read positions of source uid {sp.source_uid!r}, but the job has no source with "
                "this uid. Give the source its old uid, or allow dropping that state (--allow-non-restored-state)"
            )
            raise CheckpointError(msg)
        split, position = _decode_position(sources[sp.source_uid], sp, where)
        positions[(sp.source_uid, sp.split_index)] = (split, position, sp.finished)
    return positions


def _channel_state(meta: CheckpointMetadata, base: str, graph: JobGraph, where: str, allow_non_restored: bool) -> dict[str, tuple]:
    """Each receiving stage's channel state files (unaligned checkpoints: tasks/channel_state.py)."""
    heads = {graph.nodes[s.head].uid for s in graph.stages}
    out: dict[str, list] = {}
    for f in meta.channel_state:
        uri = f"{base}/{f.path}"
        data = read_uri_bytes(uri) if uri.startswith("memory://") else None
        for uid in f.stages:
            if uid not in heads:
                if allow_non_restored:
                    continue
                msg = (
                    f"{where} holds records in flight to operator uid {uid!r} (an unaligned checkpoint's channel state), "
                    f"which this job has no stage starting with. Give the operator its old uid, or allow dropping those "
                    f"records (--allow-non-restored-state)"
                )
                raise CheckpointError(msg)
            out.setdefault(uid, []).append(RestoredChannelFile(uri, f.size, f.sha256 or "", data, f.writer or ""))
    return {uid: tuple(files) for uid, files in out.items()}


def _recorded_kinds(op: Any) -> tuple[tuple[tuple[str, str], ...], tuple[str, ...], tuple[tuple[str, str], ...], tuple[tuple[str, str], ...]]:
    """``((state name, kind), ...)``, the declared names, ``((state name, schema JSON), ...)`` and
    ``((state name, value class JSON), ...)`` as ``_metadata`` records them (state/compatibility.py
    checks them when a task registers; the value classes remap named tuples when unpickled)."""
    states = op.states or {}
    kinds = tuple(sorted((n, s["kind"]) for n, s in states.items() if s.get("kind")))
    declared = tuple(sorted(n for n, s in states.items() if s.get("declared")))
    schemas = tuple(sorted((n, schema_json(s["schema"])) for n, s in states.items() if s.get("schema")))
    classes = tuple(sorted((n, schema_json(s["value_class"])) for n, s in states.items() if isinstance(s.get("value_class"), dict)))
    return kinds, declared, schemas, classes


def _plan_canonical(op: Any, base: str, stage: Any, epoch: int, chains: dict[tuple[int, int], list[RestoredFile]]) -> None:
    """Savepoint rows: every new partition reads the files overlapping its key-group range and
    keeps its own key groups (any parallelism up to the max parallelism, either backend)."""
    kinds, declared, schemas, classes = _recorded_kinds(op)
    for p in range(stage.parallelism):
        mine = key_group_range_for_operator(stage.max_parallelism, stage.parallelism, p)
        for sub in op.subtasks:
            if sub.key_group_end < mine.start or sub.key_group_start > mine.end:
                continue
            whole = mine.start <= sub.key_group_start and sub.key_group_end <= mine.end
            for f in sub.files:
                uri = f"{base}/{f.path}"
                kg = None if whole else (mine.start, mine.end, stage.max_parallelism)
                data = read_uri_bytes(uri) if uri.startswith("memory://") else None
                chains.setdefault((stage.id, p), []).append(
                    RestoredFile(op.uid, uri, f.size, kg, data, epoch=epoch, format="canonical", kinds=kinds, declared=declared, schemas=schemas, value_classes=classes, sha256=f.sha256, rows=f.rows)
                )
