"""An I/O error writing a state, delta or checkpoint file names the path and the operation
(issue 17, case 8: a full disk under the remote working directory failed with a bare
``OSError: [Errno 28]``)."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap
import time

import pytest

from flowpoint.checkpoint import part_writer
from flowpoint.errors import CheckpointError, StateIOError
from flowpoint.spark.failures import is_recoverable, task_error


def _disk_full(monkeypatch):
    real = os.write

    def write(fd, data):
        if len(data) > 16:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(fd, data)

    monkeypatch.setattr(os, "write", write)


def test_a_full_disk_writing_a_durable_file_names_the_path(tmp_path, monkeypatch):
    target = tmp_path / "durable" / "run" / "stage-1" / "part-0" / "delta-00000003-t.pkl"
    _disk_full(monkeypatch)
    with pytest.raises(StateIOError) as info:
        part_writer.write_working_file(f"file://{target}", b"x" * 1000)
    err = info.value
    assert err.path == str(target) and str(target) in str(err)
    assert "cannot write the working-state file" in str(err) and "[Errno 28]" in str(err) and "full" in str(err)
    assert isinstance(err, CheckpointError) and is_recoverable(err)  # space may be freed
    assert os.listdir(target.parent) == []  # no partial temporary file left to take more space


def test_uploading_a_base_names_the_file(tmp_path, monkeypatch):
    local = tmp_path / "local"
    local.mkdir()
    (local / "000001.sst").write_bytes(b"y" * 100)
    _disk_full(monkeypatch)
    with pytest.raises(StateIOError) as info:
        part_writer.upload_working_dir(str(local), str(tmp_path / "remote" / "base-1"))
    assert info.value.path == str(tmp_path / "remote" / "base-1" / "000001.sst")


def test_the_error_keeps_its_class_and_path_across_processes():
    import pickle

    err = StateIOError.of("write the working-state file", "/mnt/full/x.pkl", OSError(errno.ENOSPC, "No space left on device"))
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is StateIOError and again.path == "/mnt/full/x.pkl" and str(again) == str(err)
    text = f"Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nflowpoint.errors.StateIOError: {err}\n"
    crossed = task_error(text, 2)
    assert type(crossed) is StateIOError and "/mnt/full/x.pkl" in str(crossed) and is_recoverable(crossed)


# -- through the CLI, with a full filesystem under state.working.remote-dir --------------------------

JOB = """
from flowpoint import CollectSink, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor


class Keep(KeyedProcessFunction):
    def open(self, ctx):
        self.text = ctx.get_state(ValueStateDescriptor("text"))

    def process_element(self, value, ctx):
        self.text.update(str(value) * 20_000)  # about 100 KiB of state per epoch: more than the disk holds
        yield value


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.from_collection(list(range(10_000, 10_040))).key_by(lambda x: x).process(Keep()).uid("keep").sink_to(CollectSink())
env.execute("full disk")
"""


@pytest.fixture
def tiny_tmpfs(tmp_path):
    if os.name != "posix" or os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mount = tmp_path / "full"
    mount.mkdir(mode=0o700)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k,mode=0700", "tmpfs", str(mount)], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.slow
def test_flowpoint_run_names_the_path_when_the_remote_dir_is_full(tmp_path, tiny_tmpfs):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(JOB))
    cli = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[1]", "-D", f"state.working.dir={tmp_path / 'w'}",
           "-D", f"state.working.remote-dir={tiny_tmpfs}", "-D", "restart-strategy.type=fixed-delay",
           "-D", "restart-strategy.fixed-delay.attempts=1", "-D", "restart-strategy.fixed-delay.delay=100 ms", str(job)]
    started = time.monotonic()
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("flowpoint: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert f"cannot write the working-state file {tiny_tmpfs}/" in errors[0] and "[Errno 28]" in errors[0], errors[0]
    # recoverable: the restart strategy ran (once), and its message names the path too
    restarts = [ln for ln in proc.stderr.splitlines() if "Restarting" in ln]
    assert len(restarts) == 1 and str(tiny_tmpfs) in restarts[0], proc.stderr[-3000:]
    assert time.monotonic() - started < 120
