"""One pickle of the tables for both files at a job's final barrier (issue 29): the HashMap base
is built around the pickled tables the checkpoint's full part writes (``pickles.dumps_tagged``)."""

from __future__ import annotations

import pickle

import pytest

from flowpoint.api.state import ValueStateDescriptor
from flowpoint.pickles import dumps, dumps_tagged

SHARED = [1, 2]
ODD_KEYS = [float("nan"), 1, 1.0, True, -0.0, 0.0, ("a", float("nan")), (1, "b"), (True, "b"), "s", b"b"]


@pytest.mark.parametrize("uid", ["count", "é-uid", "u" * 300])
@pytest.mark.parametrize(
    "tables",
    [
        {},
        {"count": {}},
        {"count": {f"user-{i}": i for i in range(5000)}},
        {"a": {("x", 1): SHARED, "z": (SHARED, SHARED), "s": "é\ud800"}, "b": {1: [SHARED]}},
    ],
)
def test_dumps_tagged_loads_as_the_pickle_of_the_pair(uid, tables):
    data = dumps_tagged("base", uid, dumps(tables))
    want = pickle.loads(dumps(("base", {uid: tables})))
    for loads in (pickle.loads, pickle._loads):  # the C unpickler and the Python one (frames checked)
        got = loads(data)
        assert type(got) is tuple and got[0] == "base" and list(got[1]) == [uid]
        assert repr(got) == repr(want)
        a = got[1][uid].get("a")
        if a is not None:  # objects shared inside the tables stay shared (memo references)
            assert a[("x", 1)] is a["z"][0] is a["z"][1]


def test_dumps_tagged_refuses_what_is_not_a_protocol_5_pickle():
    assert dumps_tagged("base", "u", pickle.dumps({}, protocol=4)) is None


def test_the_final_barrier_pickles_the_tables_once_for_the_base_and_the_checkpoint(tmp_path):
    from flowpoint.checkpoint.parts import load_part
    from flowpoint.partition.backend import HashMapPartitionBackend
    from flowpoint.partition.committed_chain import CommittedChain
    from flowpoint.partition.protocol import CheckpointTarget, StateLocation, TaskSlice
    from flowpoint.partition.working import TaskStateCache
    from flowpoint.state.key_identity import StateKey

    location = StateLocation("job/run-0", str(tmp_path / "local"), str(tmp_path / "durable"), "hashmap", changelog=True)
    backend = HashMapPartitionBackend(location, 128, TaskStateCache())
    ts, _ = backend.acquire(0, 0, CommittedChain(), ["op"])
    b = ts.backend("op", "op")
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    for i, key in enumerate(ODD_KEYS):
        b.current_key = key
        v.update(i)
    b.current_key = None
    backend.commit_in_place(ts, 1)  # what BarrierSnapshot._snapshot does at the final barrier
    pickled: dict[str, bytes] = {}
    ack = backend.end_epoch(ts, TaskSlice(0, 0, CommittedChain(), True), 1, "t1", pickled)
    write = backend.snapshot(ts, ["op"], 0, CheckpointTarget(1, str(tmp_path / "ck")), {}, pickled)
    tables = b.snapshot()
    assert pickled == {"op": dumps(tables)}
    base = backend.load(ack.base, "base", 0, 0)
    assert repr(base) == repr(("base", {"op": tables}))
    assert all(type(k) in (str, int, bytes, tuple, StateKey) for k in base[1]["op"]["v"])
    (part,) = write()
    (h,) = part.files
    data = (tmp_path / "ck" / h.path).read_bytes()
    assert h.kind == "full" and data == dumps(tables)  # the bytes a snapshot wrote before
    assert repr(load_part(data, h.path, "op")) == repr(tables)
