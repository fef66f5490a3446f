"""Failures on the continuous runtime (issue 18, DESIGN 4b): a slot's Python worker killed with
SIGKILL, an executor JVM killed on ``local-cluster``, the driver killed and the job resumed
with ``flowpoint run --resume``, a worker of the standalone cluster lost mid-run (and, lost for
good, a restart refused naming the slots it needs and has). Each run ends
with the failure-free result: the exact keyed state, and every output exactly once (the
collecting sink goes back to the checkpoint on a restore; the file sink commits with
checkpoints), or the seed's windowed counts equal to pandas'.

Every wait has a timeout: a hung run fails the test, it never hangs it.
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
from test_continuous import completed, continuous_env, state_of

from flowpoint import RestartStrategies

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = os.path.join(HERE, "continuous_jobs.py")
EVENTS = 3_000


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    msg = f"timed out after {timeout:.0f} s waiting for {what}"
    raise AssertionError(msg)


class WritesItsPid(Counting):
    """Counts (checkpoint_jobs.Counting) and writes the pid of the process running it (the slot's
    Python worker) into ``directory``, once per process."""

    def __init__(self, directory: str):
        super().__init__()
        self.directory = directory

    def open(self, ctx):
        super().open(ctx)
        with open(os.path.join(self.directory, str(os.getpid())), "w"):
            pass


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_slot_worker_killed_with_sigkill_loses_nothing(make_env, tmp_path, backend):
    """kill -9 of the Python worker running a slot, after two checkpoints: the run ends, the
    restart strategy restarts it from the last completed checkpoint, and the result is exact."""
    pids = tmp_path / "pids"
    pids.mkdir()
    env = continuous_env(make_env, tmp_path, 2, backend)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
    sink = build(env, EVENTS, rate=1500, function=WritesItsPid(str(pids)))
    client = env.execute_async("slot worker killed")
    try:
        wait_for(lambda: len(completed(client.get_checkpoint_stats())) >= 2 or client.is_done(), 120, "two checkpoints")
        assert not client.is_done(), "the job ended before the kill"
        workers = [int(p) for p in os.listdir(pids) if _alive(int(p))]
        assert workers, "no slot's Python worker wrote its pid"
        victim = max(workers)
        os.kill(victim, signal.SIGKILL)
        result = client.wait(300)
    finally:
        if not client.is_done():
            client.cancel()
            client.wait_until_done(60)
    assert not _alive(victim)
    assert client.progress().restarts >= 1, "the run was never restarted"
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)


def _json_line(stdout: str) -> dict:
    return json.loads(next(ln for ln in reversed(stdout.splitlines()) if ln.startswith("{")))


def _lines(directory) -> list[str]:
    """The committed lines of a file sink's part files (not hidden in-progress pieces, not late/)."""
    from test_seed_example import read_lines

    return read_lines(str(directory), skip="late")


def _count_lines_exact(directory, events: int) -> None:
    got = sorted(tuple(int(x) for x in ln.split("\t")) for ln in _lines(directory))
    want = expected_outputs(events)
    assert len(got) == len(want), f"{len(got)} committed lines, {len(want)} outputs"
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["rocksdb"])  # the other backend: the tests around it (suite time)
def test_an_executor_killed_on_local_cluster_loses_nothing(tmp_path, backend):
    """local-cluster[2,1,1024]: two executors of one core each, one slot each. A slot's function
    kills its executor's JVM (kill -9): Spark loses the executor and the barrier stage, the run
    restarts from the last completed checkpoint once the cluster has given the job a new
    executor, and state, collected outputs and committed files are exact."""
    args = [sys.executable, JOBS, "--spark-master", "local-cluster[2,1,1024]", "--root", str(tmp_path), "--backend", backend,
            "--events", str(EVENTS), "--rate", "1000", "--kill-executor-at", "2400"]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = _json_line(proc.stdout)
    assert out["killed"], "the executor was never killed"
    assert "Restarting from checkpoint" in proc.stderr, proc.stderr[-3000:]
    assert out["exact_state"] and out["exact_outputs"], out
    _count_lines_exact(tmp_path / "out", EVENTS)


def _metadata_count(root) -> int:
    return sum("_metadata" in files for _, _, files in os.walk(root))


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "unaligned"), [("hashmap", False), ("rocksdb", True)])  # other pairs: the tests around it (suite time)
def test_driver_killed_then_resume_continues_exactly(tmp_path, backend, unaligned):
    """kill -9 of the driver of a continuous run after two checkpoints; ``flowpoint run --resume``
    restores the latest one on the continuous runtime and ends with the exact state; the file
    sink's committed lines of both runs are every output exactly once. Unaligned: the formatting
    map is slowed (3 ms a line) so the counting stage backpressures its input, and the restored
    checkpoint holds records in flight, replayed by the resumed run."""
    events = 6_000
    common = ["--spark-master", "local[2]", "--root", str(tmp_path), "--backend", backend, "--events", str(events)]
    if unaligned:
        common += ["--conf=execution.checkpointing.unaligned=true", "--slow-ms", "3"]
    first = subprocess.Popen([sys.executable, JOBS, *common, "--rate", "1500"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=HERE)
    try:
        wait_for(lambda: _metadata_count(tmp_path / "ck") >= 2 or first.poll() is not None, 300, "two checkpoints of the first run")
        assert first.poll() is None, "the first run ended before the kill: " + first.stderr.read().decode()[-3000:]
    finally:
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=60)
    (job_dir,) = os.listdir(tmp_path / "ck")
    before = max(int(n[4:]) for n in os.listdir(tmp_path / "ck" / job_dir) if n.startswith("chk-") and os.path.exists(tmp_path / "ck" / job_dir / n / "_metadata"))
    if unaligned:
        meta = json.loads((tmp_path / "ck" / job_dir / f"chk-{before}" / "_metadata").read_text())
        assert meta.get("channel_state"), "the checkpoint the resume restores holds no records in flight"
    # --resume= (an empty JOB-ID): with a bare --resume, argparse takes the script for the id
    # and then refuses the script's options
    cli = [sys.executable, "-m", "flowpoint.cli", "run", "--resume=", JOBS, *common]
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "restoring checkpoint" in proc.stderr
    out = _json_line(proc.stdout)
    assert out["exact_state"], out
    assert out["checkpoints"] and out["checkpoints"][0] == before + 1
    _count_lines_exact(tmp_path / "out", events)


