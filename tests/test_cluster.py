"""A stateful job on real separate executors (local-cluster): partitions move between executor
processes from epoch to epoch and still find their committed state."""

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.slow
def test_keyed_state_across_two_executors(tmp_path):
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "cluster_job.py"), "local-cluster[2,1,1024]", str(tmp_path / "working")],
        capture_output=True, text=True, timeout=600, cwd=HERE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{\"state\"")))
    assert out["epochs"] == 10
    assert out["outputs"] == 20_000
    assert out["state"] == {str(k): len(range(k, 20_000, 101)) for k in range(101)}


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap"])  # RocksDB loses a whole host in test_multihost
def test_a_killed_executor_loses_nothing(tmp_path, backend):
    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "cluster_kill_job.py"), "local-cluster[2,1,1024]", str(tmp_path), backend],
        capture_output=True, text=True, timeout=600, cwd=HERE,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert out == {"killed": True, "exact": True}
