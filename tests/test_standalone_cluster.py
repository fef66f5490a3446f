"""The standalone cluster fixture (tests/standalone_cluster.py) behaves like two hosts: one
executor per worker, each seeing only its own files at the common working path, the driver a
third directory; a killed worker takes all its processes with it and comes back on restart."""

import json
import os
import subprocess
import sys
import time
import uuid

import pytest
from standalone_cluster import process_alive

HERE = os.path.dirname(os.path.abspath(__file__))


def _worker_of(cluster, cwd):
    owners = [i for i in range(cluster.workers) if cwd.startswith(cluster.worker_dir(i) + os.sep)]
    assert len(owners) == 1, cwd
    return owners[0]


@pytest.mark.slow
def test_each_worker_sees_only_its_own_working_dir(standalone_cluster):
    cluster = standalone_cluster
    path = os.path.join(cluster.working_dir, f"isolation-{uuid.uuid4().hex[:8]}")
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "standalone_isolation_job.py"), json.dumps(cluster.driver_conf()), path],
        capture_output=True, text=True, timeout=300, cwd=HERE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["executors"] == 2
    written = {0: set(), 1: set()}
    for cwd, name in out["writes"]:
        written[_worker_of(cluster, cwd)].add(name)
    assert written[0] and written[1], "both executors ran tasks"
    assert len(written[0] | written[1]) == 8
    for cwd, names in out["lists"]:
        assert set(names) == written[_worker_of(cluster, cwd)]  # its own markers, none of the other's
    assert out["driver"] is None  # the driver's directory at that path never saw a marker
    rel = os.path.relpath(path, cluster.working_dir)
    for i in range(2):  # what each worker saw at the common path is its private directory
        assert set(os.listdir(os.path.join(cluster.private_dir(i), rel))) == written[i]


@pytest.mark.slow
def test_kill_and_restart_a_worker(standalone_cluster):
    cluster = standalone_cluster
    pids = cluster.worker_pids(1)
    assert len(pids) >= 3  # unshare, namespace init, worker JVM
    old_port = cluster.worker_port(1)
    try:
        cluster.kill_worker(1)
        assert not any(process_alive(p) for p in pids)  # worker JVM and everything it started
        assert cluster.worker_pids(1) == []
        deadline = time.monotonic() + 30
        while old_port in cluster.alive_worker_ports() and time.monotonic() < deadline:
            time.sleep(0.1)
        assert old_port not in cluster.alive_worker_ports()  # the master noticed at once
    finally:
        cluster.restart_worker(1)
    assert cluster.worker_port(1) in cluster.alive_worker_ports()
    assert len(cluster.worker_pids(1)) >= 3
    assert len(cluster.alive_worker_ports()) == 2
