"""Integrity of checkpoints and savepoints (issue 10, cases 1, 2, 3 and 7).

Real checkpoints and savepoints, written by real jobs on local Spark with both backends, are
damaged byte by byte: a restore is refused before any task starts with a CorruptStateError
naming the file, or it is exact; a corrupt checkpoint never restarts a job; and reading
``_metadata`` (``flowpoint inspect``, ``flowpoint savepoint --dispose``, ``describe``) runs no
code from the file.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

import pytest
from checkpoint_jobs import Counting, build, expected_state, record
from conftest import build_env

from flowpoint import RestartStrategies
from flowpoint.checkpoint.directory import resolve_restore_path
from flowpoint.checkpoint.integrity import metadata_checksum
from flowpoint.checkpoint.parts import restore_native
from flowpoint.checkpoint.savepoint import describe
from flowpoint.cli import main
from flowpoint.driver.restore import plan_restore
from flowpoint.errors import (
    CheckpointError,
    CorruptStateError,
    FlowpointError,
    JobCancelledError,
    JobExecutionError,
    SerializationError,
)
from flowpoint.partition.working import load_restored

HERE = os.path.dirname(os.path.abspath(__file__))
EVENTS = 2_000
FAIL_AT = 1_700
BACKENDS = ["hashmap", "rocksdb"]


# -- real checkpoints and a real savepoint, written once per module ----------------------------


def _metadata(directory: str) -> dict:
    with open(os.path.join(directory, "_metadata")) as f:
        return json.load(f)


def _latest_checkpoint(job_dir: str) -> str:
    ids = [int(n[4:]) for n in os.listdir(job_dir) if n.startswith("chk-") and os.path.exists(os.path.join(job_dir, n, "_metadata"))]
    assert ids, f"no complete checkpoint in {job_dir}"
    return os.path.join(job_dir, f"chk-{max(ids)}")


def _failed_run(spark, base: str, backend: str) -> str:
    """The counting job with checkpoints at every epoch boundary, failing for good at record
    FAIL_AT: a FAILED job keeps its checkpoints. Returns its latest retained checkpoint."""
    env = build_env(spark, os.path.join(base, "working"), 2, 200, state_checkpoints_dir=os.path.join(base, "ck"))
    env.get_configuration().set("state.backend.type", backend)
    env.get_configuration().set("state.backend.incremental", True)
    env.get_configuration().set("state.checkpoints.num-retained", 2)
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.no_restart())
    build(env, EVENTS, function=Counting(fail_value=record(FAIL_AT), flag=os.path.join(base, "flag"), fail_times=10**6))
    client = env.execute_async("integrity")
    with pytest.raises(JobExecutionError, match="injected failure"):
        client.wait(300)
    return _latest_checkpoint(os.path.join(base, "ck", client.get_job_id()))


@pytest.fixture(scope="module")
def checkpoints(spark, tmp_path_factory) -> dict[str, str]:
    """backend -> the chk-<n> directory of a real retained checkpoint."""
    return {b: _failed_run(spark, str(tmp_path_factory.mktemp(f"retained-{b}")), b) for b in BACKENDS}


@pytest.fixture(scope="module")
def savepoint(spark, tmp_path_factory) -> str:
    """A real savepoint of the counting job, taken mid-run."""
    base = str(tmp_path_factory.mktemp("savepoint"))
    env = build_env(spark, os.path.join(base, "working"), 2, 100)
    build(env, EVENTS, rate=1500)
    client = env.execute_async("savepointed")
    deadline = time.monotonic() + 120
    while client.progress().epoch < 3 and not client.is_done() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client.is_done(), "the job ended before the savepoint"
    path = client.trigger_savepoint(os.path.join(base, "sp"))
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    return path[len("file://"):] if path.startswith("file://") else path


def copy_checkpoint(chk: str, to: str) -> str:
    """A copy of the checkpoint's whole job directory (its files are relative to it); returns
    the copied chk-<n> directory."""
    job_dir = os.path.dirname(chk)
    target = os.path.join(to, os.path.basename(job_dir))
    shutil.copytree(job_dir, target)
    return os.path.join(target, os.path.basename(chk))


def restore_env(spark, base: str, path: str, backend: str):
    env = build_env(spark, os.path.join(base, "restore-working"), 2, 200)
    env.get_configuration().set("state.backend.type", backend)
    env.get_configuration().set("execution.savepoint.path", path)
    sink = build(env, EVENTS)
    return env, sink


def state_of(result) -> dict:
    state = result.get_keyed_state("counting")
    return {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})}


def referenced(directory: str) -> list[str]:
    """The files a checkpoint or savepoint directory's _metadata names, relative to the
    directory its paths are relative to (the job directory for a checkpoint)."""
    meta = _metadata(directory)
    return sorted({f["path"] for op in meta["operators"] for s in op["subtasks"] for f in s["files"]})


def files_root(directory: str) -> str:
    return os.path.dirname(directory) if _metadata(directory)["kind"] == "checkpoint" else directory


def flip(path: str, offset: int, mask: int = 0xFF) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        b = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([b ^ mask]))


def refused_before_any_task(client) -> CorruptStateError:
    with pytest.raises(CorruptStateError) as e:
        client.wait(120)
    progress = client.progress()
    assert progress.epoch == 0 and progress.restarts == 0  # no epoch ran, no restart
    assert client.get_job_status().value == "FAILED"
    return e.value


# -- case 1: one flipped byte in a checkpoint state file ---------------------------------------


def _silently_wrong_offset(data: bytes) -> int:
    """An offset where flipping the 64 bit still unpickles, into other state (what a restore
    without checksums took as the truth: "a count came back 64 too high")."""
    good = pickle.loads(data)
    for offset in range(len(data) - 1, 0, -1):
        damaged = bytearray(data)
        damaged[offset] ^= 0x40
        try:
            if pickle.loads(bytes(damaged)) != good:
                return offset
        except Exception:  # noqa: BLE001, S112 - this flip breaks unpickling: try the next byte
            continue
    raise AssertionError("no silently wrong flip found")


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_flipped_byte_in_a_checkpoint_state_file_is_refused_naming_it(spark, tmp_path, checkpoints, backend):
    chk = copy_checkpoint(checkpoints[backend], str(tmp_path))
    env, _ = restore_env(spark, str(tmp_path), chk, backend)
    assert state_of(env.execute("pristine")) == expected_state(EVENTS)  # the undamaged copy restores exactly

    root = files_root(chk)
    if backend == "hashmap":
        rel = next(p for p in referenced(chk) if p.endswith(".pkl"))
        target = os.path.join(root, rel)
        with open(target, "rb") as f:
            offset = _silently_wrong_offset(f.read())
        flip(target, offset, 0x40)
    else:
        rel = max((p for p in referenced(chk) if p.endswith(".sst")), key=lambda p: os.path.getsize(os.path.join(root, p)))
        target = os.path.join(root, rel)
        flip(target, os.path.getsize(target) // 2)
    env, _ = restore_env(spark, str(tmp_path), chk, backend)
    error = refused_before_any_task(env.execute_async("damaged"))
    assert error.path == f"file://{target}"
    assert target in str(error) and "SHA-256" in str(error) and "restore from another checkpoint" in str(error)
    assert not error.recoverable


# -- case 2: a corrupt checkpoint never restarts a job -----------------------------------------


class CorruptingCounting(Counting):
    """Fails at one record, after damaging (once) every state file of the job's checkpoints:
    the restart that follows finds its latest checkpoint corrupt."""

    def __init__(self, fail_value: int, job_root: str, marks: str):
        super().__init__(fail_value, flag=os.path.join(marks, "never"), fail_times=10**6)
        self.job_root = job_root
        self.marks = marks

    def process_element(self, value, ctx):
        if value == self.fail_value:
            for job in os.listdir(self.job_root):
                for dirpath, _dirs, names in os.walk(os.path.join(self.job_root, job)):
                    for name in names:
                        path = os.path.join(dirpath, name)
                        mark = os.path.join(self.marks, hashlib.sha1(path.encode()).hexdigest())
                        if name == "_metadata" or "taskowned" in path or os.path.exists(mark) or not ("/chk-" in path or "/shared/" in path):
                            continue
                        try:
                            if os.path.getsize(path) == 0:
                                continue
                            flip(path, os.path.getsize(path) // 2)
                        except OSError:
                            continue  # a temporary file of a write in progress, renamed meanwhile
                        open(mark, "w").close()
        yield from super().process_element(value, ctx)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_corrupt_checkpoint_fails_the_restart_at_once(spark, tmp_path, backend):
    ck, marks = str(tmp_path / "ck"), str(tmp_path / "marks")
    os.makedirs(marks)
    env = build_env(spark, str(tmp_path / "working"), 2, 200, state_checkpoints_dir=ck)
    env.get_configuration().set("state.backend.type", backend)
    env.get_configuration().set("state.backend.incremental", True)
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1000, 10))  # would loop for long
    build(env, EVENTS, function=CorruptingCounting(record(FAIL_AT), ck, marks))
    client = env.execute_async("restart-from-corrupt")
    started = time.monotonic()
    with pytest.raises(CorruptStateError) as e:
        client.wait(300)
    assert time.monotonic() - started < 240
    assert client.progress().restarts == 1  # the one restart that found the checkpoint corrupt, no more
    assert os.path.getsize(os.path.join(marks, "never.failures")) <= 4  # the injected failure's attempts only
    assert e.value.path and e.value.path.startswith(f"file://{ck}/{client.get_job_id()}/")
    assert e.value.path in str(e.value) and client.get_job_status().value == "FAILED"


# -- case 3: one flipped bit in a savepoint's _metadata ----------------------------------------


@pytest.mark.slow
def test_flipped_bit_in_a_savepoint_source_position_is_refused(spark, tmp_path, savepoint):
    sp = str(tmp_path / "sp")
    shutil.copytree(savepoint, sp)
    env, sink = restore_env(spark, str(tmp_path), sp, "hashmap")
    result = env.execute("pristine")
    assert state_of(result) == expected_state(EVENTS)  # exact, with the positions as recorded

    path = os.path.join(sp, "_metadata")
    with open(path, "rb") as f:
        text = f.read()
    m = list(re.finditer(rb'"position": (\d+)', text))[-1]
    damaged = bytearray(text)
    damaged[m.end(1) - 1] ^= 0x01  # one bit: the last digit of a split's read position
    before, after = json.loads(text), json.loads(bytes(damaged))  # still JSON, other positions
    assert [s["position"] for s in before["sources"]] != [s["position"] for s in after["sources"]]
    with open(path, "wb") as f:
        f.write(bytes(damaged))
    env, _ = restore_env(spark, str(tmp_path), sp, "hashmap")
    error = refused_before_any_task(env.execute_async("damaged"))
    assert error.path == f"file://{path}" and "metadata_sha256" in str(error)


# -- case 7: inspect, dispose and describe run no code from the file ---------------------------


class Marker:
    """Unpickling this creates a file: the proof that code from a file ran."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))


