"""What users read a checkpoint's cut as: an epoch on the epoch runtime, a segment (up to a
barrier) on the continuous runtime, in ``flowpoint inspect`` and the job's restart lines."""

from __future__ import annotations

import re

import pytest
from checkpoint_jobs import Counting, build, record

from flowpoint import RestartStrategies
from flowpoint.checkpoint.savepoint import describe
from flowpoint.control.commands import format_description
from flowpoint.errors import UserFunctionError

EVENTS = 2_000


def _summary(**fields) -> dict:
    return {
        "path": "file:///ck/job/chk-4", "kind": "checkpoint", "checkpoint_id": 4, "job_id": "ab" * 16,
        "job_name": "counts", "epoch": 9, "completed_time_ms": 0, "max_parallelism": 128, "backend": "hashmap",
        "bytes": 0, "operators": [], "sources": [], "sinks": [], **fields,
    }


@pytest.mark.parametrize(("runtime", "unit"), [("continuous", "segment"), ("epoch", "epoch"), (None, "epoch")])
def test_inspect_names_the_cut_after_the_runtime_that_wrote_it(runtime, unit):
    text = format_description(_summary(runtime=runtime))
    assert re.search(rf"^\s+checkpoint id\s+4 \({unit} 9\), completed ", text, re.M), text


@pytest.mark.parametrize(("runtime", "unit"), [("continuous", "segment"), ("epoch", "epoch")])
def test_a_checkpoint_records_its_runtime_and_the_restart_line_names_its_unit(make_env, tmp_path, capsys, runtime, unit):
    """A job that fails twice on one record: it restarts from its latest checkpoint once, then
    fails for good and keeps its checkpoints, which ``inspect`` describes."""
    config = {"execution.runtime": "continuous", "execution.buffer-timeout": 5} if runtime == "continuous" else {}
    env = make_env(parallelism=2, max_records=200, state_checkpoints_dir=str(tmp_path / "ck"), execution_progress_interval=0, **config)
    env.enable_checkpointing(50)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1, 100))
    # 600 records a second: the record that fails comes 2.5 s in, after a checkpoint even on a loaded machine
    build(env, EVENTS, rate=600, function=Counting(fail_value=record(1_500), flag=str(tmp_path / "never"), fail_times=10**9))
    client = env.execute_async(f"unit on {runtime}")
    with pytest.raises(UserFunctionError):
        client.wait(300)
    err = capsys.readouterr().err
    assert re.search(rf"Restarting from checkpoint \d+ \({unit} \d+\)", err), err

    job_dir = tmp_path / "ck" / client.get_job_id()
    latest = max((p for p in job_dir.iterdir() if p.name.startswith("chk-") and (p / "_metadata").exists()), key=lambda p: int(p.name[4:]))
    d = describe(str(latest))
    assert d["runtime"] == runtime
    assert re.search(rf"^\s+checkpoint id\s+{d['checkpoint_id']} \({unit} {d['epoch']}\), ", format_description(d), re.M)


def test_a_continuous_savepoint_records_its_runtime(make_env, tmp_path):
    from test_continuous import _savepoint_mid_run

    path, _ = _savepoint_mid_run(make_env, tmp_path, "continuous", 2)
    d = describe(str(path))
    assert d["runtime"] == "continuous"
    assert f"(segment {d['epoch']}), completed" in format_description(d)
