"""``flowpoint run --resume`` restores this job's previous run, never another's (issue 10, case 4).

A job is known by its name and its fingerprint (operator uids, max parallelism), recorded in the
job registry; runs of another job of the same name are not taken, several candidate runs are
refused with a list of them, ``--resume <job-id>`` names one, and a run already resumed by a run
that finished (or that has checkpoints of its own) is not resumed again. A newest checkpoint that
does not verify names the previous one, and ``--resume-fallback`` restores the newest that does.

The "crashed" runs here fail for good at a record (no restart strategy), which keeps their
checkpoints as a killed driver's would.
"""

from __future__ import annotations

import json
import os
import shutil
import time

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state

from flowpoint import CollectSink, RestartStrategies
from flowpoint.cli import _parser, _script_after_resume, _settings
from flowpoint.driver.registry import JobEntry, JobRegistry
from flowpoint.driver.resume import job_fingerprint
from flowpoint.errors import CheckpointError, CorruptStateError, FlowpointError

NAME = "resumable"  # every job here has this name, as every unnamed job has the same default name
EVENTS = 1_200
CRASH_AT = 900 * 7919 % 100_003  # the record at index 900 (checkpoint_jobs.record): after a few checkpoints


def make_job_env(make_env, tmp_path, retained: int = 3, **config):
    env = make_env(parallelism=2, max_records=200, state_checkpoints_dir=str(tmp_path / "ck"),
                   control_registry_dir=str(tmp_path / "registry"), **config)
    env.get_configuration().set("state.checkpoints.num-retained", retained)
    env.enable_checkpointing(1)  # at every epoch boundary
    return env


def build_job(env, function=None, other_job: bool = False) -> CollectSink:
    """This job, or (``other_job``) another job of the same name whose stateful operators have the
    same uids (so its state would restore into this job without an error) but which computes
    something else: it shifts every record first."""
    if not other_job:
        return build(env, EVENTS, function=function)
    from checkpoint_jobs import DataGeneratorSource, key_of, record

    sink = CollectSink()
    (env.from_source(DataGeneratorSource(record, count=EVENTS), source_name="numbers").uid("numbers")
        .map(lambda v: v + 1).uid("shift")
        .key_by(key_of).process(function or Counting()).uid("counting")
        .sink_to(sink).uid("collect"))
    return sink


def wait_ended(tmp_path, job_id: str) -> JobEntry:
    """The run's registry entry once its final status is written (by the job's watcher thread)."""
    registry = JobRegistry(tmp_path / "registry")
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        entry = registry.read(job_id)
        if entry is not None and entry.ended and entry.end_time_ms:
            return entry
        time.sleep(0.05)
    msg = f"the registry entry of job {job_id} did not end"
    raise AssertionError(msg)


def crashed_run(make_env, tmp_path, flag: str, other_job: bool = False) -> str:
    """A run that completes checkpoints, then fails for good at record CRASH_AT while ``flag``
    does not exist. Returns its job id."""
    env = make_job_env(make_env, tmp_path)
    env.set_restart_strategy(RestartStrategies.no_restart())
    crash_at = CRASH_AT + 1 if other_job else CRASH_AT  # the other job shifts every record by one
    build_job(env, Counting(fail_value=crash_at, flag=flag, fail_times=10**9), other_job)
    client = env.execute_async(NAME)
    with pytest.raises(FlowpointError, match="injected failure"):
        client.wait(300)
    job_id = client.get_job_id()
    assert any(n.startswith("chk-") for n in os.listdir(tmp_path / "ck" / job_id))
    assert wait_ended(tmp_path, job_id).status == "FAILED"
    return job_id


def resumed_env(make_env, tmp_path, job_id: str | None = None, fallback: bool = False):
    env = make_job_env(make_env, tmp_path)
    env.get_configuration().set("execution.state-recovery.from-latest", True)
    if job_id:
        env.get_configuration().set("execution.state-recovery.from-job", job_id)
    if fallback:
        env.get_configuration().set("execution.state-recovery.fallback-on-corruption", True)
    return env


