"""Channel state of unaligned checkpoints, without Spark: what a restored subtask replays
(tasks/channel_state.py), the gate's recording, and a damaged file refused by name."""

from __future__ import annotations

import hashlib
import pickle
from collections import Counter
from types import SimpleNamespace

import pyarrow as pa
import pytest

from flowpoint.errors import CorruptStateError
from flowpoint.partition.protocol import CheckpointTarget
from flowpoint.state.keygroups import assign_to_key_group, compute_operator_index_for_key_group
from flowpoint.tasks.batches import KeyedBatch, decode, encode
from flowpoint.tasks.channel_state import (
    RestoredChannelFile,
    read_channel_state,
    write_channel_state,
)
from flowpoint.tasks.input_gate import InputGate

MAXP = 128


def plan(parallelism: int, partitioning: str = "keyed", uid: str = "count"):
    edge = SimpleNamespace(partitioning=partitioning, max_parallelism=MAXP)
    return SimpleNamespace(head_uid=uid, parallelism=parallelism, input_edges=[edge])


def owner(key, parallelism):
    return compute_operator_index_for_key_group(MAXP, parallelism, assign_to_key_group(key, MAXP))


def write(tmp_path, entries, cid=3):
    target = CheckpointTarget(cid, f"file://{tmp_path}")
    part = write_channel_state(entries, target, {}, "gen:0", "0-0")
    h = part.handle
    return RestoredChannelFile(f"file://{tmp_path}/{h.path}", h.size, h.sha256), part


def records(items):
    out = []
    for _, _, blob in items:
        data, _ = decode(blob)
        if isinstance(data, KeyedBatch):
            out.extend(r["k"] for r in data.batch.to_pylist())
        else:
            out.extend(k for k, _ in data)
    return out


KEYS = ["a", "b", 1, 1.0, True, ("x", 2), "ü", float("nan")]


def keyed_items(old_p: int):
    """What each of ``old_p`` receivers had in flight: pairs for every key it owned, plus a
    columnar batch, plus a watermark (never replayed)."""
    entries = []
    for dest in range(old_p):
        mine = [k for k in KEYS if owner(k, old_p) == dest]
        pairs = [(k, i) for i, k in enumerate(mine)]
        batch = pa.RecordBatch.from_pylist([{"k": s, "v": 1} for s in ["p", "q", "r", "s", "t"] if owner(s, old_p) == dest])
        items = [(0, ("gen", 0, 1, dest), encode(pairs, [5] * len(pairs))), (0, ("gen", 0, 2, dest), ("wm", ("t:gen:0", 99, False)))]
        if batch.num_rows:
            items.append((0, ("gen", 0, 3, dest), encode(KeyedBatch(batch, ("k",)))))
        entries.append(("count", old_p, dest, items))
    return entries


@pytest.mark.parametrize(("old_p", "new_p"), [(2, 2), (2, 3), (3, 1), (1, 4)])
def test_a_keyed_edge_replays_each_record_once_at_its_new_owner(tmp_path, old_p, new_p):
    f, part = write(tmp_path, keyed_items(old_p))
    assert part.stages == ("count",) and part.items > 0
    seen: Counter = Counter()
    for p in range(new_p):
        got = read_channel_state(plan(new_p), p, (f,), {})
        assert all(blob[0] != "wm" for _, _, blob in got)  # watermarks are not replayed
        for k in records(got):
            assert owner(k, new_p) == p, (k, p)
            seen[repr(k)] += 1
    expected = Counter(repr(k) for k in KEYS) + Counter(repr(s) for s in ["p", "q", "r", "s", "t"])
    assert seen == expected  # every record once, NaN and 1 / 1.0 / True included


@pytest.mark.parametrize("partitioning", ["rebalance", "forward"])
def test_other_edges_move_old_partition_i_to_i_mod_the_new_parallelism(tmp_path, partitioning):
    entries = [("count", 3, d, [(0, ("gen", d), encode([d * 10 + j for j in range(3)]))]) for d in range(3)]
    f, _ = write(tmp_path, entries)
    got = {p: [v for _, _, blob in read_channel_state(plan(2, partitioning), p, (f,), {}) for v in decode(blob)[0]] for p in range(2)}
    assert sorted(got[0]) == [0, 1, 2, 20, 21, 22] and sorted(got[1]) == [10, 11, 12]


