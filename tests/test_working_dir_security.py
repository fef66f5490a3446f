"""Issue 10, case 5: the working directory is private to the job's user.

It is created with mode 0700 under a per-user location ($XDG_RUNTIME_DIR/flowpoint, else
~/.cache/flowpoint), refused (InsecurePathError naming it) when another user owns it or can
write it; working files are 0600 whatever the umask; the files of a job go when it ends, and
those a killed run left go once a run resumed from its checkpoint has finished."""

from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap
import time

import pytest
from untrusted import Planted, mode

from flowpoint import StreamExecutionEnvironment
from flowpoint.checkpoint import part_writer
from flowpoint.connectors.sinks import CollectSink
from flowpoint.errors import ConfigurationError, InsecurePathError
from flowpoint.partition.factory import partition_backend
from flowpoint.partition.protocol import StateLocation
from flowpoint.partition.working import (
    JobLock,
    claim_leftovers,
    default_working_dir,
    ensure_working_dir,
    lock_path,
)
from flowpoint.private_files import write_private

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
@pytest.fixture
def home(tmp_path, monkeypatch):
    """A user home of this test's own, without $XDG_RUNTIME_DIR and $XDG_CACHE_HOME."""
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("HOME", str(h))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    return h




# -- where it is ---------------------------------------------------------------------------------


def test_default_is_a_usable_xdg_runtime_dir_else_the_users_cache(home, tmp_path, monkeypatch):
    assert default_working_dir() == str(home / ".cache" / "flowpoint")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert default_working_dir() == str(tmp_path / "cache" / "flowpoint")
    monkeypatch.delenv("XDG_CACHE_HOME")

    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    assert default_working_dir() == str(run / "flowpoint")
    run.chmod(0o777)  # others can write it: not usable
    assert default_working_dir() == str(home / ".cache" / "flowpoint")
    run.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/run")
    assert default_working_dir() == str(home / ".cache" / "flowpoint")
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path / "missing"))
    assert default_working_dir() == str(home / ".cache" / "flowpoint")


def test_an_xdg_runtime_dir_of_another_user_is_not_used(home, tmp_path, monkeypatch, other_uid):
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    os.chown(run, other_uid, -1)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(run))
    assert default_working_dir() == str(home / ".cache" / "flowpoint")


def test_created_0700_and_files_0600_whatever_the_umask(home):
    old = os.umask(0)
    try:
        root = ensure_working_dir(None)
        assert root == os.path.realpath(home / ".cache" / "flowpoint")
        assert mode(root) == 0o700
        uri = os.path.join(root, "durable", "job", "run-0", "stage-1", "part-0", "delta-00000001-x.pkl")
        part_writer.write_working_file(uri, b"state")
        assert mode(uri) == 0o600
        for d in ("durable", "durable/job", "durable/job/run-0/stage-1/part-0"):
            assert mode(os.path.join(root, d)) == 0o700, d
        shared = home / "shared-file"
        shared.write_bytes(b"")
        shared.chmod(0o666)
        write_private(str(shared), b"x")  # an existing file keeps no looser mode
        assert mode(shared) == 0o600
    finally:
        os.umask(old)


def test_the_default_location_is_tightened_a_configured_one_keeps_its_mode(home, tmp_path):
    default = home / ".cache" / "flowpoint"
    default.mkdir(parents=True, mode=0o755)
    default.chmod(0o755)
    ensure_working_dir(None)
    assert mode(default) == 0o700
    configured = tmp_path / "work"
    configured.mkdir(mode=0o750)
    configured.chmod(0o750)
    assert ensure_working_dir(str(configured)) == os.path.realpath(configured)
    assert mode(configured) == 0o750  # the user's directory; what flowpoint makes in it is 0700


# -- refused ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("configured", [False, True])
def test_refused_when_another_user_owns_it(home, tmp_path, other_uid, configured):
    target = tmp_path / "work" if configured else home / ".cache" / "flowpoint"
    target.mkdir(parents=True, mode=0o700)
    os.chown(target, other_uid, -1)
    with pytest.raises(InsecurePathError, match=rf"{target} belongs to .*uid {other_uid}.*not to you") as e:
        ensure_working_dir(str(target) if configured else None)
    assert isinstance(e.value, ConfigurationError) and not e.value.recoverable
    assert "state.working.dir" in str(e.value)


@pytest.mark.parametrize("bits", [0o777, 0o770, 0o702])
def test_refused_when_others_can_write_it(tmp_path, bits):
    target = tmp_path / "work"
    target.mkdir()
    target.chmod(bits)
    with pytest.raises(InsecurePathError, match=rf"{target} can be written by other users \(mode 0{bits:o}\).*chmod 700"):
        ensure_working_dir(str(target))
    assert mode(target) == bits  # not "repaired" behind the user's back


