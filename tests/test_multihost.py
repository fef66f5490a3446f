"""flowpoint on a Spark standalone cluster whose two workers share no working directory (as two
hosts: tests/standalone_cluster.py), checkpoints and durable working state on an S3-compatible
server (moto) on loopback. Each job runs as its own driver process (tests/cluster_state_job.py).

What a user relies on: exact results with both backends, the same output as on one host, a
worker lost mid-run costs no record and no double count, local files lost between epochs are
rebuilt from shared storage, savepoints move between the cluster and one host at another
parallelism, and without shared storage a job fails naming the file instead of computing a
wrong number.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
import uuid

import pyarrow.fs as pafs
import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOB = os.path.join(HERE, "cluster_state_job.py")
BUCKET = "flowpoint-multihost"

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def s3():
    """A moto S3 server on a loopback port (started and stopped by this fixture)."""
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    logging.getLogger("werkzeug").setLevel(logging.WARNING)  # one log line per request otherwise
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    admin = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                              endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True)
    admin.create_dir(BUCKET)
    yield f"http://127.0.0.1:{port}", admin
    server.stop()


def _args(cluster, s3, backend: str, job: str = "count", *extra: str, local: bool = False) -> list[str]:
    endpoint, _ = s3
    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
    if local:
        master, working, conf = "local[2,4]", os.path.join(cluster.base_dir, "driver-local", uuid.uuid4().hex[:6]), []
    else:
        master, working = cluster.master_url, cluster.working_dir
        conf = [f"--conf={k}={v}" for k, v in cluster.driver_conf().items() if k != "spark.master"]
    return [sys.executable, JOB, "--master", master, "--working-dir", working, "--checkpoints", f"{prefix}/ck",
            "--s3-endpoint", endpoint, "--backend", backend, "--job", job, *conf, *extra]


def _run(args: list[str], timeout: float = 600) -> dict:
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _run_all(commands: list[list[str]], timeout: float = 600) -> list[dict]:
    """Several jobs at once, each a driver process of its own: their results, in order."""
    procs = [subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE) for args in commands]
    out = []
    try:
        for proc in procs:
            stdout, stderr = proc.communicate(timeout=timeout)
            assert proc.returncode == 0, stderr[-4000:]
            out.append(json.loads(stdout.strip().splitlines()[-1]))
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
    return out


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_keyed_count_is_exact_on_two_hosts(standalone_cluster, s3, backend):
    """Exact state and outputs; the working files are gone on every host at the end; and
    locality: a stateful partition's next task runs on the host that holds its state, so nearly
    every task finds its state in its Python worker (only the first epoch builds it)."""
    cluster = standalone_cluster
    before = {i: set(os.listdir(cluster.private_dir(i))) for i in range(cluster.workers)}
    out = _run(_args(cluster, s3, backend, "count", "-p", "4", "--events", "4000", "--max-records", "200"))
    assert out["exact_state"] and out["exact_outputs"]
    for i in range(cluster.workers):  # the job's working files are gone on every host
        assert set(os.listdir(cluster.private_dir(i))) <= before[i]
    tasks, in_memory = out["metrics"]["stateTasks"], out["metrics"]["stateTasksInMemory"]
    assert out["epochs"] >= 15 and tasks == 4 * out["epochs"]
    assert in_memory >= tasks - 4 - 2, f"{in_memory} of {tasks} stateful tasks found their state in memory"


def test_windows_on_two_hosts_equal_one_host(standalone_cluster, s3):
    extra = ("-p", "3", "--events", "4000", "--max-records", "500")
    # HashMap on one host, RocksDB on two (HashMap across hosts: test_keyed_count_is_exact_on_two_hosts);
    # the two jobs run at once (each its own driver process), as they share nothing
    local, cluster = _run_all([_args(standalone_cluster, s3, "hashmap", "windows", *extra, local=True),
                               _args(standalone_cluster, s3, "rocksdb", "windows", *extra)])
    assert sum(w[4] for w in local["windows"]) + local["late"] == 4000
    assert cluster["windows"] == local["windows"]
    assert cluster["late"] == local["late"]


def _start(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=HERE)


def _wait_for_epoch(proc: subprocess.Popen, epoch: int, timeout: float = 300) -> list[str]:
    """Read the driver's progress lines until epoch ``epoch`` is reported."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stderr.readline()
        if not line:
            break
        lines.append(line)
        if f"epoch {epoch}:" in line:
            return lines
    msg = f"the job did not reach epoch {epoch}:\n" + "".join(lines[-40:])
    raise AssertionError(msg)