def test_a_broadcast_edge_gives_every_new_receiver_one_copy(tmp_path):
    entries = [("count", 2, d, [(0, ("gen", 0), encode(["x", "y"]))]) for d in range(2)]
    f, _ = write(tmp_path, entries)
    for p in range(3):
        got = read_channel_state(plan(3, "broadcast"), p, (f,), {})
        assert [decode(blob)[0] for _, _, blob in got] == [["x", "y"]]


def test_entries_for_other_stages_are_left_to_them(tmp_path):
    f, _ = write(tmp_path, [("other", 2, 0, [(0, ("g",), encode([("a", 1)]))])])
    assert read_channel_state(plan(2), 0, (f,), {}) == []


def test_nothing_in_flight_writes_no_file(tmp_path):
    assert write_channel_state([("count", 2, 0, [])], CheckpointTarget(1, f"file://{tmp_path}"), {}, "gen:0", "0-0") is None
    assert not list(tmp_path.rglob("*.pkl"))


def test_a_damaged_or_replaced_file_is_refused_by_name_before_it_is_unpickled(tmp_path):
    f, _ = write(tmp_path, keyed_items(2))
    path = tmp_path / "chk-3" / "channel-0-0.pkl"
    data = path.read_bytes()
    for i in (0, len(data) // 2, len(data) - 1):
        bad = bytearray(data)
        bad[i] ^= 0xFF
        path.write_bytes(bytes(bad))
        with pytest.raises(CorruptStateError, match="channel-0-0.pkl"):
            read_channel_state(plan(2), 0, (f,), {})
    # a pickle that would run code, with the right size: its SHA-256 is not the recorded one
    evil = pickle.dumps(SimpleNamespace)[: len(data)].ljust(len(data), b"\0")
    path.write_bytes(evil)
    with pytest.raises(CorruptStateError, match="channel-0-0.pkl"):
        read_channel_state(plan(2), 0, (f,), {})
    path.write_bytes(data)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == f.sha256
    assert read_channel_state(plan(2), 0, (f,), {})


def test_the_gate_records_what_reaches_a_channel_before_its_barrier():
    gate = InputGate([("e", 0), ("e", 1)], capacity=4)
    a, b = ("e", 0), ("e", 1)
    assert gate.put_nowait(a, ("data", ["a1"])) and gate.put_nowait(b, ("data", ["b1"]))
    gate.priority(a, "barrier 1")  # overtakes a1
    channel, frame = gate.get(0.1)
    assert channel == a and frame == ("priority", "barrier 1", [("data", ["a1"])])
    gate.record()  # the subtask snapshotted: b records from here on
    assert gate.put_nowait(b, ("data", ["b2"]))
    gate.prepend_recorded(b, ("data", ["b0"]))  # the rest of a frame taken before the snapshot
    gate.priority(b, "barrier 1")
    assert gate.get(0.1) == (b, ("priority", "barrier 1", [("data", ["b0"]), ("data", ["b1"]), ("data", ["b2"])]))
    gate.checkpoint_done()
    # the frames stay queued and are processed after the snapshot
    assert [gate.get(0.1)[1] for _ in range(3)] == [("data", ["a1"]), ("data", ["b1"]), ("data", ["b2"])]
    # credits: no frame beyond the capacity
    for i in range(4):
        assert gate.put_nowait(a, ("data", [i]))
    assert not gate.put_nowait(a, ("data", ["over"]))


def test_a_barrier_promoted_in_the_gate_after_its_timeout_hands_its_credit_back():
    from flowpoint.tasks.barrier_snapshot import Barrier

    gate = InputGate([("e", 0)], capacity=3)
    credits: list = []
    gate.on_taken = credits.append
    c = ("e", 0)
    barrier = Barrier(4, None, {}, False, timeout_at=1_000)
    for frame in (("data", ["x"]), ("barrier", barrier), ("data", ["y"])):
        gate.put_credited(c, frame)
    assert not gate.promote_overdue(999)  # not yet
    assert gate.promote_overdue(1_000)
    channel, frame = gate.get(0.1)
    assert channel == c and frame[0] == "priority" and frame[1].unaligned and frame[1].n == 4
    assert frame[2] == [("data", ["x"])]  # what the barrier overtook
    assert credits == [c]  # the sender paid a credit for the barrier's frame: without it back, it stalls
    assert [gate.get(0.1)[1] for _ in range(2)] == [("data", ["x"]), ("data", ["y"])]
    assert credits == [c, c, c]


def test_a_channel_replays_the_receivers_recorded_frames_before_the_senders_unsent_ones(tmp_path):
    """Per channel, what reached the receiver was sent before what the sender still held: the
    receiver's file comes first whatever order the checkpoint lists the files in; watermark items
    stay in place while the channels are the ones of the cut."""
    recorded = [(0, ("gen", 0, 1, 0), encode([("a", 1)], [10])), (0, ("gen", 0, 2, 0), ("wm", ("t:gen:0", 10, False)))]
    unsent = [(0, ("gen", 0, 3, 0), encode([("a", 2)], [20]))]
    files = []
    for writer, items, where in (("gen:0", unsent, "s"), ("count:0", recorded, "r")):
        target = CheckpointTarget(3, f"file://{tmp_path}/{where}")
        h = write_channel_state([("count", 1, 0, items)], target, {}, writer, "x").handle
        files.append(RestoredChannelFile(f"file://{tmp_path}/{where}/{h.path}", h.size, h.sha256, writer=writer))
    got = read_channel_state(plan(1), 0, tuple(files), {}, keep_marks=True)
    assert [blob[0] == "wm" or decode(blob)[0][0][1] for _, _, blob in got] == [1, True, 2]
    got = read_channel_state(plan(1), 0, tuple(files), {})
    assert [decode(blob)[0][0][1] for _, _, blob in got] == [1, 2]


def test_the_marks_a_subtask_had_seen_restore_as_saved_or_as_the_stages_floor_after_a_rescale():
    from flowpoint.driver.committed import restored_input_marks

    def graph(p_up: int, p_down: int):
        nodes = {0: SimpleNamespace(uid="up", stage_id=0), 1: SimpleNamespace(uid="down", stage_id=1)}
        up = SimpleNamespace(id=0, head=0, parallelism=p_up, inputs=[], is_source=False)
        down = SimpleNamespace(id=1, head=1, parallelism=p_down, inputs=[SimpleNamespace(upstream=0)], is_source=False)
        return SimpleNamespace(nodes=nodes, stages=[up, down])

    saved = {"down": [2, {"0": {"t:up:0": [5, False], "t:up:1": [7, False]}, "1": {"t:up:0": [3, False], "t:up:1": [9, True]}}]}
    same = restored_input_marks(saved, graph(2, 2))
    assert same == {"down:0": {"t:up:0": (5, False), "t:up:1": (7, False)}, "down:1": {"t:up:0": (3, False), "t:up:1": (9, True)}}
    # the stage rescaled, or its input did: every subtask starts from the lowest mark seen
    for g in (graph(2, 3), graph(1, 2)):
        out = restored_input_marks(saved, g)
        assert out == {f"down:{p}": {"*": (3, False)} for p in range(g.stages[1].parallelism)}


def test_a_closed_gate_ends_its_subtask_instead_of_leaving_it_waiting():
    """A slot that fails closes its gates; a subtask waiting on one gets a cancel, so its thread
    ends rather than waiting forever in a Python worker Spark reuses. A command queued before
    the close still comes first."""
    import threading

    from flowpoint.tasks.input_gate import CONTROL

    gate = InputGate([("e", 0)], capacity=2)
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(gate.get(30)))
    waiter.start()
    gate.close()
    waiter.join(5)
    assert not waiter.is_alive() and got == [(CONTROL, ("cancel",))]
    gate = InputGate([("e", 0)], capacity=2)
    gate.command(("finish",))
    gate.close()
    assert gate.get(0.1) == (CONTROL, ("finish",)) and gate.get(0.1) == (CONTROL, ("cancel",))
