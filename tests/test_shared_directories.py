"""Issue 17, items 3-5: directories other users can write are not trusted.

Another local user (the ``other_uid`` fixture) plants what the issue describes; flowpoint must
refuse it with an InsecurePathError naming the directory, and name the one setting that lifts the
check (``security.trust-shared-directories``) where there is one:

3. a run directory planted in a shared checkpoints directory for ``flowpoint run --resume``
   (a ``_metadata`` that fits the job, a pickle that runs code, matching checksums);
4. ``FLOWPOINT_HOME`` in a directory she owns, and a ``jobs/`` entry of hers pointing at her
   listener, which would receive the control token;
5. ``state.working.remote-dir`` below her world-writable directory. Checkpoint and savepoint
   files are 0600 (directories 0700) unless ``state.checkpoints.file-mode`` says otherwise, and
   ``flowpoint savepoint -d`` deletes only what the savepoint lists.

Her files are made by root and given to her (chown): what she could have written herself.
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import socket
import subprocess
import sys

import pytest
from checkpoint_jobs import Counting, build
from untrusted import Planted, mode

from flowpoint import RestartStrategies
from flowpoint.checkpoint.directory import CheckpointStore, resolve_restore_path
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.metadata import (
    CheckpointMetadata,
    OperatorState,
    SplitPosition,
    StateFile,
    SubtaskState,
    write_metadata,
)
from flowpoint.checkpoint.savepoint import (
    OperatorSnapshot,
    PartState,
    create_savepoint_dir,
    dispose_savepoint,
    write_savepoint,
)
from flowpoint.control import auth
from flowpoint.driver.registry import JobEntry, JobRegistry
from flowpoint.driver.resume import scan_runs
from flowpoint.errors import FlowpointError, InsecurePathError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))
TRUST = "security.trust-shared-directories"
JOB_NAME = "resumable-count"  # the name tests/checkpoint_jobs.py runs under




def give(path, uid: int) -> None:
    """``path`` and everything below it now belong to ``uid``."""
    for d, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(d, name), uid, -1)
    os.chown(path, uid, -1)


def plant_run(root, marker: str, job_id: str = "e" * 32, name: str = JOB_NAME) -> str:
    """A run directory of the job in tests/checkpoint_jobs.py (uids ``numbers`` and keyed
    ``counting`` at max parallelism 128) whose one checkpoint passes every check: each part is a
    pickle that runs code, with its size and SHA-256 in a ``_metadata`` with a valid checksum."""
    data = pickle.dumps(Planted(marker))
    access = CheckpointStorageAccess(str(root / job_id), {TRUST: "true"})
    subtasks = []
    for index, (start, end) in enumerate(((0, 63), (64, 127))):
        rel = f"chk-1/counting-{index}.pkl"
        access.write_bytes(rel, data)
        f = StateFile(rel, len(data), "full", sha256=hashlib.sha256(data).hexdigest())
        subtasks.append(SubtaskState(index, start, end, [f], 1, len(data), len(data)))
    meta = CheckpointMetadata(
        checkpoint_id=1, job_id=job_id, job_name=name, kind="checkpoint", epoch=1, trigger_time_ms=1000,
        completed_time_ms=1001, max_parallelism=128, backend="hashmap", incremental=False,
        operators=[OperatorState("counting", "counting", 2, 128, "hashmap", subtasks)],
        sources=[SplitPosition("numbers", 0, "index-0", {"payload": [0, 100], "start": 0, "position": 0}, False)],
        sinks={}, watermarks={}, stats={},
    )
    write_metadata(access, "chk-1", meta)
    return job_id


def cli(*args: str, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "flowpoint.cli", *args], capture_output=True, text=True,
                          cwd=REPO, env=dict(os.environ, PYTHONPATH=REPO, **(env or {})), timeout=timeout)


# -- 3. run directories --resume considers, checkpoint and savepoint directories ---------------------


@pytest.mark.slow
def test_resume_refuses_a_shared_checkpoint_directory_with_a_planted_run(tmp_path, other_uid):
    """The attack as the issue tells it, through the command line: the victim's checkpoints go
    to a shared directory anyone can write (like /tmp/checkpoints); she plants a run there;
    `flowpoint run --resume` refuses the directory and runs nothing of hers."""
    shared = tmp_path / "checkpoints"
    shared.mkdir()
    shared.chmod(0o1777)
    marker = tmp_path / "payload-ran"
    planted = plant_run(shared, str(marker))
    give(shared / planted, other_uid)
    r = cli("run", "--resume", "-D", "execution.progress.interval=-1", os.path.join(HERE, "checkpoint_jobs.py"),
            str(shared), "hashmap", "100", "0", env={"FLOWPOINT_HOME": str(tmp_path / "fphome")})
    assert r.returncode == 1, r.stdout + r.stderr
    assert f"checkpoint directory {shared} can be written by other users" in r.stderr, r.stderr
    assert f"{TRUST}: true" in r.stderr and "state.checkpoints.dir" in r.stderr
    assert not marker.exists()


def test_resume_refuses_a_run_directory_of_another_user_or_one_others_can_write(tmp_path, other_uid):
    root = tmp_path / "ck"
    root.mkdir(mode=0o755)
    marker = tmp_path / "payload-ran"
    planted = plant_run(root, str(marker))
    give(root / planted, other_uid)
    registry = JobRegistry(tmp_path / "registry")
    with pytest.raises(InsecurePathError, match=rf"run directory {root / planted} belongs to .*uid {other_uid}") as e:
        scan_runs(str(root), {}, registry)
    assert TRUST in str(e.value) and "state.checkpoints.dir" in str(e.value)
    give(root / planted, os.geteuid())
    (root / planted).chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"run directory {root / planted} can be written by other users \(mode 0777\)"):
        scan_runs(str(root), {}, registry)
    # -s names a planted checkpoint directly: the same checks
    with pytest.raises(InsecurePathError, match=rf"{root / planted}, which other users can write"):
        resolve_restore_path(str(root / planted / "chk-1"))
    (root / planted).chmod(0o755)
    (root / planted / "chk-1").chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"restore directory {root / planted / 'chk-1'} can be written"):
        resolve_restore_path(str(root / planted / "chk-1"))
    (root / planted / "chk-1").chmod(0o755)
    assert [r.job_id for r in scan_runs(str(root), {}, registry)] == [planted]  # the user's own: fine
    assert not marker.exists()


@pytest.mark.slow
def test_only_the_named_setting_accepts_a_shared_directory(make_env, tmp_path, other_uid):
    """What the check prevents is real: with security.trust-shared-directories the planted run is
    resumed and its pickle runs as the victim."""
    shared = tmp_path / "checkpoints"
    shared.mkdir()
    shared.chmod(0o1777)
    marker = tmp_path / "payload-ran"
    give(shared / plant_run(shared, str(marker)), other_uid)

    def job(trust: bool = False):
        env = make_env(parallelism=2, max_records=200, state_checkpoints_dir=str(shared),
                       control_registry_dir=str(tmp_path / "registry"))
        env.get_configuration().set("execution.state-recovery.from-latest", True)
        env.get_configuration().set(TRUST, trust)
        env.set_restart_strategy(RestartStrategies.no_restart())
        env.enable_checkpointing(1)
        build(env, 100, function=Counting())
        return env

    with pytest.raises(InsecurePathError, match=rf"checkpoint directory {shared} can be written by other users"):
        job().execute(JOB_NAME)
    assert not marker.exists()
    with pytest.raises(FlowpointError) as e:
        job(trust=True).execute(JOB_NAME)
    assert marker.exists(), str(e.value)


def test_checkpoint_and_savepoint_directories_of_another_user_are_refused(tmp_path, other_uid):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    give(theirs, other_uid)
    with pytest.raises(InsecurePathError, match=rf"checkpoint directory {theirs} belongs to .*uid {other_uid}"):
        CheckpointStore(CheckpointStorageAccess(str(theirs)), "a" * 32).init()
    assert not (theirs / ("a" * 32)).exists()
    below = theirs / "mine"  # below her directory: she can rename it and put hers in its place
    below.mkdir()
    os.chown(below, os.geteuid(), -1)
    with pytest.raises(InsecurePathError, match=rf"savepoint directory {below} is below {theirs}, which belongs to"):
        create_savepoint_dir(str(below), "a" * 32)
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"savepoint directory {shared} can be written .*state.savepoints.dir.*{TRUST}: true"):
        create_savepoint_dir(str(shared), "a" * 32)
    assert os.listdir(shared) == []
    # the named setting accepts them; other filesystems are not local directories
    CheckpointStore(CheckpointStorageAccess(str(theirs), {TRUST: "true"}), "a" * 32).init()
    create_savepoint_dir(str(shared), "a" * 32, {TRUST: "true"})
    CheckpointStore(CheckpointStorageAccess("memory://shared-dirs"), "a" * 32).init()


# -- 4. FLOWPOINT_HOME and its jobs/ -------------------------------------------------------------------


def listener() -> socket.socket:
    """Her listener on loopback, where her planted registry entry sends the CLI."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    s.settimeout(0.5)
    return s