# -- the standalone cluster: two workers of one core each, two slots (tests/standalone_cluster.py)


def _on_cluster(cluster, tmp_path, job: str, events: int, rate: int, backend: str = "hashmap") -> list[str]:
    """The job's command line on the standalone cluster: working files on each worker's private
    disk; checkpoints, committed working state (state.working.remote-dir: the final state is read
    back by a Spark job whose partitions may run on the other worker) and the file sink's output
    on the disk every process shares."""
    conf = [f"--conf={k}={v}" for k, v in cluster.driver_conf().items() if k != "spark.master"]
    conf.append(f"--conf=state.working.remote-dir=file://{tmp_path / 'remote'}")
    return [sys.executable, JOBS, "--spark-master", cluster.master_url, "--working-dir", cluster.working_dir, "--root", str(tmp_path),
            "--backend", backend, "--job", job, "--events", str(events), "--rate", str(rate), *conf]


def _kill_a_worker_mid_run(cluster, tmp_path, args: list[str], restart: bool) -> subprocess.CompletedProcess:
    """Start the job, kill worker 1 (with its executor and slot) after two checkpoints, start it
    again if ``restart``; returns the finished driver process."""
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)
    try:
        wait_for(lambda: _metadata_count(tmp_path / "ck") >= 2 or proc.poll() is not None, 300, "two checkpoints")
        assert proc.poll() is None, "the job ended before the kill: " + proc.stderr.read()[-3000:]
        cluster.kill_worker(1)
        if restart:
            cluster.restart_worker(1)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=60)
        cluster.ensure_workers()
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap"])  # the other backend: the tests around it (suite time)
def test_a_worker_lost_mid_run_on_two_workers_costs_no_record(standalone_cluster, tmp_path, backend):
    """A keyed count across both workers (a slot on each); worker 1 is lost with its executor
    and working files after two checkpoints and comes back: the run restarts from the last
    completed checkpoint once both slots are there again, exact."""
    events = 4_000
    proc = _kill_a_worker_mid_run(standalone_cluster, tmp_path, _on_cluster(standalone_cluster, tmp_path, "count", events, 800, backend), restart=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Restarting from checkpoint" in proc.stderr, proc.stderr[-3000:]
    out = _json_line(proc.stdout)
    assert out["exact_state"] and out["exact_outputs"], out
    _count_lines_exact(tmp_path / "out", events)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["rocksdb"])  # the other backend: the tests around it (suite time)
def test_seed_windows_on_two_workers_with_a_worker_lost_equal_pandas(standalone_cluster, tmp_path, backend):
    """Seed 000's windowed job (one source task; timestamps, windows and sinks on both workers)
    with worker 1 lost mid-run and back: every window fires once with pandas' count."""
    from continuous_jobs import LATENESS_MS, clicks

    events = 30_000  # five seconds of reading at 6,000 a second: the worker is lost after two checkpoints (100 ms apart)
    proc = _kill_a_worker_mid_run(standalone_cluster, tmp_path, _on_cluster(standalone_cluster, tmp_path, "windows", events, 6_000, backend), restart=True)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "Restarting from checkpoint" in proc.stderr, proc.stderr[-3000:]
    rows = [ln.split("\t") for ln in _lines(tmp_path / "out")]
    got: dict = {}
    for start, end, channel, behavior, n in rows:
        key = (int(start), int(end), channel, behavior)
        assert key not in got, f"window {key} fired twice"
        got[key] = int(n)
    df = clicks().batch(0, events).to_pandas()
    assert LATENESS_MS < 50_000  # no event can be late
    df["start"] = df["ts"] // 60_000 * 60_000
    df["end"] = df["start"] + 60_000
    want = {tuple(k): int(n) for k, n in df.groupby(["start", "end", "channel", "behavior"]).size().items()}
    wrong = sorted((k, got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert not wrong, f"{len(wrong)} of {len(want)} windows differ (window, job, pandas): {wrong[:10]}"
    assert not _lines(tmp_path / "out" / "late")


@pytest.mark.slow
def test_a_worker_lost_for_good_fails_the_job_naming_the_slots(standalone_cluster, tmp_path):
    """Worker 1 lost and not back: one slot is left for a job that needs two. The restart is
    refused naming both numbers (after waiting slot.request.timeout for executors to come back),
    instead of a barrier stage Spark can never schedule."""
    args = _on_cluster(standalone_cluster, tmp_path, "count", 4_000, 800) + ["--conf=slot.request.timeout=8 s"]
    t0 = time.monotonic()
    proc = _kill_a_worker_mid_run(standalone_cluster, tmp_path, args, restart=False)
    assert proc.returncode != 0, proc.stdout
    assert "needs 2 task slots (its largest parallelism) but Spark offers 1" in proc.stderr, proc.stderr[-4000:]
    assert time.monotonic() - t0 < 300