@pytest.mark.parametrize("backend", ["rocksdb"])  # HashMap loses an executor in test_cluster
def test_a_worker_killed_mid_run_costs_no_record(standalone_cluster, s3, backend):
    cluster = standalone_cluster
    # 7.5 s of reading at 400 a second; the worker is lost at epoch 4 (some 800 records in)
    proc = _start(_args(cluster, s3, backend, "count", "-p", "4", "--events", "3000", "--rate", "400"))
    try:
        _wait_for_epoch(proc, 4)
        cluster.kill_worker(1)  # the host is lost with its executor, working files and shuffle output
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.ensure_workers()
    assert proc.returncode == 0, stderr[-4000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["exact_state"] and out["exact_outputs"]


@pytest.mark.parametrize("backend", ["rocksdb"])  # HashMap keeps only copies of durable files on disk
def test_local_files_removed_between_epochs_are_rebuilt_from_shared_storage(standalone_cluster, s3, backend):
    cluster = standalone_cluster
    # 5 s of reading at 500 a second; the files go at epoch 3 (some 600 records in)
    proc = _start(_args(cluster, s3, backend, "count", "-p", "2", "--events", "2500", "--rate", "500",
                        "--conf=execution.progress.interval=0"))
    try:
        _wait_for_epoch(proc, 3)
        for i in range(cluster.workers):  # every executor loses its local working files
            for name in os.listdir(cluster.private_dir(i)):
                shutil.rmtree(os.path.join(cluster.private_dir(i), name), ignore_errors=True)
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, stderr[-4000:]
    out = json.loads(stdout.strip().splitlines()[-1])
    assert out["exact_state"] and out["exact_outputs"]


def test_savepoints_move_between_the_cluster_and_one_host(standalone_cluster, s3):
    cluster = standalone_cluster
    target = f"s3://{BUCKET}/savepoints-{uuid.uuid4().hex[:6]}"
    # taken on the cluster at parallelism 2 (RocksDB); restored on one host at 3 (HashMap), which
    # takes another savepoint; that one restored on the cluster at 2 (RocksDB)
    taken = _run(_args(cluster, s3, "rocksdb", "count", "-p", "2", "--events", "3000", "--savepoint-dir", target))
    assert taken["exact_state"]
    moved = _run(_args(cluster, s3, "hashmap", "count", "-p", "3", "--events", "3000", "--restore", taken["savepoint"],
                       "--savepoint-dir", target, local=True))
    assert moved["exact_state"]
    assert moved["savepoint"] != taken["savepoint"]
    back = _run(_args(cluster, s3, "rocksdb", "count", "-p", "2", "--events", "3000", "--restore", moved["savepoint"]))
    assert back["exact_state"]


def test_without_shared_storage_a_moved_partition_fails_naming_the_file(standalone_cluster, s3, tmp_path):
    """Durable working files on each worker's private disk (state.working.remote-dir at the
    working path every process sees privately; a cluster's checkpoint directory would be the
    shared default). As soon as a partition runs on the other worker (Spark moves them freely; at
    the latest when a worker is lost) it cannot read them: the job fails with the file's name,
    never a wrong count."""
    cluster = standalone_cluster
    args = _args(cluster, s3, "hashmap", "count", "-p", "2", "--events", "6000", "--rate", "400",
                 "--conf=restart-strategy.type=none", f"--conf=state.working.remote-dir={cluster.working_dir}/durable")
    args[args.index("--checkpoints") + 1] = str(tmp_path / "ck")
    args[args.index("--s3-endpoint"):args.index("--s3-endpoint") + 2] = []
    proc = _start(args)
    lines: list[str] = []
    try:
        while True:  # until epoch 3 (then a worker is lost) or the job's end, whichever is first
            line = proc.stderr.readline()
            if not line:
                break
            lines.append(line)
            if "epoch 3:" in line:
                cluster.kill_worker(1)
                break
        stdout, stderr = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            proc.kill()
        cluster.ensure_workers()
    stderr = "".join(lines) + stderr
    assert proc.returncode != 0, stdout
    assert "only correct if every executor sees the same directory" in stderr  # warned at start
    assert "StateNotFoundError: cannot read the committed working" in stderr, stderr[-4000:]
    assert "/durable/" in stderr and ".pkl" in stderr  # the file is named
