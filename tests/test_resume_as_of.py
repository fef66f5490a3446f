"""``flowpoint run --resume --as-of TIME`` (issue 30, item 5): the job's newest retained checkpoint
completed at or before TIME is restored, the job says which, and continues exactly from there;
from any run of the job that is not running, including one a later run already resumed."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone

import pytest
from checkpoint_jobs import Counting
from test_resume_identity import (
    CRASH_AT,
    EVENTS,
    NAME,
    _fake_run,
    _graph,
    build_job,
    exact,
    make_job_env,
    wait_ended,
)

from flowpoint import RestartStrategies
from flowpoint.cli import _parser, _script_after_resume, _settings
from flowpoint.driver.as_of import parse_as_of, restore_as_of
from flowpoint.driver.registry import JobRegistry
from flowpoint.driver.resume import job_fingerprint
from flowpoint.errors import CheckpointError, ConfigurationError, CorruptStateError, FlowpointError


def test_times_are_read_as_iso_8601_in_this_machine_s_zone_or_epoch_milliseconds():
    assert parse_as_of("1764151200000") == 1764151200000
    # a time to the second, minute or day means up to its end, as `flowpoint checkpoints` shows seconds
    assert parse_as_of("2025-11-26T10:00:00.000Z") == 1764151200000
    assert parse_as_of("2025-11-26T10:00:00Z") == 1764151200999
    assert parse_as_of("2025-11-26 11:00:00+01:00") == 1764151200999
    local = datetime(2025, 11, 26, 10, 0).astimezone()
    assert parse_as_of("2025-11-26 10:00") == int(local.timestamp() * 1000) + 59_999
    assert parse_as_of("2025-11-26") == int(datetime(2025, 11, 26).astimezone().timestamp() * 1000) + 24 * 3600 * 1000 - 1
    for bad in ("yesterday", "26/11/2025 10:00", ""):
        with pytest.raises(ConfigurationError, match="--as-of .* is not a time; give one like"):
            parse_as_of(bad)


def test_as_of_on_the_command_line_needs_resume():
    parsed = _parser().parse_args(["run", "--resume", "--as-of", "2025-11-26 10:00", "job.py"])
    _script_after_resume(parsed)
    assert _settings(parsed) == {"execution.state-recovery.from-latest": True, "execution.state-recovery.as-of": "2025-11-26 10:00"}
    parsed = _parser().parse_args(["run", "--as-of", "2025-11-26 10:00", "job.py"])
    with pytest.raises(FlowpointError, match="add --resume"):
        _settings(parsed)


def _plan(uri, meta):
    return ("planned", meta.checkpoint_id)


def test_the_newest_checkpoint_by_then_of_any_run_of_the_job(make_env, tmp_path):
    """Fake runs (metadata only; checkpoint i completed at 1000 i + 1 ms): a later run that
    resumed the first does not hide it, another job's run and a running run are not taken."""
    root, registry = tmp_path / "ck", JobRegistry(tmp_path / "registry")
    graph = _graph(make_env, tmp_path)
    mine = job_fingerprint(graph)
    a = _fake_run(root, "a" * 32, ids=(1, 2, 3), entry={"fingerprint": mine, "status": "FAILED"}, registry=registry)
    b = _fake_run(root, "b" * 32, ids=(5, 6), entry={"fingerprint": mine, "status": "FINISHED", "resumed_from": a}, registry=registry)
    other = job_fingerprint(_graph(make_env, tmp_path, other_job=True))
    _fake_run(root, "c" * 32, ids=(4,), entry={"fingerprint": other}, registry=registry)
    running = {"fingerprint": mine, "status": "RUNNING", "end_time_ms": None}
    _fake_run(root, "d" * 32, ids=(7,), entry=running, registry=registry)

    def chosen(as_of, by_id=None, fallback=False):
        r = restore_as_of(str(root), {}, graph, registry, by_id, as_of, _plan, fallback)
        return r.meta.job_id, r.meta.checkpoint_id, r.why

    assert chosen(2_500)[:2] == (a, 2)  # a was resumed by b, which finished: going back is the point
    assert chosen(6_001)[:2] == (b, 6)
    assert chosen(5_000)[:2] == (a, 3)  # c's checkpoint 4 is another job's
    assert chosen(99_000)[:2] == (b, 6)  # d is running
    assert chosen(3_001, by_id="a")[:2] == (a, 3)
    assert "the newest retained checkpoint at or before" in chosen(2_001)[2]
    with pytest.raises(CheckpointError, match=r"no retained checkpoint of job 'resumable' .* completed at or before then; the oldest retained one is chk-1"):
        chosen(1_000)

    # a checkpoint whose _metadata does not verify, between the one chosen and the next newer one
    meta = root / a / "chk-3" / "_metadata"
    data = bytearray(meta.read_bytes())
    data[len(data) // 2] ^= 0x01
    meta.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match=r"chk-3 .* of job a{32} does not verify, so whether it completed at or before then is unknown; chk-2"):
        chosen(4_500, by_id="a")
    assert chosen(4_500, by_id="a", fallback=True)[:2] == (a, 2)
    # chk-3 completed after chk-2: maybe before 2.5 s, so that is unknown too; not before 1.5 s
    with pytest.raises(CorruptStateError, match="whether it completed at or before then is unknown"):
        chosen(2_500, by_id="a")
    assert chosen(1_500, by_id="a")[:2] == (a, 1)


