"""A FileSink piece changed by someone else (issue 25, item 5), on both runtimes.

* Changed before a checkpoint records it: found at that checkpoint (the pre-commit), a
  recoverable failure: the job restarts from its last completed checkpoint and the finished
  output holds every record once.
* Changed after the checkpoint that recorded it completed, found when its part file is committed
  (here at the end of the job, as in the issue: the default rolling policy keeps the part file
  open): the job FAILS, publishes nothing of the piece, and keeps every checkpoint the job
  registry lists.

The tampering is done on the driver at a chosen moment (a hook around the sink's own method,
so the sink's checks are what runs), with the pieces as the tasks wrote them on disk.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest
from checkpoint_jobs import record
from test_file_sink import visible

from flowpoint import (
    BucketAssigner,
    DataGeneratorSource,
    Encoder,
    FileSink,
    RestartStrategies,
    RollingPolicy,
)
from flowpoint.driver.registry import JobRegistry
from flowpoint.errors import CorruptSinkFileError, JobExecutionError

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

EVENTS = 1_200
RUNTIMES = {
    "epoch": {"execution.runtime": "epoch"},
    "continuous": {"execution.runtime": "continuous", "execution.buffer-timeout": 5},
}
EXPECTED = Counter(str(record(i)) for i in range(EVENTS))


def as_text(value: int) -> str:
    return str(value)


def start(make_env, tmp_path, monkeypatch, runtime: str, policy: RollingPolicy, restarts: int):
    """numbers (rate-limited: the job runs about a second and completes checkpoints all along)
    -> text -> FileSink, parallelism 2, 3 checkpoints retained; the job registry in tmp_path."""
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"), **RUNTIMES[runtime])
    env.get_configuration().set("state.checkpoints.num-retained", 3)
    env.enable_checkpointing(1 if runtime == "epoch" else 60)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(restarts, 100) if restarts else RestartStrategies.no_restart())
    files = (FileSink.for_row_format(str(tmp_path / "out"), Encoder.simple_string_encoder())
             .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner()).with_rolling_policy(policy).build())
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS, rate_limit_per_second=1500), source_name="numbers").uid("numbers")
        .map(as_text).uid("text")
        .sink_to(files).uid("files")
    )
    return env.execute_async(f"tampered pieces ({runtime})")


def forge(path: str) -> None:
    with open(path, "ab") as f:
        f.write(b"forged\n")


def forge_new_pieces(monkeypatch, times: int, every: int = 3) -> list[str]:
    """On the driver, right after every ``every``-th commit with output, append a line to the
    piece it just committed (before any checkpoint records it), ``times`` times in all."""
    original = FileSink.on_epoch_committed
    forged: list[str] = []
    commits = [0]

    def hooked(self, epoch, payloads, parallelism):
        original(self, epoch, payloads, parallelism)
        if any(p for _, p in payloads):
            commits[0] += 1
            if len(forged) < times and commits[0] % every == 0:
                path = os.path.join(self.base_path, self._driver_pending[-1][2])
                forge(path)
                forged.append(path)

    monkeypatch.setattr(FileSink, "on_epoch_committed", hooked)
    return forged


def forge_checkpointed_pieces(monkeypatch, after: int = 2) -> list[str]:
    """On the driver, when the ``after``-th checkpoint has completed, append a line to every piece
    of subtask 0's open part file (pieces a completed checkpoint recorded)."""
    original = FileSink.notify_checkpoint_complete
    forged: list[str] = []
    calls = [0]

    def hooked(self, checkpoint_id):
        original(self, checkpoint_id)
        calls[0] += 1
        if calls[0] == after:
            for part in self._driver_open.values():
                if part["subtask"] == 0:
                    for rel, _size, _sha in part["pieces"]:
                        forge(os.path.join(self.base_path, rel))
                        forged.append(os.path.join(self.base_path, rel))

    monkeypatch.setattr(FileSink, "notify_checkpoint_complete", hooked)
    return forged


def ended_entry(client, timeout: float = 30):
    """The job's registry entry once it records the end of the job."""
    registry = JobRegistry()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        e = registry.read(client.get_job_id())
        if e is not None and e.ended:
            return e
        time.sleep(0.05)
    pytest.fail("the job registry never recorded the end of the job")


