"""Checkpoints, retention, restore and restart strategies, end to end on Spark.

Every failure test compares with the failure-free result: the same final keyed state and, for
the collecting sink (which goes back to the checkpoint on a restore), the same outputs.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state

from flowpoint import ExternalizedCheckpointCleanup, RestartStrategies
from flowpoint.checkpoint.directory import list_checkpoints
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.errors import CheckpointError, JobExecutionError

HERE = os.path.dirname(os.path.abspath(__file__))
EVENTS = 2_000


def checkpointing_env(make_env, tmp_path, parallelism=2, backend="hashmap", retained=1, **config):
    env = make_env(parallelism=parallelism, max_records=200, state_checkpoints_dir=str(tmp_path / "ck"), **config)
    env.get_configuration().set("state.backend.type", backend)
    env.get_configuration().set("state.backend.incremental", True)
    env.get_configuration().set("state.checkpoints.num-retained", retained)
    env.enable_checkpointing(1)  # at every epoch boundary
    return env


def state_of(result) -> dict:
    state = result.get_keyed_state("counting")
    return {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})}


def completed(stats) -> list[int]:
    return [s.checkpoint_id for s in stats if s.status == "COMPLETED"]


def wait_for(predicate, timeout=180.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_checkpoint_layout_and_retention(make_env, tmp_path, backend):
    env = checkpointing_env(make_env, tmp_path, retained=3, backend=backend)
    # 13 keys, all changed every epoch: changelogs as large as the state; allow them anyway
    env.get_configuration().set("state.backend.hashmap.changelog.max-ratio", 100)
    env.get_configuration().set("state.backend.hashmap.changelog.max-parts", 3)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    build(env, 10**9, rate=4000)
    client = env.execute_async("layout")
    wait_for(lambda: len(completed(client.get_checkpoint_stats())) >= 5, what="5 completed checkpoints")
    client.cancel()
    with pytest.raises(Exception):
        client.wait(120)
    job_dir = tmp_path / "ck" / client.get_job_id()
    names = sorted(os.listdir(job_dir))
    assert "shared" in names and "taskowned" in names
    chks = sorted(int(n[4:]) for n in names if n.startswith("chk-"))
    assert len(chks) == 3, names
    ids = completed(client.get_checkpoint_stats())
    assert chks == ids[-3:]
    for n in chks:
        assert (job_dir / f"chk-{n}" / "_metadata").is_file()
    stats = [s for s in client.get_checkpoint_stats() if s.status == "COMPLETED"][-1]
    assert stats.state_size > 0 and stats.tasks_acknowledged == 2 and stats.async_ms >= 0
    listed = list_checkpoints(str(job_dir))
    assert [c.id for c in listed if c.complete] == chks
    meta = json.loads((job_dir / f"chk-{chks[-1]}" / "_metadata").read_text())
    assert meta["backend"] == backend
    # incremental: RocksDB's SST files, HashMap's full snapshots and changelog parts live in
    # shared/, referenced by several checkpoints
    shared = set(os.listdir(job_dir / "shared"))
    assert shared and all(n.endswith(".sst" if backend == "rocksdb" else ".pkl") for n in shared)
    referenced = set()
    for n in chks:
        m = json.loads((job_dir / f"chk-{n}" / "_metadata").read_text())
        referenced |= {f["path"].split("/", 1)[1] for op in m["operators"] for st in op["subtasks"] for f in st["files"] if f["path"].startswith("shared/")}
    assert referenced == shared  # retention removed exactly the unreferenced ones
    done = [s for s in client.get_checkpoint_stats() if s.status == "COMPLETED"]
    assert done[0].incremental_size == done[0].state_size  # the first uploads everything
    assert sum(s.incremental_size for s in done[1:]) < sum(s.state_size for s in done[1:])
    if backend == "hashmap":  # a full snapshot, then up to 3 changelog parts on top of it
        kinds = [[f["kind"] for f in st["files"]] for st in meta["operators"][0]["subtasks"]]
        assert all(k[0] == "full" and set(k[1:]) <= {"changelog"} and len(k) <= 4 for k in kinds), kinds


@pytest.mark.slow
@pytest.mark.parametrize(("parallelism", "backend"), [
    (1, "hashmap"), (1, "rocksdb"), pytest.param(2, "hashmap", marks=pytest.mark.compat), (2, "rocksdb"),
])
def test_failure_at_a_record_restarts_from_the_last_checkpoint(make_env, tmp_path, parallelism, backend):
    env = checkpointing_env(make_env, tmp_path, parallelism, backend)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    sink = build(env, EVENTS, function=Counting(fail_value=1_700 * 7919 % 100_003, flag=flag))
    result = env.execute("fail at a record")
    assert os.path.exists(flag), "the injected failure never happened"
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)
    assert completed(result.get_checkpoint_stats())


def test_without_checkpointing_a_failure_fails_the_job(make_env, tmp_path):
    env = make_env(parallelism=1, max_records=200)
    build(env, 500, function=Counting(fail_value=300 * 7919 % 100_003, flag=str(tmp_path / "failed")))
    with pytest.raises(JobExecutionError, match="injected failure"):
        env.execute("no restarts")


def test_restart_strategy_gives_up(make_env, tmp_path):
    env = checkpointing_env(make_env, tmp_path, 1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 10))
    always = Counting(fail_value=300 * 7919 % 100_003, flag=str(tmp_path / "failed"), fail_times=10**6)
    build(env, 500, function=always)
    with pytest.raises(JobExecutionError, match="injected failure"):
        env.execute("gives up")
    with open(str(tmp_path / "failed") + ".failures") as f:
        assert len(f.read()) == 2  # one attempt (Spark does not retry a user function's error), one restart


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "hashmap-full", "rocksdb"])
def test_failed_upload_declines_the_checkpoint_and_the_job_goes_on(make_env, tmp_path, monkeypatch, backend):
    env = checkpointing_env(make_env, tmp_path, 2, backend.split("-")[0])
    if backend == "hashmap-full":  # full snapshots only: each in its checkpoint's own directory
        env.get_configuration().set("state.backend.hashmap.changelog.max-ratio", 0)
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1)
    # checkpoint 2's directory cannot be created (a file is in its place): the tasks that write
    # parts there (RocksDB, HashMap full snapshots) decline it; HashMap changelog chains live in
    # shared/, and the driver fails to begin checkpoint 2's directory for its _metadata
    job_id = "f" * 32
    monkeypatch.setattr("flowpoint.driver.coordinator.new_job_id", lambda: job_id)
    (tmp_path / "ck" / job_id).mkdir(parents=True)
    (tmp_path / "ck" / job_id / "chk-2").write_text("in the way")
    sink = build(env, EVENTS)
    result = env.execute("flaky upload")
    stats = result.get_checkpoint_stats()
    failed = [s for s in stats if s.status == "FAILED"]
    assert len(failed) == 1 and failed[0].checkpoint_id == 2
    assert "chk-2" in failed[0].failure_reason
    if backend != "hashmap":
        assert "could not write its parts" in failed[0].failure_reason
    assert completed(stats)
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)


def test_upload_failures_beyond_the_tolerable_number_fail_over(make_env, tmp_path, monkeypatch):
    env = checkpointing_env(make_env, tmp_path, 1)
    env.set_restart_strategy(RestartStrategies.no_restart())

    def broken(self, rel, data):
        raise OSError("storage is down")

    monkeypatch.setattr(CheckpointStorageAccess, "write_bytes", broken)
    build(env, EVENTS)
    with pytest.raises(CheckpointError, match="tolerable"):
        env.execute("storage down")


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_restore_from_the_oldest_of_five_retained_checkpoints(make_env, tmp_path, backend):
    env = checkpointing_env(make_env, tmp_path, 2, backend, retained=5)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    events = 4_000
    build(env, events, rate=3000)
    client = env.execute_async("history")
    wait_for(lambda: len(completed(client.get_checkpoint_stats())) >= 7, what="7 completed checkpoints")
    client.cancel()
    with pytest.raises(Exception):
        client.wait(120)
    job_dir = tmp_path / "ck" / client.get_job_id()
    retained = sorted(int(n[4:]) for n in os.listdir(job_dir) if n.startswith("chk-"))
    assert len(retained) == 5
    oldest = retained[0]
    meta = json.loads((job_dir / f"chk-{oldest}" / "_metadata").read_text())

    env2 = checkpointing_env(make_env, tmp_path, 2, backend)
    env2.get_configuration().set("execution.savepoint.path", str(job_dir / f"chk-{oldest}"))
    sink = build(env2, events)
    result = env2.execute("history restored")
    # the restored run reads only what came after the cut, counting on from the restored state
    assert len(sink.results) == events - meta["stats"]["records_read"]
    final = expected_state(events)["count"]
    by_key: dict = {}
    for k, n in sink.results:
        by_key.setdefault(k, []).append(n)
    for k, ns in by_key.items():
        assert sorted(ns) == list(range(final[k] - len(ns) + 1, final[k] + 1))
    assert min(min(ns) for ns in by_key.values()) > 1  # not from scratch
    assert state_of(result) == expected_state(events)
    assert completed(result.get_checkpoint_stats())[0] == oldest + 1  # ids continue after the restored one


def cancelled_run(make_env, tmp_path, events: int, checkpoints: int = 1, parallelism: int = 2, backend: str = "hashmap"):
    """Run the job until ``checkpoints`` completed, cancel it (retaining them); its newest chk dir."""
    env = checkpointing_env(make_env, tmp_path, parallelism, backend)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    build(env, events, rate=3000)
    client = env.execute_async("cancelled")
    wait_for(lambda: len(completed(client.get_checkpoint_stats())) >= checkpoints, what="completed checkpoints")
    client.cancel()
    with pytest.raises(Exception):
        client.wait(120)
    job_dir = tmp_path / "ck" / client.get_job_id()
    return job_dir / max((n for n in os.listdir(job_dir) if n.startswith("chk-")), key=lambda n: int(n[4:]))


@pytest.mark.slow
def test_restore_with_another_parallelism_keeps_every_key(make_env, tmp_path):
    events = 3_000
    chk = cancelled_run(make_env, tmp_path, events, checkpoints=2, parallelism=2)
    env = checkpointing_env(make_env, tmp_path, 3)
    env.get_configuration().set("execution.savepoint.path", str(chk / "_metadata"))
    build(env, events)
    result = env.execute("rescaled")
    assert state_of(result) == expected_state(events)


@pytest.mark.slow
def test_a_hashmap_checkpoint_restores_into_rocksdb_but_not_back(make_env, tmp_path):
    events = 3_000
    chk = cancelled_run(make_env, tmp_path, events, checkpoints=2, backend="hashmap")
    env = checkpointing_env(make_env, tmp_path, 2, "rocksdb")
    env.get_configuration().set("execution.savepoint.path", str(chk))
    build(env, events)
    assert state_of(env.execute("hashmap into rocksdb")) == expected_state(events)

    chk = cancelled_run(make_env, tmp_path, events, checkpoints=2, backend="rocksdb")
    env = checkpointing_env(make_env, tmp_path, 2, "hashmap")
    env.get_configuration().set("execution.savepoint.path", str(chk))
    build(env, events)
    with pytest.raises(CheckpointError) as info:
        env.execute("rocksdb into hashmap")
    assert "rocksdb" in str(info.value) and "savepoint" in str(info.value)


def test_restoring_a_checkpoint_with_another_max_parallelism_is_refused(make_env, tmp_path):
    chk = cancelled_run(make_env, tmp_path, 10**9)
    env2 = checkpointing_env(make_env, tmp_path, 2)
    env2.set_max_parallelism(64)
    env2.get_configuration().set("execution.savepoint.path", str(chk))
    build(env2, 100)
    with pytest.raises(CheckpointError) as info:
        env2.execute("other maxp")
    assert "64" in str(info.value) and "128" in str(info.value) and "counting" in str(info.value)


@pytest.mark.slow
# RocksDB only: the backend restores as after any failure (both in test_failure_at_a_record_*);
# what is tested is the new driver finding the killed one's latest checkpoint
@pytest.mark.parametrize("backend", [pytest.param("rocksdb", marks=pytest.mark.compat)])
def test_driver_killed_then_resume_continues_from_the_latest_checkpoint(tmp_path, backend):
    ck = str(tmp_path / "ck")
    events = 6_000
    script = os.path.join(HERE, "checkpoint_jobs.py")
    first = subprocess.Popen([sys.executable, script, ck, backend, str(events), "1500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=HERE)
    try:
        wait_for(lambda: _metadata_count(ck) >= 2, timeout=300, what="two checkpoints of the first run")
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(60)
    job_dirs = os.listdir(ck)
    assert len(job_dirs) == 1
    job_dir = os.path.join(ck, job_dirs[0])
    # the latest completed checkpoint (on the continuous runtime, the default, a later barrier's
    # directory may hold parts without _metadata: never completed, not restored)
    before = max(int(n[4:]) for n in os.listdir(job_dir) if n.startswith("chk-") and os.path.exists(os.path.join(job_dir, n, "_metadata")))
    cli = [sys.executable, "-m", "flowpoint.cli", "run", "--resume", script, ck, backend, str(events), "0"]
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "restoring checkpoint" in proc.stderr
    remote = os.environ.get("SPARK_REMOTE")  # the subset on a Spark Connect server (tests/test_connect_compat.py)
    if remote:
        assert f"on Spark Connect server {remote}" in proc.stderr, proc.stderr[-3000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert out["count"] == {str(k): v for k, v in expected_state(events)["count"].items()}
    assert out["checkpoints"] and out["checkpoints"][0] == before + 1


def _metadata_count(root: str) -> int:
    n = 0
    for dirpath, _, files in os.walk(root):
        n += "_metadata" in files
    return n


class ListeningCounter(Counting):
    """Writes the checkpoint ids it hears about into a file (functions run in executors)."""

    def __init__(self, path: str):
        super().__init__()
        self.path = path

    def notify_checkpoint_complete(self, checkpoint_id):
        with open(self.path, "a") as f:
            f.write(f"{checkpoint_id}\n")


def test_checkpoint_listener_hears_completed_checkpoints(make_env, tmp_path):
    heard = str(tmp_path / "heard")
    env = checkpointing_env(make_env, tmp_path, 2)
    build(env, EVENTS, function=ListeningCounter(heard))
    result = env.execute("listener")
    with open(heard) as f:
        ids = [int(x) for x in f.read().split()]
    done = completed(result.get_checkpoint_stats())
    assert ids and set(ids) <= set(done)
    assert sorted(set(ids)) == done[: len(set(ids))]  # in order, none skipped
    assert all(ids.count(i) == 2 for i in set(ids))  # every parallel instance heard each one


@pytest.mark.slow
def test_a_checkpoint_slower_than_its_timeout_expires_and_the_job_goes_on(make_env, tmp_path, monkeypatch):
    env = checkpointing_env(make_env, tmp_path, 2)
    env.get_checkpoint_config().set_checkpoint_timeout(1000)
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(5)
    real = CheckpointStorageAccess.write_bytes
    slow = {"n": 0}

    def slow_once(self, rel, data):
        if rel.endswith("_metadata") and slow["n"] == 0:  # the coordinator writing _metadata
            slow["n"] += 1
            time.sleep(2.5)  # 1.5 s past the checkpoint's timeout
        return real(self, rel, data)

    monkeypatch.setattr(CheckpointStorageAccess, "write_bytes", slow_once)
    sink = build(env, EVENTS)
    result = env.execute("slow upload")
    stats = result.get_checkpoint_stats()
    expired = [s for s in stats if s.status == "FAILED"]
    assert expired and "expired" in expired[0].failure_reason
    assert completed(stats)
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)


class KillsItsWorker(Counting):
    """Kills the Python worker process running it, once (as an OOM killer or a crash would)."""

    def __init__(self, flag: str):
        super().__init__()
        self.flag = flag

    def process_element(self, value, ctx):
        if value == 900 * 7919 % 100_003 and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            os._exit(137)
        yield from super().process_element(value, ctx)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_killed_worker_process_loses_nothing(make_env, tmp_path, backend):
    env = checkpointing_env(make_env, tmp_path, 2, backend)
    flag = str(tmp_path / "killed")
    sink = build(env, EVENTS, function=KillsItsWorker(flag))
    result = env.execute("killed worker")
    assert os.path.exists(flag), "the worker was never killed"
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)