def crafted(data: dict, marker: str) -> dict:
    """``data`` with a pickle that creates ``marker`` in every value slot, checksummed as a
    writer of such a file would."""
    evil = {"__pickle__": base64.b64encode(pickle.dumps(Marker(marker))).decode()}
    d = json.loads(json.dumps(data))
    d["sinks"] = {"collect": evil}
    d["watermarks"]["operator_state"] = evil
    d["watermarks"]["generators"] = {"g": evil}
    d["metadata_sha256"] = metadata_checksum(d)
    return d


def write_json(path: str, d: dict) -> None:
    with open(path, "w") as f:
        json.dump(d, f)


def cli(capsys, *args: str) -> tuple[int, str]:
    code = main(list(args))
    out = capsys.readouterr()
    return code, out.out + out.err


def test_inspect_and_dispose_run_no_code_from_a_savepoint(tmp_path, savepoint, capsys):
    marker = str(tmp_path / "code-ran")
    # pickles in the slots for user values: read as opaque bytes, never loaded
    sp = str(tmp_path / "crafted")
    shutil.copytree(savepoint, sp)
    write_json(os.path.join(sp, "_metadata"), crafted(_metadata(sp), marker))
    code, out = cli(capsys, "inspect", sp)
    assert code == 0 and "counting" in out and "numbers: 2 splits" in out
    info = describe(sp)
    assert info["sinks"] == ["collect"] and info["operators"][0]["states"]["count"]["keys"] == 13
    code, out = cli(capsys, "savepoint", "--dispose", sp)
    assert code == 0 and not os.path.exists(sp)
    assert not os.path.exists(marker)

    # a pickle where only data may be (a source position), and the old format's pickled positions
    for name, edit in (("in-position", "position"), ("old-format", "v1")):
        sp = str(tmp_path / name)
        shutil.copytree(savepoint, sp)
        d = _metadata(sp)
        d["sources"][0]["position"] = {"__pickle__": base64.b64encode(pickle.dumps(Marker(marker))).decode()}
        if edit == "v1":
            d["format_version"] = 1
            del d["metadata_sha256"]
        else:
            d["metadata_sha256"] = metadata_checksum(d)
        write_json(os.path.join(sp, "_metadata"), d)
        code, out = cli(capsys, "inspect", sp)
        assert code == 1 and "_metadata" in out
        assert ("earlier flowpoint" in out) if edit == "v1" else ("pickled value where checkpoint metadata holds only data" in out)
        with pytest.raises(CheckpointError):
            describe(sp)
        code, out = cli(capsys, "savepoint", "--dispose", sp)
        assert code == 0 and not os.path.exists(sp), out  # still a savepoint directory: it goes
        assert not os.path.exists(marker)


