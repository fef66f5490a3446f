"""The continuous runtime (``execution.runtime: continuous``, DESIGN 4b): checkpoints written by
barriers in the stream, restarts from them, savepoints across runtimes, time on the wall clock,
and channels that refuse peers without the job's secret."""

from __future__ import annotations

import os

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state

from flowpoint import RestartStrategies

EVENTS = 2_000
CONTINUOUS = {"execution.runtime": "continuous", "execution.buffer-timeout": 5}


def continuous_env(make_env, tmp_path, parallelism=2, backend="hashmap", interval_ms=50, **config):
    env = make_env(parallelism=parallelism, max_records=200, state_checkpoints_dir=str(tmp_path / "ck"), **CONTINUOUS, **config)
    env.get_configuration().set("state.backend.type", backend)
    env.get_configuration().set("state.backend.incremental", True)
    env.enable_checkpointing(interval_ms)
    return env


def state_of(result) -> dict:
    state = result.get_keyed_state("counting")
    return {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})}


def completed(stats) -> list[int]:
    return [s.checkpoint_id for s in stats if s.status == "COMPLETED"]


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_failure_restarts_the_run_from_the_last_checkpoint_exactly(make_env, tmp_path, parallelism, backend):
    env = continuous_env(make_env, tmp_path, parallelism, backend)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    sink = build(env, EVENTS, rate=4000, function=Counting(fail_value=1_700 * 7919 % 100_003, flag=flag, fail_times=1))
    result = env.execute("fail at a record")
    assert os.path.exists(flag), "the injected failure never happened"
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)
    assert len(completed(result.get_checkpoint_stats())) >= 2
