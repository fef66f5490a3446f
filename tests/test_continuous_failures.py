"""Failures on the continuous runtime (issue 18, DESIGN 4b): a slot's Python worker killed with
SIGKILL, an executor JVM killed on ``local-cluster``, the driver killed and the job resumed
with ``flowpoint run --resume``, a worker of the standalone cluster lost mid-run. Each run ends
with the failure-free result: the exact keyed state, and every output exactly once (the
collecting sink goes back to the checkpoint on a restore; the file sink commits with
checkpoints), or the seed's windowed counts equal to pandas'.

Every wait has a timeout: a hung run fails the test, it never hangs it.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state
from test_continuous import completed, continuous_env, state_of

from flowpoint import RestartStrategies

HERE = os.path.dirname(os.path.abspath(__file__))
EVENTS = 3_000


def wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")


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
