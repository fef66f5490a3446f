"""On a cluster, a ``file://`` checkpoint directory is the durable root of committed working
state by default, as Flink assumes every process sees the checkpoint directory (an NFS mount):
a job on the standalone two-worker cluster (private working directories, a checkpoint
directory both workers see, no ``state.working.remote-dir``) runs to an exact end on both
runtimes, where it used to fail after two epochs with StateNotFoundError."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
JOBS = os.path.join(HERE, "continuous_jobs.py")


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_a_file_checkpoint_dir_is_the_durable_root_on_a_cluster(standalone_cluster, tmp_path, runtime):
    cluster = standalone_cluster
    conf = [f"--conf={k}={v}" for k, v in cluster.driver_conf().items() if k != "spark.master"]
    conf += [f"--conf=state.checkpoints.dir=file://{tmp_path / 'ck'}", f"--conf=execution.runtime={runtime}"]
    args = [sys.executable, JOBS, "--spark-master", cluster.master_url, "--working-dir", cluster.working_dir,
            "--root", str(tmp_path), "--job", "count", "--events", "3000", "--rate", "3000", *conf]
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600, cwd=HERE)
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["exact_state"] and out["exact_outputs"], out
    assert "StateNotFoundError" not in proc.stderr
    assert "working state is kept durable in the local directory" not in proc.stderr  # no warning: it is shared