def assert_checkpoints_kept(client, tmp_path, entry) -> None:
    """Every checkpoint the registry lists, and every completed one retention keeps, is on disk
    and complete."""
    job_dir = tmp_path / "ck" / client.get_job_id()
    completed = sorted(s.checkpoint_id for s in client.get_checkpoint_stats() if s.status == "COMPLETED")
    assert completed, "the job completed no checkpoint"
    assert entry.last_checkpoint_id == completed[-1]
    path = entry.last_checkpoint_path
    assert path and os.path.isfile(os.path.join(path.removeprefix("file://"), "_metadata")), (path, os.listdir(job_dir) if job_dir.exists() else "no job dir")
    for cid in completed[-3:]:  # state.checkpoints.num-retained: 3
        assert (job_dir / f"chk-{cid}" / "_metadata").is_file(), (cid, sorted(os.listdir(job_dir)))


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_piece_changed_before_its_checkpoint_restarts_the_job_and_the_output_is_exact(make_env, tmp_path, monkeypatch, runtime):
    forged = forge_new_pieces(monkeypatch, times=1)
    client = start(make_env, tmp_path, monkeypatch, runtime, RollingPolicy.on_checkpoint_rolling_policy(), restarts=2)
    client.wait(240)
    assert forged, "no piece was forged"
    [failure] = client.get_exception_history()
    assert failure.restarted and failure.exception_name.endswith("CorruptSinkFileError") and forged[0] in failure.message
    assert "before a checkpoint recorded it" in failure.message
    assert client.progress().restarts == 1
    got = Counter(line for text in visible(tmp_path / "out").values() for line in text.splitlines())
    assert got == EXPECTED, f"duplicates: {sum((got - EXPECTED).values())}, missing: {sum((EXPECTED - got).values())}"
    # a FINISHED job discards its checkpoints (docs/architecture.md, section 7): the one the
    # restart restored was on disk when it restored it
    assert ended_entry(client).status == "FINISHED"


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_job_whose_restarts_give_up_on_changed_pieces_keeps_its_checkpoints(make_env, tmp_path, monkeypatch, runtime):
    forged = forge_new_pieces(monkeypatch, times=2)
    client = start(make_env, tmp_path, monkeypatch, runtime, RollingPolicy.on_checkpoint_rolling_policy(), restarts=1)
    with pytest.raises(CorruptSinkFileError) as info:
        client.wait(240)
    assert len(forged) == 2 and info.value.path == forged[1]
    assert client.progress().restarts == 1
    entry = ended_entry(client)
    assert entry.status == "FAILED"
    assert_checkpoints_kept(client, tmp_path, entry)
    for text in visible(tmp_path / "out").values():
        assert "forged" not in text


@pytest.mark.parametrize("runtime", list(RUNTIMES))
def test_a_piece_changed_after_its_checkpoint_fails_the_job_at_the_commit_and_keeps_the_checkpoints(make_env, tmp_path, monkeypatch, runtime):
    """The issue's case: the default rolling policy keeps the part files open, so the job's end
    commits them. It used to discard the checkpoints (FINISHED) before the sink failed it."""
    forged = forge_checkpointed_pieces(monkeypatch)
    client = start(make_env, tmp_path, monkeypatch, runtime, RollingPolicy.default_rolling_policy(), restarts=0)
    with pytest.raises(CorruptSinkFileError, match=r"changed after a checkpoint recorded it \(its pre-commit\)") as info:
        client.wait(240)
    assert forged and info.value.path in forged
    assert not info.value.recoverable and client.progress().restarts == 0
    entry = ended_entry(client)
    assert entry.status == "FAILED"
    assert_checkpoints_kept(client, tmp_path, entry)
    # nothing of subtask 0's changed part file is published; subtask 1's part file is finished
    files = visible(tmp_path / "out")
    assert len(files) == 1 and "forged" not in next(iter(files.values()))
    assert all(os.path.exists(p) for p in forged)  # the evidence stays


def test_any_failure_of_a_sink_at_the_end_of_a_job_fails_it_and_keeps_the_checkpoints(make_env, tmp_path, monkeypatch):
    """Not only flowpoint's errors: an I/O error while the last part files are finished leaves
    the output unfinished, so the job FAILS (it used to be FINISHED, its checkpoints discarded)."""
    original = FileSink.on_job_end

    def hooked(self, status):
        if status == "FINISHED":
            raise OSError(28, "No space left on device")
        original(self, status)

    monkeypatch.setattr(FileSink, "on_job_end", hooked)
    client = start(make_env, tmp_path, monkeypatch, "epoch", RollingPolicy.default_rolling_policy(), restarts=0)
    with pytest.raises(JobExecutionError, match=r"could not make the job's last output final: OSError: .*No space left.*keeps its checkpoints"):
        client.wait(240)
    entry = ended_entry(client)
    assert entry.status == "FAILED"
    assert_checkpoints_kept(client, tmp_path, entry)