def plant_entry(jobs, port: int, job_id: str = "f" * 32) -> str:
    jobs.mkdir(exist_ok=True)
    entry = JobEntry(job_id, "victim", "RUNNING", 1, os.getpid(), socket.gethostname(), f"127.0.0.1:{port}")
    (jobs / f"{job_id}.json").write_text(json.dumps(entry.to_dict()))
    return job_id


def nothing_received(s: socket.socket) -> bool:
    try:
        conn, _ = s.accept()
    except TimeoutError:
        return True
    conn.close()
    return False


def test_the_cli_sends_no_token_through_a_jobs_dir_another_user_replaced(tmp_path, other_uid):
    """The attack of the issue: FLOWPOINT_HOME is inside her directory; the job wrote its token
    there (before this was refused); she replaces jobs/ with an entry pointing at her listener.
    `flowpoint savepoint` refuses, names the directory and sends her nothing."""
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o777)
    home = theirs / "fphome"
    home.mkdir(mode=0o700)
    (home / "control-token").write_text("t" * 43 + "\n")
    (home / "control-token").chmod(0o600)
    with listener() as s:
        job_id = plant_entry(home / "jobs", s.getsockname()[1])
        give(home / "jobs", other_uid)
        give(theirs, other_uid)
        os.chown(home, os.geteuid(), -1)
        os.chown(home / "control-token", os.geteuid(), -1)
        r = cli("savepoint", job_id, env={"FLOWPOINT_HOME": str(home)}, timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert f"the FLOWPOINT_HOME directory {home} is below {theirs}, which belongs to" in r.stderr, r.stderr
        assert "Set FLOWPOINT_HOME to a directory of your own" in r.stderr and "Savepoint completed" not in r.stdout
        assert nothing_received(s)



@pytest.mark.parametrize("case", ["home of hers", "home open to her", "jobs of hers", "jobs open to her"])
def test_a_flowpoint_home_or_jobs_dir_she_can_change_is_refused(tmp_path, monkeypatch, other_uid, case):
    home = tmp_path / "fphome"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("FLOWPOINT_HOME", str(home))
    with listener() as s:
        job_id = plant_entry(home / "jobs", s.getsockname()[1])
        refused = {
            "home of hers": (lambda: os.chown(home, other_uid, -1), rf"FLOWPOINT_HOME directory {home} belongs to .*uid {other_uid}"),
            "home open to her": (lambda: home.chmod(0o777), rf"FLOWPOINT_HOME directory {home} can be written by other users"),
            "jobs of hers": (lambda: give(home / "jobs", other_uid), rf"job registry directory {home / 'jobs'} belongs to .*uid {other_uid}"),
            "jobs open to her": (lambda: (home / "jobs").chmod(0o777), rf"job registry directory {home / 'jobs'} can be written"),
        }
        change, message = refused[case]
        change()
        from flowpoint.control.client import ControlClient

        with pytest.raises(InsecurePathError, match=message) as e:
            ControlClient.for_job(job_id)
        assert "FLOWPOINT_HOME" in str(e.value)
        assert nothing_received(s)
    if case.startswith("home"):  # a job does not write its token there either
        with pytest.raises(InsecurePathError, match=message):
            auth.load_or_create_token()
        assert not (home / "control-token").exists()


def test_a_job_refuses_a_flowpoint_home_inside_another_users_directory(spark, make_env, tmp_path, monkeypatch, other_uid):
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o755)
    give(theirs, other_uid)
    home = theirs / "fphome"
    monkeypatch.setenv("FLOWPOINT_HOME", str(home))
    env = make_env(parallelism=1)
    env.from_collection([1, 2, 3]).map(lambda x: x + 1).print()
    with pytest.raises(InsecurePathError, match=rf"FLOWPOINT_HOME directory {home} is below {theirs}, which belongs to"):
        env.execute("home below hers")
    assert not home.exists()