@pytest.mark.slow
def test_resume_as_of_restores_that_checkpoint_and_continues_exactly(make_env, tmp_path, capfd):
    """A run that crashed after several checkpoints (five retained); --as-of a time between two
    of them restores the older, exactly (the outputs are those of the records after it); then
    again, though that run was resumed by one that finished."""
    flag = str(tmp_path / "fixed")
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"),
                   control_registry_dir=str(tmp_path / "registry"))
    env.get_configuration().set("state.checkpoints.num-retained", 5)
    env.enable_checkpointing(1)  # at every epoch boundary
    env.set_restart_strategy(RestartStrategies.no_restart())
    build_job(env, Counting(fail_value=CRASH_AT, flag=flag, fail_times=10**9))
    client = env.execute_async(NAME)
    with pytest.raises(FlowpointError, match="injected failure"):
        client.wait(300)
    crashed = client.get_job_id()
    wait_ended(tmp_path, crashed)
    open(flag, "w").close()
    job_dir = tmp_path / "ck" / crashed
    metas = {int(n[4:]): json.loads((job_dir / n / "_metadata").read_text()) for n in os.listdir(job_dir) if n.startswith("chk-")}
    ids = sorted(metas)
    assert len(ids) >= 3, ids
    target = ids[-3]  # two newer ones are skipped
    as_of = metas[target]["completed_time_ms"]  # at or before: exactly then counts
    assert metas[ids[-2]]["completed_time_ms"] > as_of

    for _ in range(2):  # the second time the crashed run has been resumed by a run that finished
        env = make_job_env(make_env, tmp_path)
        env.get_configuration().set("execution.state-recovery.from-latest", True)
        env.get_configuration().set("execution.state-recovery.as-of", str(as_of))
        env.get_configuration().set("execution.progress.interval", 0)  # its lines, the restore's among them
        sink = build_job(env)
        capfd.readouterr()
        result = env.execute(NAME)
        said = capfd.readouterr().err
        assert f"restoring checkpoint {target} " in said and f"of job {crashed} " in said, said[-3000:]
        assert "the newest retained checkpoint at or before" in said and "(--as-of)" in said, said[-3000:]
        assert exact(result, sink)
        assert len(sink.results) == EVENTS - metas[target]["stats"]["records_read"]  # it continued from there
        entry = wait_ended(tmp_path, result.get_job_id())
        assert (entry.status, entry.resumed_from, entry.resumed_checkpoint_id) == ("FINISHED", crashed, target)

    env = make_job_env(make_env, tmp_path)
    env.get_configuration().set("execution.state-recovery.from-latest", True)
    env.get_configuration().set("execution.state-recovery.as-of", datetime.fromtimestamp(1, timezone.utc).isoformat())
    build_job(env)
    with pytest.raises(CheckpointError, match=f"the oldest retained one is chk-{ids[0]} of job {crashed}"):
        env.execute(NAME)
