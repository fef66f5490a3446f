"""``GET /jobs/:jid/vertices/:vid/state`` (issue 30, item 4): the keyed state of a running job's
vertex in its latest completed checkpoint, for the dashboard's State panel: states with kinds and
exact key counts, the operator's bytes, a sample of keys read from one subtask's part while the
checkpoint is pinned, once per checkpoint; a part over the cap is not read."""

from __future__ import annotations

import os
import time

import pytest
from checkpoint_jobs import KEYS, build
from test_checkpoints import checkpointing_env, completed
from test_rest_api import call, wait_for

from flowpoint.control.rest import state
from flowpoint.control.rest.state import StateSamples, short_repr


def test_values_are_shown_short():
    assert short_repr(12) == "12" and short_repr("a") == "'a'"
    long = short_repr(list(range(10_000)))
    assert len(long) <= state.REPR_CHARS and "..." in long
    assert len(short_repr("x" * 1000)) <= state.REPR_CHARS

    class Bad:
        def __repr__(self):
            raise ValueError

    assert short_repr(Bad()).startswith("<Bad instance at ")  # reprlib says so, never raises


def _vertex_of(job_id: str, uid: str) -> str:
    status, d = call("GET", f"/jobs/{job_id}")
    assert status == 200, d
    return next(op["vertex-id"] for op in d["flowpoint"]["operators"] if op["uid"] == uid)


def _state_answer(client, job_id: str, vid: str, after: int) -> dict:
    wait_for(lambda: any(c > after for c in completed(client.get_checkpoint_stats())), what=f"a checkpoint after {after}")
    status, answer = call("GET", f"/jobs/{job_id}/vertices/{vid}/state")
    assert status == 200, answer
    return answer


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "storage"), [("hashmap", "filesystem"), ("rocksdb", "filesystem"), ("hashmap", "jobmanager")])
def test_a_running_job_s_vertex_state(make_env, tmp_path, backend, storage):
    env = checkpointing_env(make_env, tmp_path, 2, backend)
    env.get_configuration().set("state.checkpoint-storage", storage)  # jobmanager: in the driver's memory
    build(env, 1_000_000, rate=300)
    client = env.execute_async(f"state {backend}")
    job_id = client.get_job_id()
    try:
        wait_for(lambda: len(completed(client.get_checkpoint_stats())) >= 2, what="two checkpoints")
        vid = _vertex_of(job_id, "counting")
        answer = _state_answer(client, job_id, vid, 1)
        assert answer["checkpoint"]["id"] >= 2 and answer["message"] is None
        (op,) = answer["operators"]
        assert op["uid"] == "counting" and op["stateSize"] > 0 and op["backend"] == backend
        states = {s["name"]: (s["kind"], s["keys"]) for s in op["states"]}
        assert {n: v for n, v in states.items() if not n.startswith("_")} == {
            "count": ("value", KEYS), "last": ("list", KEYS), "by_digit": ("map", KEYS)}
        assert all(v[1] == 0 for n, v in states.items() if n.startswith("_timers"))  # flowpoint's own: no timers set
        sample = op["sample"]
        assert op["sample-skipped"] is None and sample["states"] == ["by_digit", "count", "last"]
        assert 0 < len(sample["rows"]) <= state.SAMPLE_KEYS and len(sample["rows"]) == min(sample["subtask-keys"], state.SAMPLE_KEYS)
        row = sample["rows"][0]
        assert int(row["key"]) in range(KEYS) and int(row["values"]["count"]) > 0 and row["values"]["by_digit"].startswith("{")
        job = _job_control(job_id)
        reads = job.state_samples.reads
        read_at = time.monotonic()
        wait_for(lambda: any(c > answer["checkpoint"]["id"] for c in completed(client.get_checkpoint_stats())),
                 what="a newer checkpoint")
        again = call("GET", f"/jobs/{job_id}/vertices/{vid}/state")[1]
        if time.monotonic() - read_at < state.REREAD_S - 1:  # a newer checkpoint, but the last read is recent
            assert again == answer and job.state_samples.reads == reads  # polled: not read again
        if storage == "filesystem":
            assert not os.listdir(tmp_path / "ck" / job_id / "readers")  # the pin went with the read

        job.state_samples.reread_s = 0  # from now on every newer checkpoint is read
        job.state_samples.cap_bytes = 10  # every part is over it now: nothing of the next checkpoint is read
        capped = _state_answer(client, job_id, vid, again["checkpoint"]["id"])
        (op,) = capped["operators"]
        assert op["sample"] is None and op["sample-skipped"].startswith("sample skipped: part too large")
        counted = KEYS if backend == "hashmap" else None  # RocksDB's are counted in its files, not over the cap
        assert {"name": "count", "kind": "value", "keys": counted} in op["states"] and op["stateSize"] > 0
        source = _vertex_of(job_id, "numbers")
        assert call("GET", f"/jobs/{job_id}/vertices/{source}/state")[1] == {"checkpoint": None, "operators": [], "message": "no keyed state"}
        assert call("GET", f"/jobs/{job_id}/vertices/{'0' * 32}/state")[0] == 404
    finally:
        client.cancel()
        with pytest.raises(Exception):  # noqa: B017 - a cancelled job's wait raises
            client.wait(120)


def _job_control(job_id: str):
    from flowpoint.control import endpoint  # the test's own process serves the job

    server = endpoint.current_server()
    return server.job(job_id)


def test_samples_keep_the_newest_entries():
    s = StateSamples()
    for i in range(state.CACHED + 5):
        s.put(i, "u", {"i": i})
    assert s.get(0, "u") is None and s.get(state.CACHED + 4, "u") == {"i": state.CACHED + 4}


def test_a_checkpoint_retention_took_before_the_pin_is_not_read(tmp_path):
    from test_live_state import _complete  # writes a real checkpoint's _metadata

    from flowpoint.checkpoint.directory import CheckpointStore
    from flowpoint.checkpoint.filesystem import CheckpointStorageAccess

    job = "d" * 32
    store = CheckpointStore(CheckpointStorageAccess(str(tmp_path / "ck")), job, num_retained=1)
    store.init()
    _complete(store, tmp_path, job, 1)
    _complete(store, tmp_path, job, 2)  # retention removes 1
    assert state._read(store, 1, ["counting"], StateSamples()) is None
    assert not os.listdir(tmp_path / "ck" / job / "readers")  # its pin went too