# -- 5. the remote working directory, file modes, disposing --------------------------------------------


def test_a_remote_working_dir_below_her_world_writable_directory_is_refused(spark, make_env, tmp_path, other_uid):
    theirs = tmp_path / "theirs"
    theirs.mkdir()
    theirs.chmod(0o777)
    give(theirs, other_uid)
    remote = theirs / "durable"
    env = make_env(parallelism=1)
    env.get_configuration().set("state.working.remote-dir", str(remote))
    env.from_collection([1, 2, 3]).key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sum").print()
    with pytest.raises(InsecurePathError, match=rf"remote working directory {remote} is below {theirs}, which belongs to") as e:
        env.execute("remote dir below hers")
    assert "state.working.remote-dir" in str(e.value) and TRUST in str(e.value)
    assert not remote.exists()


def modes_below(root) -> dict[str, int]:
    out = {str(root): mode(root)}
    for d, dirs, files in os.walk(root):
        for name in dirs + files:
            out[os.path.join(d, name)] = mode(os.path.join(d, name))
    return out


@pytest.mark.parametrize("file_mode", [None, "0640"])
def test_checkpoint_and_savepoint_files_are_private_unless_configured(make_env, tmp_path, file_mode):
    """A job's checkpoints (kept: the job fails for good) and a savepoint, under umask 022."""
    old = os.umask(0o022)
    try:
        env = make_env(parallelism=2, max_records=50, state_checkpoints_dir=str(tmp_path / "ck"),
                       state_savepoints_dir=str(tmp_path / "sp"))
        if file_mode:
            env.get_configuration().set("state.checkpoints.file-mode", file_mode)
        env.set_restart_strategy(RestartStrategies.no_restart())
        env.enable_checkpointing(1)
        build(env, 300, function=Counting(fail_value=250 * 7919 % 100_003, flag=str(tmp_path / "never"), fail_times=10**9))
        with pytest.raises(FlowpointError, match="injected failure"):
            env.execute("file modes")
    finally:
        os.umask(old)
    files, dirs = (0o640, 0o750) if file_mode else (0o600, 0o700)
    modes = modes_below(tmp_path / "ck")
    assert any("/chk-" in p and p.endswith("_metadata") for p in modes)
    assert {p: m for p, m in modes.items() if os.path.isfile(p) and m != files} == {}
    assert {p: m for p, m in modes.items() if os.path.isdir(p) and m != dirs} == {}

    sp = write_savepoint(str(tmp_path / "sp"), job_id="a" * 32, job_name="j", checkpoint_id=1, epoch=1, backend="hashmap",
                         operators=[OperatorSnapshot("op", "op", 1, 128, [PartState(0, 0, 127, {"count": {1: 2}})])],
                         options={"state.checkpoints.file-mode": file_mode} if file_mode else None)
    modes = modes_below(tmp_path / "sp")
    assert len(modes) == 4, modes  # sp/, its savepoint directory, _metadata and one Parquet file
    assert {p: m for p, m in modes.items() if m != (files if os.path.isfile(p) else dirs)} == {}, sp


