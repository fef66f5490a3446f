"""Channel state of unaligned checkpoints (docs/architecture.md, section 4b; docs/checkpoints.md,
"Unaligned checkpoints").

At an unaligned barrier a subtask snapshots at once; the records still in flight at that cut
are part of the checkpoint, as in Flink: the frames its barrier overtook in the receiver's
queues and those that reached a channel before that channel's barrier (*input* channel state),
and the frames the sender had not sent yet (*output* channel state). A subtask writes all of it
into one file of the checkpoint, ``chk-<n>/channel-<stage>-<partition>.pkl``: a pickled list of
``(receiving stage's head uid, that stage's parallelism, receiving partition, items)``, where
``items`` are exchange items exactly as a receiver gets them (``(edge index, origin, blob)``).
Its size and SHA-256 are in ``_metadata`` like every state file, so a restore checks them before
it unpickles anything (checkpoint/integrity.py).

On restore, each subtask first feeds the channel state meant for it, then reads its channels:
at the same parallelism, the items its own partition was to receive; at another, each record
goes where the edge sends it now (a keyed edge: the owner of its key group; a broadcast edge: a
copy of one old receiver's; other edges: old partition ``i`` to new ``i mod parallelism``).
A restored subtask starts from the watermarks it had seen at the cut (``TaskAck.input_marks``,
kept in ``_metadata``'s event time), which the in-flight records came after; the watermark items
among them are replayed in place while the channels are the same as at the cut (dropped after
a rescale, where an old upstream partition's channel would hold a receiver's watermark back
for ever, and the start is the stage's lowest seen mark); then it moves on to the marks its
senders had sent, the checkpoint's.
"""

from __future__ import annotations

import pickle
import time
from dataclasses import dataclass
from typing import Any

from flowpoint.api.time import MIN_WATERMARK
from flowpoint.checkpoint.filesystem import read_uri_bytes
from flowpoint.checkpoint.integrity import check_bytes
from flowpoint.checkpoint.integrity import decode as decode_file
from flowpoint.checkpoint.part_writer import CheckpointParts, CheckpointTarget, PartHandle
from flowpoint.state.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from flowpoint.tasks.batches import KeyedBatch, decode, encode
from flowpoint.tasks.stage_task import input_channels


@dataclass(frozen=True)
class ChannelStatePart:
    """One subtask's channel state file of one checkpoint, and which stages' inputs it holds."""

    handle: PartHandle
    stages: tuple[str, ...]  # receiving stages' head uids
    writer: str  # "<stage head uid>:<partition>" of the subtask that wrote it
    items: int = 0
    ms: float = 0.0


@dataclass(frozen=True)
class RestoredChannelFile:
    """A channel state file a restored subtask reads (size and SHA-256 checked first)."""

    uri: str
    size: int
    sha256: str
    data: bytes | None = None  # driver-memory storage: the bytes themselves
    writer: str = ""  # "<stage head uid>:<partition>" of the subtask that wrote it


Entry = tuple[str, int, int, list]  # (receiving stage head uid, its parallelism, receiving partition, items)


def data_items(frames: Any) -> list:
    """The exchange items of a channel's frames (``("data", items)``; barriers and ends carry none)."""
    out: list = []
    for frame in frames:
        if frame and frame[0] == "data":
            out.extend(frame[1])
    return out


def write_channel_state(entries: list[Entry], target: CheckpointTarget, options: Any, writer: str, partition_name: str) -> ChannelStatePart | None:
    """Write one subtask's channel state into the checkpoint; None when nothing was in flight."""
    entries = [e for e in entries if e[3]]
    if not entries:
        return None
    t0 = time.perf_counter()
    handle = CheckpointParts(target, options).channel_state(partition_name, pickle.dumps(entries, protocol=5))
    stages = tuple(sorted({e[0] for e in entries}))
    return ChannelStatePart(handle, stages, writer, sum(len(e[3]) for e in entries), (time.perf_counter() - t0) * 1000)