@pytest.mark.parametrize("backend", BACKENDS)
def test_describe_reads_no_state_file_of_a_checkpoint(tmp_path, checkpoints, backend):
    """A crafted HashMap part (its checksum and _metadata's matching) is never unpickled by
    describe; a RocksDB checkpoint's keys are counted from their bytes."""
    marker = str(tmp_path / "code-ran")
    chk = copy_checkpoint(checkpoints[backend], str(tmp_path))
    pristine = describe(chk)
    [op] = [o for o in pristine["operators"] if o["uid"] == "counting"]
    assert op["states"]["count"]["keys"] == 13 and op["states"]["by_digit"]["kind"] == "map" and op["states"]["last"]["kind"] == "list"
    if backend == "hashmap":
        d = _metadata(chk)
        evil = pickle.dumps(Marker(marker))
        for sub in d["operators"][0]["subtasks"]:
            for f in sub["files"]:
                with open(os.path.join(files_root(chk), f["path"]), "wb") as out:
                    out.write(evil)
                f["size"], f["sha256"] = len(evil), hashlib.sha256(evil).hexdigest()
        d["metadata_sha256"] = metadata_checksum(d)
        write_json(os.path.join(chk, "_metadata"), d)
        assert describe(chk)["operators"] == pristine["operators"]
        assert not os.path.exists(marker)