def test_dispose_deletes_only_what_the_savepoint_lists(tmp_path):
    """`flowpoint savepoint -d` as a user types it: the savepoint's files and _metadata go; a file
    someone else keeps in its directory stays, and is reported."""
    def savepoint(name: str) -> str:
        uri = write_savepoint(str(tmp_path), job_id="a" * 32, job_name="j", checkpoint_id=1, epoch=1, backend="hashmap",
                              operators=[OperatorSnapshot("op", "op", 2, 128, [PartState(0, 0, 63, {"count": {1: 2}}),
                                                                           PartState(1, 64, 127, {"count": {100: 3}})])],
                              directory_name=name)
        return uri.removeprefix("file://")

    clean = savepoint("savepoint-clean")
    r = cli("savepoint", "-d", clean, timeout=120)
    assert r.returncode == 0 and f"Savepoint '{clean}' disposed." in r.stdout, r.stdout + r.stderr
    assert not os.path.exists(clean) and "Left in place" not in r.stdout

    shared = savepoint("savepoint-shared")
    listed = sorted(os.listdir(shared))
    assert "_metadata" in listed and len(listed) == 3
    with open(os.path.join(shared, "notes.txt"), "w") as f:
        f.write("not the savepoint's")
    os.mkdir(os.path.join(shared, "more"))
    r = cli("savepoint", "-d", shared, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert sorted(os.listdir(shared)) == ["more", "notes.txt"]
    assert "Left in place: 2 entries" in r.stdout and os.path.join(shared, "notes.txt") in r.stdout


def test_state_reader_and_dispose_refuse_a_savepoint_directory_others_can_write(tmp_path, other_uid):
    """state_reader unpickles the values it reads and dispose deletes what _metadata lists: a
    savepoint in a directory another user can write (or owns) is neither read nor disposed."""
    from flowpoint.state_io import state_reader, state_writer

    sp = state_writer(128).with_keyed_state("counting", "count", [("a", 1)]).write(f"file://{tmp_path}/sp")
    path = sp.removeprefix("file://")
    os.chmod(path, 0o777)  # she can now put her own _metadata and pickles in it
    with pytest.raises(InsecurePathError, match=rf"{path} can be written .*state_reader"):
        state_reader(None, sp)
    with pytest.raises(InsecurePathError, match=rf"{path} can be written .*savepoint -d"):
        dispose_savepoint(sp)
    assert os.path.exists(os.path.join(path, "_metadata"))
    os.chmod(path, 0o700)
    give(tmp_path / "sp", other_uid)  # hers: she could replace it
    with pytest.raises(InsecurePathError, match="belongs to"):
        dispose_savepoint(sp)
    os.chown(tmp_path / "sp", os.geteuid(), -1)
    assert sorted(state_reader(None, sp).operators()[0]["state_names"]) == ["count"]
    dispose_savepoint(sp)
    assert not os.path.exists(path)
