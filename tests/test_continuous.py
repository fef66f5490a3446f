"""The continuous runtime (``execution.runtime: continuous``, DESIGN 4b): checkpoints written by
barriers in the stream, restarts from them, savepoints across runtimes, time on the wall clock,
and channels that refuse peers without the job's secret."""

from __future__ import annotations

import os

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state
from test_checkpoints import completed, state_of

from flowpoint import RestartStrategies
from flowpoint.errors import JobCancelledError

EVENTS = 2_000
CONTINUOUS = {"execution.runtime": "continuous", "execution.buffer-timeout": 5}


def continuous_env(make_env, tmp_path, parallelism=2, backend="hashmap", interval_ms=50, max_records=200, **config):
    env = make_env(parallelism=parallelism, max_records=max_records, state_checkpoints_dir=str(tmp_path / "ck"), **CONTINUOUS, **config)
    env.get_configuration().set("state.backend.type", backend)
    env.get_configuration().set("state.backend.incremental", True)
    env.enable_checkpointing(interval_ms)
    return env


@pytest.mark.slow
@pytest.mark.parametrize(("parallelism", "backend"), [
    pytest.param(1, "hashmap", marks=pytest.mark.compat), (1, "rocksdb"),
    (2, "hashmap"), pytest.param(2, "rocksdb", marks=pytest.mark.compat),
])
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


def _savepoint_mid_run(make_env, tmp_path, runtime, parallelism, restore=None, stop=False, backend="hashmap"):
    """Run the counting job (rate-limited) on ``runtime`` until two commits passed, take a
    savepoint and end the job; returns ``(savepoint path, output up to the savepoint)``."""
    from test_savepoints import metadata, wait_for

    config = CONTINUOUS if runtime == "continuous" else {}
    env = make_env(parallelism=parallelism, max_records=100, **config)
    env.get_configuration().set("state.backend.type", backend)
    if restore is not None:
        env.get_configuration().set("execution.savepoint.path", str(restore))
    sink = build(env, EVENTS, rate=1500 if runtime == "epoch" else 400)  # segments last a second
    client = env.execute_async(f"savepointed on {runtime}")
    start = client.progress().epoch
    wait_for(lambda: client.progress().epoch >= start + 2 or client.is_done(), what="two commits")
    if client.is_done():
        client.wait(0)  # why it failed, if it did
    assert not client.is_done(), "the job ended before the savepoint"
    if stop:
        path = client.stop_with_savepoint(str(tmp_path / "sp"))
        client.wait(60)
        assert client.get_job_status().value == "FINISHED"
    else:
        path = client.trigger_savepoint(str(tmp_path / "sp"))
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    meta = metadata(path)
    assert meta["kind"] == "savepoint"
    return path, list(sink.results[: meta["sinks"]["collect"]])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", pytest.param("rocksdb", marks=pytest.mark.compat)])
def test_a_savepoint_of_either_runtime_restores_on_the_other_at_another_parallelism(make_env, tmp_path, backend):
    """continuous p2 -> savepoint -> epochs p1 -> stop with savepoint -> continuous p2 to the end:
    exact state and exactly-once output across both runtimes and three parallelisms."""
    sp1, out1 = _savepoint_mid_run(make_env, tmp_path, "continuous", 2, backend=backend)
    sp2, out2 = _savepoint_mid_run(make_env, tmp_path, "epoch", 1, restore=sp1, stop=True, backend=backend)
    env = make_env(parallelism=2, max_records=100, **CONTINUOUS)
    env.get_configuration().set("state.backend.type", backend)
    env.get_configuration().set("execution.savepoint.path", str(sp2))
    sink = build(env, EVENTS)
    result = env.execute("restored on the continuous runtime")
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(out1 + out2 + list(sink.results)) == expected_outputs(EVENTS)


@pytest.mark.slow
def test_stop_with_savepoint_ends_a_continuous_job(make_env, tmp_path):
    sp, out = _savepoint_mid_run(make_env, tmp_path, "continuous", 2, stop=True)
    env = make_env(parallelism=1, max_records=100)
    env.get_configuration().set("execution.savepoint.path", str(sp))
    sink = build(env, EVENTS)
    result = env.execute("restored on epochs")
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(out + list(sink.results)) == expected_outputs(EVENTS)


@pytest.mark.slow
@pytest.mark.parametrize("seed", [*range(200, 202), pytest.param(202, marks=pytest.mark.compat), *range(203, 206)])  # 202: lateness 100
def test_event_time_windows_equal_the_reference_with_one_source_task(make_env, seed):
    """Random windows, watermark policies, lateness, splits and read sizes: with one source task
    (its splits read in the planned order) the continuous runtime decides lateness exactly as the
    epoch runtime's reference does. (Several source tasks interleave by arrival on the continuous
    runtime, as in Flink; their late data then depends on timing.)"""
    import random

    import event_time_reference as ref
    from test_event_time_differential import BIG, check, random_splits, values

    def continuous_env(parallelism=2, max_records=None, **config):
        return make_env(parallelism=parallelism, max_records=max_records, **CONTINUOUS, **config)

    rng = random.Random(seed)
    spec = rng.choice([ref.Tumbling(rng.randint(20, 200), rng.randint(0, 19)), ref.Sliding(120, 30), ref.Session(rng.randint(10, 60))])
    splits = random_splits(rng, rng.randint(1, 4), rng.randint(20, 90), keys="abcdef")
    check(continuous_env, splits, spec, watermarks=(rng.choice(["bounded", "punctuated"]), rng.randint(0, 60)),
          lateness=rng.choice([0, 10, 100]), window_parallelism=rng.choice([1, 2]), source_parallelism=1,
          epoch_max_records=rng.choice([15, 40, BIG]), batch_size=rng.choice([1, 3, 8192]), summary=values)


class SlowCounting(Counting):
    """Counting that takes a millisecond per record: barriers queue up behind the records."""

    def process_element(self, value, ctx):
        import time as _time

        _time.sleep(0.001)
        yield from super().process_element(value, ctx)


def test_several_checkpoints_in_flight_complete_in_order_with_exact_results(make_env, tmp_path):
    env = continuous_env(make_env, tmp_path, 2, "hashmap", interval_ms=20)
    env.get_checkpoint_config().set_max_concurrent_checkpoints(3)
    env.get_configuration().set("state.checkpoints.num-retained", 3)
    sink = build(env, EVENTS, rate=2000, function=SlowCounting())  # a second of reading: periodic checkpoints before the final one
    result = env.execute("three checkpoints in flight")
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)
    done = [s for s in result.get_checkpoint_stats() if s.status == "COMPLETED"]
    assert [s.checkpoint_id for s in done] == sorted(s.checkpoint_id for s in done)
    assert len(done) >= 2  # several in flight at once: tests/test_continuous_flow.py watches them IN_PROGRESS