def test_refused_below_a_directory_others_can_replace(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"below {shared}, which other users can write .*no sticky bit"):
        ensure_working_dir(str(shared / "work"))
    shared.chmod(0o1777)  # as /tmp: others cannot rename what is ours
    assert mode(ensure_working_dir(str(shared / "work"))) == 0o700


def test_refused_through_a_symbolic_link_of_another_user(tmp_path, other_uid):
    real = tmp_path / "real"
    real.mkdir(mode=0o700)
    link = tmp_path / "link"
    link.symlink_to(real)
    os.lchown(link, other_uid, -1)
    with pytest.raises(InsecurePathError, match=rf"symbolic link {link} of .*uid {other_uid}"):
        ensure_working_dir(str(link))


def test_executors_check_their_own_working_dir(home, tmp_path, other_uid):
    """A task finds its host's working directory itself (state.working.dir, or its user's default
    there), with the same checks."""
    location = StateLocation("job/run-0", "", str(tmp_path / "durable"), "rocksdb")
    backend = partition_backend(location, 128)
    assert backend.local_dir(1, 0).startswith(os.path.realpath(home / ".cache" / "flowpoint") + os.sep)
    assert mode(home / ".cache" / "flowpoint") == 0o700
    theirs = tmp_path / "theirs"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, other_uid, -1)
    backend = partition_backend(StateLocation("job/run-0", str(theirs), str(tmp_path / "durable"), "rocksdb"), 128)
    with pytest.raises(InsecurePathError, match=str(theirs)):
        backend.local_dir(1, 0)


def test_a_job_refuses_a_working_dir_another_user_prepared(spark, home, tmp_path, other_uid):
    """The attack of issue 10 case 5: another user creates the working directory first and puts
    pickles there. The job refuses to start and names the directory; nothing in it is read."""
    planted = home / ".cache" / "flowpoint"
    planted.mkdir(parents=True)
    planted.chmod(0o777)
    marker = tmp_path / "pwned"
    for sub in ("durable", "job"):
        (planted / sub).mkdir()
        (planted / sub / "delta.pkl").write_bytes(pickle.dumps(Planted(str(marker))))
    os.chown(planted, other_uid, -1)
    env = StreamExecutionEnvironment.get_execution_environment({"execution.progress.interval": -1}, spark_session=spark)
    env.from_collection([1, 2, 3]).key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sum").sink_to(CollectSink())
    with pytest.raises(InsecurePathError, match=rf"default working directory {planted} belongs to"):
        env.execute("planted working dir")
    assert not marker.exists()


# -- which runs are over: lock files ---------------------------------------------------------------


def test_a_held_lock_is_not_claimed_a_killed_holders_is(tmp_path):
    root = str(tmp_path)
    lock = JobLock(root, "a" * 32)
    assert mode(lock_path(root, "a" * 32)) == 0o600
    assert not claim_leftovers(root, "a" * 32)  # this run is alive
    lock.release()
    assert claim_leftovers(root, "a" * 32)  # ended without removing its files
    assert not claim_leftovers(root, "b" * 32)  # no lock file: nothing known, nothing claimed

    holder = subprocess.Popen(
        [sys.executable, "-c", f"import sys, time; from flowpoint.partition.working import JobLock; JobLock({root!r}, 'c' * 32); "
         "print('held', flush=True); time.sleep(600)"],
        stdout=subprocess.PIPE, text=True, cwd=REPO,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        assert not claim_leftovers(root, "c" * 32)
    finally:
        holder.kill()  # SIGKILL: the kernel releases the lock
        holder.wait(timeout=30)
    assert claim_leftovers(root, "c" * 32)


# -- end to end: a job's files, kill -9 and --resume -----------------------------------------------

JOB = textwrap.dedent(
    """
    import sys
    from flowpoint import DataGeneratorSource, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.epoch.interval": 50, "state.backend.type": "rocksdb"})
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(sys.argv[2])
    source = DataGeneratorSource(lambda i: i % 7, count=int(sys.argv[3]), rate_limit_per_second=int(sys.argv[4]))
    env.from_source(source, source_name="numbers").uid("numbers") \\
       .key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sums").print()
    env.execute(sys.argv[1])
    """
)


def files_below(root) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(root) for f in fs)


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    msg = f"timed out waiting for {what}"
    raise AssertionError(msg)