def read_channel_state(plan: Any, partition: int, files: tuple[RestoredChannelFile, ...], options: Any, keep_marks: bool = False) -> list:
    """The recorded in-flight items this subtask receives, routed for its parallelism, each
    channel's in the order they were sent: the receivers' recorded frames (sent first), then the
    senders' unsent ones. Watermark items stay in place when ``keep_marks`` (the channels are the
    same as at the cut)."""
    out: list = []
    uid = plan.head_uid
    for f in sorted(files, key=lambda f: not f.writer.startswith(f"{uid}:")):
        data = f.data if f.data is not None else read_uri_bytes(f.uri, dict(options or {}))
        check_bytes(data, f.size, f.sha256, f.uri, uid, "channel state file")
        entries = decode_file(pickle.loads, data, f.uri, uid, "channel state file")
        for stage_uid, old_parallelism, old_partition, items in entries:
            if stage_uid != uid:
                continue
            out.extend(_routed(plan, partition, int(old_parallelism), int(old_partition), items, keep_marks))
    return out


def restored_input(plan: Any, s: Any, spec: Any) -> tuple[list, dict, dict]:
    """A restored continuous subtask's start (slice ``s``, run ``spec``): ``(the in-flight items
    it receives, the watermarks to start from, the marks to move on to after them)``. Without
    channel state: no items, the run's watermarks, no marks."""
    watermarks = dict(spec.watermarks)
    if not s.channel_state:
        return [], watermarks, {}
    recovered = read_channel_state(plan, s.partition, s.channel_state, spec.location.options, keep_marks="*" not in s.input_marks)
    # the records in flight came after the marks this subtask had seen at the cut, which are
    # behind the marks its senders had sent (those are the checkpoint's): start from the
    # former, replay, then move on to the latter. So also when nothing was in flight to this
    # subtask but watermarks: its start is what it had seen (and sent on), and moving on sends
    # the rest downstream, whose channels from it hold what it had sent at the cut (starting
    # at the senders' marks instead, it would never send them: a finished source sends nothing
    # more, and windows after it would never fire)
    catch_up = input_channels(plan, spec)
    floor = s.input_marks.get("*", (MIN_WATERMARK, False))
    for c, mark in catch_up.items():
        watermarks[c] = min(mark, s.input_marks.get(c, floor))
    return recovered, watermarks, catch_up


def _routed(plan: Any, partition: int, old_p: int, old_partition: int, items: list, keep_marks: bool) -> list:
    new_p = plan.parallelism
    out = []
    for item in items:
        edge_index, _origin, blob = item
        if blob[0] == "wm":
            if keep_marks and old_p == new_p and old_partition == partition:
                out.append(item)
            continue
        if old_p == new_p:
            if old_partition == partition:
                out.append(item)
            continue
        edge = plan.input_edges[edge_index] if edge_index < len(plan.input_edges) else None
        kind = getattr(edge, "partitioning", "forward")
        if kind == "keyed":
            mine = _keyed_share(item, edge, partition, new_p)
            if mine is not None:
                out.append(mine)
        elif kind == "broadcast":
            if old_partition == partition % old_p:
                out.append(item)
        elif old_partition % new_p == partition:
            out.append(item)
    return out


def _keyed_share(item: tuple, edge: Any, partition: int, new_p: int) -> tuple | None:
    """The records of a keyed item whose key group this partition owns now."""
    edge_index, origin, blob = item
    data, ts = decode(blob)
    maxp = edge.max_parallelism

    def mine(key: Any) -> bool:
        return compute_operator_index_for_key_group(maxp, new_p, assign_to_key_group(key, maxp)) == partition

    if isinstance(data, KeyedBatch):
        rows = data.batch.to_pylist()
        fields = data.fields
        keep = [i for i, r in enumerate(rows) if mine(r[fields[0]] if len(fields) == 1 else tuple(r[f] for f in fields))]
        if not keep:
            return None
        import pyarrow as pa

        piece = KeyedBatch(data.batch.take(pa.array(keep)), fields)
        return (edge_index, origin, encode(piece, None if ts is None else [ts[i] for i in keep]))
    keep = [i for i, (k, _v) in enumerate(data) if mine(k)]
    if not keep:
        return None
    return (edge_index, origin, encode([data[i] for i in keep], None if ts is None else [ts[i] for i in keep]))
