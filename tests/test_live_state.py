"""A running job's keyed state read without stopping it (issue 30, item 4):
``state_reader(spark, job=...)`` and ``flowpoint state``, as of the job's latest completed
checkpoint, which the reader pins so that retention keeps it until the read ends."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections import Counter

import pytest
from checkpoint_jobs import build, key_of, record
from test_checkpoints import completed, wait_for
from test_resume_identity import _fake_run

from flowpoint import state_reader
from flowpoint.checkpoint.directory import CheckpointStore
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.metadata import read_metadata
from flowpoint.checkpoint.readers import PIN_TTL_MS, CheckpointPin, pinned_ids
from flowpoint.driver.registry import JobRegistry, registry_dir
from flowpoint.errors import CheckpointError, ConfigurationError

HERE = os.path.dirname(os.path.abspath(__file__))


def _complete(store: CheckpointStore, root, job_id: str, i: int) -> None:
    """Complete checkpoint ``i`` of the store's job (metadata only, written as a real one is)."""
    _fake_run(root / "tmp", job_id, ids=(i,))
    meta = read_metadata(CheckpointStorageAccess(str(root / "tmp" / job_id)), f"chk-{i}")
    store.begin(i)
    store.complete(meta)


def test_retention_keeps_a_pinned_checkpoint_until_its_pin_goes(tmp_path):
    job = "a" * 32
    store = CheckpointStore(CheckpointStorageAccess(str(tmp_path / "ck")), job, num_retained=1)
    store.init()
    _complete(store, tmp_path, job, 1)
    pin = CheckpointPin(store.job_access, 1, heartbeat_s=0.1)
    _complete(store, tmp_path, job, 2)
    _complete(store, tmp_path, job, 3)
    chk = tmp_path / "ck" / job
    assert sorted(n for n in os.listdir(chk) if n.startswith("chk-")) == ["chk-1", "chk-3"]  # 2 went, 1 is read
    assert [m.checkpoint_id for m in store.retained()] == [3]  # a pinned one is not "retained": restores take 3
    time.sleep(0.3)
    assert pinned_ids(store.job_access) == {1}  # renewed, not stale
    pin.release()
    assert not os.listdir(chk / "readers")
    _complete(store, tmp_path, job, 4)
    assert sorted(n for n in os.listdir(chk) if n.startswith("chk-")) == ["chk-4"]


def test_a_pin_its_reader_stopped_writing_lapses(tmp_path):
    job = "b" * 32
    store = CheckpointStore(CheckpointStorageAccess(str(tmp_path / "ck")), job, num_retained=1)
    store.init()
    _complete(store, tmp_path, job, 1)
    pin = CheckpointPin(store.job_access, 1, heartbeat_s=3600)
    path = tmp_path / "ck" / job / pin.rel
    old = time.time() - PIN_TTL_MS / 1000 - 5
    os.utime(path, (old, old))  # a reader that died a while ago
    _complete(store, tmp_path, job, 2)
    assert not (tmp_path / "ck" / job / "chk-1").exists() and not path.exists()
    (tmp_path / "ck" / job / "readers" / "notes.txt").write_text("x")  # not a pin: left alone, never parsed
    assert pinned_ids(store.job_access) == set()


def test_a_job_that_is_not_running_or_has_no_checkpoint_is_named(spark):
    with pytest.raises(ConfigurationError, match="no running job with the id or name 'no-such-job'"):
        state_reader(spark, job="no-such-job")
    with pytest.raises(ConfigurationError, match="give one of them"):
        state_reader(spark, "/tmp/x", job="y")


def _wait_registered_checkpoint(job_id: str) -> None:
    registry = JobRegistry(registry_dir())
    wait_for(lambda: (e := registry.read(job_id)) is not None and e.last_checkpoint_path, what="the job's first checkpoint in the registry")


@pytest.mark.slow
def test_a_running_job_s_state_is_read_as_of_its_checkpoint_while_retention_goes_on(spark, make_env, tmp_path):
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"))
    env.get_configuration().set("state.checkpoints.num-retained", 1)
    env.enable_checkpointing(1)  # at every epoch boundary
    events = 6_000
    build(env, events, rate=500)
    client = env.execute_async("live")
    job_id = client.get_job_id()
    try:
        _wait_registered_checkpoint(job_id)
        with state_reader(spark, job=job_id[:8]) as reader:
            pinned = reader.checkpoint_id
            chk = tmp_path / "ck" / job_id / f"chk-{pinned}"
            wait_for(lambda: len([c for c in completed(client.get_checkpoint_stats()) if c > pinned]) >= 3, what="3 more checkpoints")
            assert chk.exists()  # retention (1 retained) would have deleted it
            rows = reader.keyed_state("counting", "count").collect()
            by_digit = reader.keyed_state_dict("counting", "by_digit")
            read = reader.metadata.stats["records_read"]
        # the state is that of the records read by then, exactly: a replay of the input up to them
        counts = {r["key"]: r["value"] for r in rows}
        assert 0 < sum(counts.values()) == read < events
        assert sum(sum(d.values()) for d in by_digit.values()) == read
        final = Counter(key_of(record(i)) for i in range(events))
        assert all(0 < n <= final[k] for k, n in counts.items())
        wait_for(lambda: not chk.exists(), what="the released checkpoint to go", timeout=60)

        # the command line: one key, then a listing
        env_vars = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), os.environ.get("PYTHONPATH", "")]))
        key = next(iter(counts))
        one = subprocess.run([sys.executable, "-m", "flowpoint.cli", "state", job_id, "counting", "count", "--key", str(key)],
                             capture_output=True, text=True, timeout=120, env=env_vars)
        assert one.returncode == 0, one.stderr
        head, line = one.stdout.strip().splitlines()
        assert head.startswith(f"Job {job_id} ('live'), checkpoint ") and "operator 'counting', state 'count', 13 keys" in head, head
        k, v = line.split("\t")
        assert int(k) == key and 0 < int(v) <= final[key]
        listing = subprocess.run([sys.executable, "-m", "flowpoint.cli", "state", "live", "counting", "count", "--limit", "5"],
                                 capture_output=True, text=True, timeout=120, env=env_vars)
        assert listing.returncode == 0, listing.stderr
        assert len(listing.stdout.strip().splitlines()) == 1 + 5 + 1 and "the first 5 of 13 keys" in listing.stdout
        wrong = subprocess.run([sys.executable, "-m", "flowpoint.cli", "state", job_id, "counting", "nope"],
                               capture_output=True, text=True, timeout=120, env=env_vars)
        assert wrong.returncode == 1 and "has no keyed state 'nope'" in wrong.stderr and "'count'" in wrong.stderr
        assert not os.listdir(tmp_path / "ck" / job_id / "readers")  # every reader let go of its pin
    finally:
        client.cancel()
        with pytest.raises(Exception):  # noqa: B017 - a cancelled job's wait raises
            client.wait(120)


def test_state_of_a_job_without_a_checkpoint_says_so(tmp_path):
    from flowpoint.driver.live_reads import running_job_checkpoints
    from flowpoint.driver.registry import JobEntry

    registry = JobRegistry(registry_dir())
    job_id = "c" * 32
    registry.write(JobEntry(job_id, "fresh", "RUNNING", int(time.time() * 1000), os.getpid(), os.uname().nodename, None))
    try:
        with pytest.raises(CheckpointError, match="has completed no checkpoint yet"):
            running_job_checkpoints(job_id)
    finally:
        registry.remove(job_id)