@pytest.mark.slow
def test_private_files_and_no_leftovers_after_kill_and_resume(tmp_path, other_uid):
    """A RocksDB job under umask 000 keeps its working files where only its user can reach them
    (in $XDG_RUNTIME_DIR/flowpoint, on the driver and in the executors' Python workers); killed
    with SIGKILL it leaves them; a run resumed from its checkpoint removes them once it has
    finished, and its own too."""
    run_dir = tmp_path / "xdg"
    run_dir.mkdir(mode=0o700)
    work = run_dir / "flowpoint"
    home = tmp_path / "fphome"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, FLOWPOINT_HOME=str(home), XDG_RUNTIME_DIR=str(run_dir), HOME=str(tmp_path / "userhome"))
    cmd = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[2]", "-D", "execution.runtime=epoch"]  # its epochs' durable files
    args = [str(script), "kill-resume", f"file://{tmp_path}/ck"]

    def umask0():
        os.umask(0)

    first = subprocess.Popen([*cmd, "-D", "execution.progress.interval=-1", *args, "100000", "150"], stdout=subprocess.DEVNULL, stderr=open(tmp_path / "first.err", "w"),
                             env=env, cwd=str(tmp_path), preexec_fn=umask0)
    try:
        def checkpointed():
            assert first.poll() is None, (tmp_path / "first.err").read_text()[-3000:]
            entries = [json.loads(p.read_text()) for p in (home / "jobs").glob("*.json")] if (home / "jobs").is_dir() else []
            return next((e for e in entries if e.get("last_checkpoint_id", 0) and e["last_checkpoint_id"] >= 2), None)

        entry = wait_for(checkpointed, 240, "two checkpoints of the first run")
        old = entry["job_id"]
        # while it runs: every directory is 0700, every file flowpoint writes 0600 (RocksDB's own
        # files keep the umask's mode inside 0700 DB directories)
        assert mode(work) == 0o700
        assert os.path.isdir(work / old) and os.path.isdir(work / "durable" / old)
        for d, dirs, _ in os.walk(work):
            for name in dirs:
                if name.endswith(".tmp") and os.path.basename(d).startswith("chk-"):
                    continue  # RocksDB's own staging directory of a checkpoint (umask mode) inside a 0700 chk-<n>
                assert mode(os.path.join(d, name)) == 0o700, os.path.join(d, name)
        written = [f for f in files_below(work) if "/db-" not in f]
        assert any(f.endswith(".pkl") for f in written) and any(f.endswith("LINEAGE") for f in written)
        for f in written:
            assert mode(f) == 0o600, f
        # another user reaches nothing
        seen = subprocess.run(["find", str(work), "-readable"], capture_output=True, text=True, user=other_uid, group=other_uid,
                              extra_groups=[])
        assert seen.stdout.split() == [], seen.stdout
        assert "Permission denied" in seen.stderr
    finally:
        first.kill()  # kill -9
        first.wait(timeout=60)
    assert os.path.exists(work / f"{old}.lock") and files_below(work / old) and files_below(work / "durable" / old)

    second = subprocess.run([*cmd, "--resume", "-D", "execution.progress.interval=60000", *args, "100000", "100000"], capture_output=True, text=True, env=env,
                            cwd=str(tmp_path), timeout=300)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"of job {old}" in second.stderr  # it restored the killed run's checkpoint
    assert not os.path.exists(work / old) and not os.path.exists(work / "durable" / old)
    assert not os.path.exists(work / f"{old}.lock")
    assert files_below(work) == []  # nothing of either run is left
    assert mode(work) == 0o700


def test_restored_rocksdb_files_are_0600_whatever_the_umask(tmp_path):
    """Both local copies of RocksDB files at a restore (a checkpoint's, a durable working
    base's) go through ``parts.restore_db``: the DB they make holds no file others can read."""
    from rocksdict import Rdict

    from flowpoint.checkpoint.parts import restore_db

    src = tmp_path / "src"
    db = Rdict(str(src))
    db[b"k"] = b"v"
    db.close()
    files = [(p.name, p.read_bytes()) for p in src.iterdir() if p.is_file() and p.name != "LOCK"]
    old = os.umask(0)
    try:
        restore_db(str(tmp_path / "local" / "db"), files)
    finally:
        os.umask(old)
    restored = tmp_path / "local" / "db"
    assert {p.name: mode(p) for p in restored.iterdir()} == {name: 0o600 for name, _ in files}
    assert sorted(os.listdir(tmp_path / "local")) == ["db"]  # no staging left
    db = Rdict(str(restored))
    assert db[b"k"] == b"v"
    db.close()