def exact(result, sink) -> bool:
    """The state of a run over all EVENTS, and the outputs of the records after the restored
    checkpoint (the ones before it were the crashed run's), exactly."""
    state = result.get_keyed_state("counting")
    outputs = sorted(sink.results)
    return (
        {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})} == expected_state(EVENTS)
        and bool(outputs) and len(set(outputs)) == len(outputs) and set(outputs) <= set(expected_outputs(EVENTS))
        and max(n for _, n in outputs) == max(expected_state(EVENTS)["count"].values())
    )


def restored_from(tmp_path, result) -> str | None:
    return wait_ended(tmp_path, result.get_job_id()).resumed_from


# -- the job's identity ----------------------------------------------------------------------------


def test_the_fingerprint_is_the_operators_uids_and_max_parallelism(make_env, tmp_path):
    def graph(other_job=False, max_parallelism=None):
        env = make_job_env(make_env, tmp_path)
        if max_parallelism:
            env.set_max_parallelism(max_parallelism)
        build_job(env, other_job=other_job)
        return env.get_stream_graph(NAME)

    assert job_fingerprint(graph()) == job_fingerprint(graph())  # stable across builds (and processes: no hash())
    assert job_fingerprint(graph()) != job_fingerprint(graph(other_job=True))
    assert job_fingerprint(graph()) != job_fingerprint(graph(max_parallelism=256))


@pytest.mark.slow
def test_resume_takes_this_job_s_run_not_another_job_s_of_the_same_name(make_env, tmp_path):
    flag = str(tmp_path / "fixed")
    mine = crashed_run(make_env, tmp_path, flag)
    other = crashed_run(make_env, tmp_path, flag + "-other", other_job=True)  # newer, same name and stateful uids
    open(flag, "w").close()
    env = resumed_env(make_env, tmp_path)
    sink = build_job(env)
    result = env.execute(NAME)
    assert exact(result, sink)  # the other job's state would have made the counts wrong
    assert restored_from(tmp_path, result) == mine != other


@pytest.mark.slow
def test_resume_refuses_a_run_of_another_job_and_several_runs_of_this_one(make_env, tmp_path):
    flag = str(tmp_path / "fixed")
    other = crashed_run(make_env, tmp_path, flag + "-other", other_job=True)
    env = resumed_env(make_env, tmp_path)
    build_job(env)
    with pytest.raises(CheckpointError) as info:
        env.execute(NAME)
    msg = str(info.value)
    assert other in msg and f"'{NAME}'" in msg and "started " in msg and "latest checkpoint chk-" in msg, msg
    assert "another job of this name" in msg and "--resume <job-id>" in msg, msg

    first = crashed_run(make_env, tmp_path, flag)
    second = crashed_run(make_env, tmp_path, flag)
    env = resumed_env(make_env, tmp_path)
    build_job(env)
    with pytest.raises(CheckpointError) as info:
        env.execute(NAME)
    msg = str(info.value)
    assert "2 previous runs" in msg and first in msg and second in msg and other in msg, msg
    assert "--resume <job-id>" in msg

    open(flag, "w").close()
    env = resumed_env(make_env, tmp_path, job_id=first[:8])  # --resume <job-id prefix>
    sink = build_job(env)
    result = env.execute(NAME)
    assert exact(result, sink)
    assert restored_from(tmp_path, result) == first


@pytest.mark.slow
def test_a_run_resumed_by_a_run_that_finished_is_not_resumed_again(make_env, tmp_path):
    flag = str(tmp_path / "fixed")
    crashed = crashed_run(make_env, tmp_path, flag)
    open(flag, "w").close()
    env = resumed_env(make_env, tmp_path)
    sink = build_job(env)
    fingerprint = job_fingerprint(env.get_stream_graph(NAME))  # before execute(), which starts the next job afresh
    first = env.execute(NAME)
    assert exact(first, sink)
    entry = wait_ended(tmp_path, first.get_job_id())
    assert (entry.status, entry.resumed_from, entry.fingerprint) == ("FINISHED", crashed, fingerprint)
    assert not os.path.exists(tmp_path / "ck" / first.get_job_id())  # a finished run's checkpoints go

    env = resumed_env(make_env, tmp_path)
    build_job(env)
    with pytest.raises(CheckpointError) as info:
        env.execute(NAME)  # it restored the crashed run's state a second time
    msg = str(info.value)
    assert crashed in msg and f"already resumed by job {first.get_job_id()}, which finished" in msg, msg