# -- randomized corruption ---------------------------------------------------------------------

CASES = 100
SEED = 20240610


def _graph(spark, tmp: str):
    env = build_env(spark, os.path.join(tmp, "graph-working"), 2, 200)
    build(env, EVENTS)
    return env.get_stream_graph("randomized")


def _state(restored, tmp: str) -> dict:
    """What every partition's tasks would load (the task-side code, verifying too)."""
    out = {}
    for key, chain in sorted(restored.chains.items()):
        native = [f for f in chain.restored if f.files]
        if native:
            from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

            path = tempfile.mkdtemp(dir=tmp)
            db = os.path.join(path, "db")
            restore_native(db, native, {})
            b = RocksDBKeyedStateBackend("counting", db, 128)
            b.open()
            try:
                out[key] = b.snapshot()
            finally:
                b.close()
        else:
            out[key] = load_restored(chain.restored)
    return out


def _restore(path: str, graph, backend: str, tmp: str) -> tuple:
    """The restore entry points the coordinator uses: resolve_restore_path, then plan_restore
    (which verifies every file), then what the tasks load."""
    access, meta = resolve_restore_path(path)
    restored = plan_restore(meta, access.uri(), graph, backend)
    return (restored.checkpoint_id, restored.epoch, restored.positions, restored.sinks, restored.watermarks, restored.records_read, _state(restored, tmp))


@pytest.mark.slow
def test_randomized_corruption_is_refused_or_exact(spark, tmp_path, checkpoints, savepoint):
    graph = _graph(spark, str(tmp_path))
    sources = [(checkpoints["hashmap"], "hashmap"), (checkpoints["rocksdb"], "rocksdb"), (savepoint, "hashmap")]
    pristine = [_restore(d, graph, b, str(tmp_path)) for d, b in sources]
    rng = random.Random(SEED)
    outcomes = {"refused": 0, "exact": 0}
    for case in range(CASES):
        which = case % len(sources)
        directory, backend = sources[which]
        rels = ["_metadata", *referenced(directory)]
        work = str(tmp_path / f"case-{case}")
        if _metadata(directory)["kind"] == "checkpoint":
            path = copy_checkpoint(directory, work)
            root, rels = os.path.dirname(path), [f"{os.path.basename(path)}/_metadata", *rels[1:]]
        else:
            path = root = os.path.join(work, "sp")
            shutil.copytree(directory, path)
        rel = rng.choice([r for r in rels if os.path.getsize(os.path.join(root, r)) > 0])  # (an empty file cannot be damaged)
        target = os.path.join(root, rel)
        size = os.path.getsize(target)
        if rng.random() < 0.5:
            what = f"flip at {rng.randrange(size)}"
            flip(target, int(what.split()[-1]), rng.randrange(1, 256))
        else:
            what = f"truncate to {rng.randrange(size)}"
            os.truncate(target, int(what.split()[-1]))
        try:
            got = _restore(path, graph, backend, work)
        except FlowpointError as e:
            assert target in str(e), f"case {case} ({rel}, {what}): the error does not name the file: {e}"
            if isinstance(e, CorruptStateError):
                assert e.path == f"file://{target}", f"case {case}: {e.path}"
            outcomes["refused"] += 1
        else:
            assert got == pristine[which], f"case {case} ({rel}, {what}): restored something else"
            outcomes["exact"] += 1
        shutil.rmtree(work)
    assert outcomes["refused"] + outcomes["exact"] == CASES
    assert outcomes["refused"] >= CASES * 0.9, outcomes  # nearly every damage is to bytes the restore reads
    print(f"randomized corruption: {outcomes}")