@pytest.mark.slow
def test_a_resumed_run_that_crashed_with_checkpoints_is_the_one_resumed_next(make_env, tmp_path):
    flag = str(tmp_path / "fixed")
    first = crashed_run(make_env, tmp_path, flag)
    env = resumed_env(make_env, tmp_path)
    env.set_restart_strategy(RestartStrategies.no_restart())
    build_job(env, Counting(fail_value=record_at(1_100), flag=flag, fail_times=10**9))
    client = env.execute_async(NAME)
    with pytest.raises(FlowpointError, match="injected failure"):
        client.wait(300)
    second = client.get_job_id()
    assert wait_ended(tmp_path, second).resumed_from == first
    open(flag, "w").close()
    env = resumed_env(make_env, tmp_path)
    sink = build_job(env)
    result = env.execute(NAME)
    assert exact(result, sink)
    assert restored_from(tmp_path, result) == second  # not ambiguous: the first was resumed by the second


def record_at(index: int) -> int:
    return index * 7919 % 100_003


# -- a newest checkpoint that does not verify ------------------------------------------------------


def _flip_a_state_file(job_dir) -> tuple[int, str, int]:
    """Flip one byte of a state file of the newest checkpoint; ``(its id, the file, the previous id)``."""
    ids = sorted(int(n[4:]) for n in os.listdir(job_dir) if n.startswith("chk-") and os.path.exists(job_dir / n / "_metadata"))
    assert len(ids) >= 2, ids
    # a file only the newest lists (HashMap parts live in shared/, a changelog chain's earlier
    # parts are the previous checkpoint's too)
    def files(i: int) -> set[str]:
        meta = json.loads((job_dir / f"chk-{i}" / "_metadata").read_text())
        return {f["path"] for op in meta["operators"] for sub in op["subtasks"] for f in sub["files"]}

    victim = sorted(p for p in files(ids[-1]) - files(ids[-2]) if p.endswith(".pkl"))[0]
    path = job_dir / victim
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x01
    path.write_bytes(bytes(data))
    return ids[-1], str(path), ids[-2]


@pytest.mark.slow
def test_a_corrupt_newest_checkpoint_names_the_previous_one_and_fallback_restores_it(make_env, tmp_path):
    flag = str(tmp_path / "fixed")
    crashed = crashed_run(make_env, tmp_path, flag)
    open(flag, "w").close()
    newest, victim, previous = _flip_a_state_file(tmp_path / "ck" / crashed)
    env = resumed_env(make_env, tmp_path)
    build_job(env)
    started = time.monotonic()
    with pytest.raises(CorruptStateError) as info:
        env.execute(NAME)
    msg = str(info.value)
    assert time.monotonic() - started < 60
    assert os.path.basename(victim) in msg and f"checkpoint {newest} of job {crashed}" in msg, msg
    assert f"chk-{previous}" in msg and f"flowpoint run -s {(tmp_path / 'ck' / crashed).as_uri()}/chk-{previous}" in msg, msg
    assert "--resume-fallback" in msg and "execution.state-recovery.fallback-on-corruption" in msg, msg

    env = resumed_env(make_env, tmp_path, fallback=True)
    sink = build_job(env)
    result = env.execute(NAME)
    assert exact(result, sink)  # from the previous checkpoint, exactly
    entry = wait_ended(tmp_path, result.get_job_id())
    assert (entry.resumed_from, entry.resumed_checkpoint_id) == (crashed, previous)


# -- the command line and the registry -------------------------------------------------------------


@pytest.mark.parametrize(("argv", "script", "args", "expected"), [
    (["--resume", "job.py", "a"], "job.py", ["a"], {"execution.state-recovery.from-latest": True}),
    (["--resume", "3f2a9c", "job.py", "a"], "job.py", ["a"],
     {"execution.state-recovery.from-latest": True, "execution.state-recovery.from-job": "3f2a9c"}),
    (["--resume", "--resume-fallback", "job.py"], "job.py", [],
     {"execution.state-recovery.from-latest": True, "execution.state-recovery.fallback-on-corruption": True}),
    (["job.py", "--resume"], "job.py", ["--resume"], {}),  # the job's own argument
])
def test_resume_on_the_command_line(argv, script, args, expected):
    parsed = _parser().parse_args(["run", *argv])
    _script_after_resume(parsed)
    assert (parsed.script, parsed.args, _settings(parsed)) == (script, args, expected)


def test_resume_fallback_needs_resume_and_s_excludes_resume():
    for argv, what in ((["--resume-fallback", "job.py"], "add --resume"), (["-s", "/x", "--resume", "job.py"], "give one")):
        parsed = _parser().parse_args(["run", *argv])
        _script_after_resume(parsed)
        with pytest.raises(FlowpointError, match=what):
            _settings(parsed)


def test_pruning_keeps_the_runs_that_record_a_resume(tmp_path):
    registry = JobRegistry(tmp_path)
    old = 1_000
    for i in range(3):
        registry.write(JobEntry(f"{i:032x}", NAME, "FINISHED", old, 1, "h", None, end_time_ms=old,
                                resumed_from=None if i else "f" * 32, fingerprint="abc"))
    registry.prune(now=old + 30 * 24 * 3600 * 1000)
    assert [(e.job_id, e.resumed_from) for e in registry.entries()] == [(f"{0:032x}", "f" * 32)]


# -- choosing the run, without Spark: checkpoint directories and registry entries made here ---------


def _graph(make_env, tmp_path, other_job: bool = False):
    env = make_job_env(make_env, tmp_path)
    build_job(env, other_job=other_job)
    return env.get_stream_graph(NAME)


def _fake_run(root, job_id: str, ids=(1, 2), name: str = NAME, uids=(("counting", 128),), entry: dict | None = None, registry=None):
    """A job directory with complete checkpoints ``ids`` (metadata only) and, if ``entry``, a
    registry entry with those fields."""
    from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
    from flowpoint.checkpoint.metadata import (
        CheckpointMetadata,
        OperatorState,
        SplitPosition,
        write_metadata,
    )

    access = CheckpointStorageAccess(str(root / job_id))
    for i in ids:
        meta = CheckpointMetadata(
            checkpoint_id=i, job_id=job_id, job_name=name, kind="checkpoint", epoch=i, trigger_time_ms=1000 * i,
            completed_time_ms=1000 * i + 1, max_parallelism=128, backend="hashmap", incremental=False,
            operators=[OperatorState(uid, "op", 2, maxp, "hashmap", []) for uid, maxp in uids],
            sources=[SplitPosition("numbers", 0, "0", [0, 10], False)], sinks={}, watermarks={}, stats={},
        )
        write_metadata(access, f"chk-{i}", meta)
    if entry is not None:
        fields = {"status": "FAILED", "start_time_ms": 1, "pid": 1, "host": "elsewhere", "endpoint": None, "end_time_ms": 2, **entry}
        registry.write(JobEntry(job_id=job_id, job_name=name, **fields))
    return job_id