def test_tasks_verify_the_files_they_read(spark, tmp_path, checkpoints, savepoint):
    """A file that changes after the driver checked it is refused by the task reading it."""
    graph = _graph(spark, str(tmp_path))
    for directory, backend in ((checkpoints["hashmap"], "hashmap"), (checkpoints["rocksdb"], "rocksdb"), (savepoint, "hashmap")):
        if _metadata(directory)["kind"] == "checkpoint":
            path = copy_checkpoint(directory, str(tmp_path / backend))
        else:
            path = str(tmp_path / "sp")
            shutil.copytree(directory, path)
        access, meta = resolve_restore_path(path)
        restored = plan_restore(meta, access.uri(), graph, backend)
        root = files_root(path)
        for rel in referenced(path):
            if os.path.getsize(os.path.join(root, rel)):
                flip(os.path.join(root, rel), os.path.getsize(os.path.join(root, rel)) // 2)
        with pytest.raises(CorruptStateError, match="does not match the SHA-256") as e:
            _state(restored, str(tmp_path))
        assert e.value.path.startswith(f"file://{root}/")


# -- source positions are data -----------------------------------------------------------------


class Offset:
    def __init__(self, n: int):
        self.n = n

    def __eq__(self, other):
        return isinstance(other, Offset) and other.n == self.n

    def __hash__(self):
        return hash(self.n)


def test_a_source_position_that_is_not_data_fails_the_job_naming_the_source(make_env, tmp_path):
    from flowpoint import CollectSink
    from flowpoint.connectors.collection import CollectionSource

    class OffsetSource(CollectionSource):
        def plan(self, split, position, budget, elapsed_s):
            plan = super().plan(split, position.n if isinstance(position, Offset) else position, budget, elapsed_s)
            return type(plan)(Offset(plan.end), plan.records, plan.finished)

        def read_spec(self, split, start, end):
            return super().read_spec(split, getattr(start, "n", start), end.n)

    env = make_env(parallelism=1, max_records=10, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(100, 10))
    env.from_source(OffsetSource(list(range(100))), source_name="offsets").uid("offsets").key_by(lambda v: v % 3).reduce(lambda a, b: a + b).sink_to(CollectSink())
    with pytest.raises(SerializationError, match=r"uid 'offsets'.*not data.*encode_position and decode_position") as e:
        env.execute("offsets")
    assert "OffsetSource.encode_position" in str(e.value)


@pytest.mark.slow
def test_flowpoint_run_refuses_a_corrupt_checkpoint(tmp_path, checkpoints):
    chk = copy_checkpoint(checkpoints["hashmap"], str(tmp_path))
    rel = next(p for p in referenced(chk) if p.endswith(".pkl"))
    target = os.path.join(files_root(chk), rel)
    flip(target, os.path.getsize(target) // 2)
    job = os.path.join(HERE, "checkpoint_jobs.py")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")])}
    run = subprocess.run(
        [sys.executable, "-m", "flowpoint.cli", "run", "-s", chk, job, str(tmp_path / "ck2"), "hashmap", str(EVENTS), "0"],
        capture_output=True, text=True, timeout=300, env=env, cwd=str(tmp_path),
    )
    assert run.returncode == 1, run.stderr[-3000:]
    assert "flowpoint: error:" in run.stderr and target in run.stderr and "SHA-256" in run.stderr
    assert "epoch 1" not in run.stderr  # refused before any epoch ran