def test_choosing_the_run_from_the_registry_and_the_checkpoints(make_env, tmp_path):
    from flowpoint.driver.resume import choose_run

    root, registry = tmp_path / "ck", JobRegistry(tmp_path / "registry")
    graph = _graph(make_env, tmp_path)
    mine = job_fingerprint(graph)
    a = _fake_run(root, "a" * 32, entry={"fingerprint": mine}, registry=registry)
    other = _fake_run(root, "b" * 32, entry={"fingerprint": job_fingerprint(_graph(make_env, tmp_path, other_job=True))}, registry=registry)
    _fake_run(root, "c" * 32, name="another name", entry={"fingerprint": mine}, registry=registry)
    assert choose_run(str(root), {}, graph, registry).job_id == a

    # a run the registry does not know counts when its state fits this job; then two candidates
    unknown = _fake_run(root, "d" * 32)
    with pytest.raises(CheckpointError) as info:
        choose_run(str(root), {}, graph, registry)
    msg = str(info.value)
    assert "2 previous runs" in msg and a in msg and unknown in msg and "not in the job registry; its state fits" in msg
    assert other in msg and "another job of this name" in msg
    assert "c" * 32 not in msg  # another name: not listed among this job's runs
    # ...and does not when it does not fit (another max parallelism)
    (root / unknown / "chk-1" / "_metadata").unlink()
    (root / unknown / "chk-2" / "_metadata").unlink()
    _fake_run(root, unknown, uids=(("counting", 256),))
    assert choose_run(str(root), {}, graph, registry).job_id == a

    # a run being resumed by a running run is not taken, nor is a running run
    running = {"status": "RUNNING", "host": "elsewhere", "end_time_ms": None, "fingerprint": mine}
    _fake_run(root, "e" * 32, ids=(), entry={**running, "resumed_from": a}, registry=registry)
    with pytest.raises(CheckpointError) as info:
        choose_run(str(root), {}, graph, registry)
    assert f"being resumed by job {'e' * 32}, which is running" in str(info.value)
    registry.remove("e" * 32)
    _fake_run(root, "f" * 32, ids=(7,), entry={**running, "resumed_from": a}, registry=registry)
    with pytest.raises(CheckpointError) as info:
        choose_run(str(root), {}, graph, registry)
    assert "running now (process 1 on elsewhere)" in str(info.value) and "has checkpoints of its own" in str(info.value)

    # a resumer that ended without finishing and without a checkpoint does not supersede
    registry.write(JobEntry("f" * 32, NAME, "LOST", 1, 1, "elsewhere", None, end_time_ms=3, fingerprint=mine, resumed_from=a))
    shutil.rmtree(root / ("f" * 32))
    assert choose_run(str(root), {}, graph, registry).job_id == a
    # --resume <job-id>: that run, whatever its name or fingerprint
    assert choose_run(str(root), {}, graph, registry, by_id="cc").job_id == "c" * 32
    with pytest.raises(CheckpointError, match="no run with this id"):
        choose_run(str(root), {}, graph, registry, by_id="0123")


def test_resume_before_a_script_with_options_of_its_own(tmp_path):
    """``flowpoint run --resume job.py --its-option x``: the script and its options, no JOB-ID."""
    from flowpoint.cli import _parser, resume_before_script

    job = tmp_path / "job.py"
    job.write_text("")
    args = _parser().parse_args(resume_before_script(["run", "--resume", str(job), "--spark-master", "local[2]", "out"]))
    assert (args.resume, args.script, args.args) == ("", str(job), ["--spark-master", "local[2]", "out"])
    args = _parser().parse_args(resume_before_script(["run", "--resume", "4f2a", str(job)]))
    assert (args.resume, args.script) == ("4f2a", str(job))


def test_resume_advice_names_no_run_whose_checkpoints_are_gone(make_env, tmp_path):
    """Issue 25: a run that resumed A, completed checkpoints and was killed while it finished (its
    checkpoints deleted, its entry LOST or FINISHED): --resume said of A "already resumed by job
    B, which has checkpoints of its own: resume that one", naming B, which has none left."""
    from flowpoint.driver.resume import choose_run

    root, registry = tmp_path / "ck", JobRegistry(tmp_path / "registry")
    graph = _graph(make_env, tmp_path)
    mine = job_fingerprint(graph)
    a = _fake_run(root, "a" * 32, entry={"fingerprint": mine}, registry=registry)
    gone = "9" * 32
    registry.write(JobEntry(gone, NAME, "LOST", 1, 1, "elsewhere", None, end_time_ms=3, fingerprint=mine, resumed_from=a,
                            last_checkpoint_id=5, last_checkpoint_path=f"file://{root}/{gone}/chk-5"))
    with pytest.raises(CheckpointError) as info:
        choose_run(str(root), {}, graph, registry)
    msg = str(info.value)
    assert f"already resumed by job {gone} (LOST), which completed checkpoints of its own that no longer exist" in msg, msg
    assert "resume that one" not in msg
    assert not any(line.lstrip().startswith(gone) for line in msg.splitlines())  # not listed as a run to restore
    # with its checkpoints there, it is the one to resume
    _fake_run(root, gone, ids=(5,))
    assert choose_run(str(root), {}, graph, registry).job_id == gone
