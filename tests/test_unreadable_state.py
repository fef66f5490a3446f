"""State files that match their checksum but do not unpickle (issue 17, case 6): the restore
fails once with StateDecodeError naming the file (and the operator), never restarts."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import subprocess
import sys
import textwrap
import time
import types

import pyarrow as pa
import pytest

from flowpoint.api.state import ValueStateDescriptor
from flowpoint.checkpoint.parts import RestoredFile
from flowpoint.checkpoint.savepoint import SCHEMA, decode_rows
from flowpoint.checkpoint.signing import Keyring, seal
from flowpoint.checkpoint.values import PickledValue, load_user
from flowpoint.errors import CorruptStateError, StateDecodeError
from flowpoint.partition.backend import PartitionBackend
from flowpoint.partition.committed_chain import CommittedFile
from flowpoint.partition.working import load_restored
from flowpoint.spark.failures import is_recoverable, task_error

NOT_A_PICKLE = b"\x80\x05this is no pickle"


def _check(info, path):
    err = info.value
    assert isinstance(err, CorruptStateError) and not is_recoverable(err)
    assert err.path == path and path in str(err) and "matches its recorded checksum but cannot be decoded" in str(err)


def test_a_checkpoint_part_that_does_not_unpickle_names_the_file_and_operator():
    uri = "file:///ck/job/chk-3/counting-0.pkl"
    f = RestoredFile("counting", uri, len(NOT_A_PICKLE), data=NOT_A_PICKLE, sha256=hashlib.sha256(NOT_A_PICKLE).hexdigest())
    with pytest.raises(StateDecodeError) as info:
        load_restored([f])
    _check(info, uri)
    assert "operator uid 'counting'" in str(info.value)


def test_savepoint_rows_that_do_not_unpickle_name_the_file():
    table = pa.Table.from_arrays([
        pa.array([0], pa.int32()), pa.array([pickle.dumps("k")], pa.binary()), pa.array(["count"]),
        pa.nulls(1, pa.binary()), pa.nulls(1, pa.binary()), pa.array([NOT_A_PICKLE], pa.binary()),
    ], schema=SCHEMA)
    with pytest.raises(StateDecodeError) as info:
        decode_rows(table, {"count": "value"}, None, "file:///sp/counting-0.parquet", "counting")
    _check(info, "file:///sp/counting-0.parquet")


def test_a_durable_delta_that_does_not_unpickle_names_the_file():
    backend = types.SimpleNamespace(read=lambda f, what, stage, part: NOT_A_PICKLE)
    f = CommittedFile(4, "t", "file:///w/durable/run/stage-1/part-0/delta-00000004-t.pkl", len(NOT_A_PICKLE), None)
    with pytest.raises(StateDecodeError) as info:
        PartitionBackend.load(backend, f, "delta", 1, 0)
    _check(info, f.path)
    assert "working delta" in str(info.value) and "restore the job from a checkpoint" in str(info.value)


def test_a_pickled_value_in_metadata_that_does_not_load_names_the_metadata_file():
    uri = "file:///ck/job/chk-3/_metadata"
    with pytest.raises(StateDecodeError) as info:
        load_user(PickledValue(NOT_A_PICKLE), uri, "the driver state of sink uid 'files' in")
    _check(info, uri)
    assert "sink uid 'files'" in str(info.value)


def test_a_rocksdb_value_whose_class_is_gone_fails_naming_the_state(tmp_path, monkeypatch):
    from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

    module_dir = tmp_path / "mods"
    module_dir.mkdir()
    (module_dir / "gone_values.py").write_text("class Point:\n    def __init__(self, x):\n        self.x = x\n")
    monkeypatch.syspath_prepend(str(module_dir))
    import gone_values

    path = str(tmp_path / "db")
    b = RocksDBKeyedStateBackend("counting", path, 128)
    b.open()
    b.current_key = "k"
    b.get_partitioned_state(ValueStateDescriptor("point")).update(gone_values.Point(1))
    b.apply(pickle.loads(pickle.dumps(b.delta())))
    b.commit()
    b.close()
    # the job's code changed: the class its state uses is gone
    del sys.modules["gone_values"]
    (module_dir / "gone_values.py").unlink()
    again = RocksDBKeyedStateBackend("counting", path, 128)
    again.open()
    try:
        again.current_key = "k"
        with pytest.raises(StateDecodeError) as info:
            again.get_partitioned_state(ValueStateDescriptor("point")).value()
        assert "'point'" in str(info.value) and "'counting'" in str(info.value) and path in str(info.value)
        assert "ModuleNotFoundError" in str(info.value) and not is_recoverable(info.value)
    finally:
        again.close()


def test_the_error_keeps_its_class_across_spark():
    text = (
        "Traceback (most recent call last):\n  File \"x.py\", line 1, in f\n"
        "flowpoint.errors.StateDecodeError: checkpoint file file:///ck/chk-3/a-0.pkl (operator uid 'a') matches its "
        "recorded checksum but cannot be decoded (UnpicklingError: x)\n"
    )
    err = task_error(text, 1)
    assert type(err) is StateDecodeError and not is_recoverable(err) and "a-0.pkl" in str(err)


# -- through the CLI -------------------------------------------------------------------------------

COUNTING_JOB = """
import sys
from flowpoint import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor
from flowpoint.connectors.sinks import CollectSink

FAIL_AT = int(sys.argv[1])  # -1: never


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        if value == FAIL_AT:
            raise RuntimeError("injected failure")
        self.n.update((self.n.value() or 0) + 1)
        yield value


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.enable_checkpointing(1)
env.from_collection(list(range(300))).uid("numbers").key_by(lambda x: x % 5).process(Count()).uid("counting").sink_to(CollectSink())
env.execute("unpicklable state")
"""


def _run(tmp_path, *args, timeout=300):
    cli = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[1]",
           "-D", f"state.checkpoints.dir={tmp_path / 'ck'}", "-D", f"state.working.dir={tmp_path / 'w'}",
           "-D", "execution.epoch.max-records=50", "-D", "state.checkpoints.num-retained=3", *args]
    env = {**os.environ, "FLOWPOINT_HOME": str(tmp_path / "home")}
    return subprocess.run(cli, capture_output=True, text=True, timeout=timeout, cwd=str(tmp_path), env=env)


def _rewrite_with_valid_checksums(chk: str, rel: str, data: bytes) -> None:
    """Replace file ``rel`` (relative to the job directory) of checkpoint ``chk`` by ``data`` and
    record its size and SHA-256 in ``_metadata`` the way flowpoint computes them."""
    with open(os.path.join(os.path.dirname(chk), rel), "wb") as f:
        f.write(data)
    meta_path = os.path.join(chk, "_metadata")
    with open(meta_path) as f:
        meta = json.load(f)
    for op in meta["operators"]:
        for sub in op["subtasks"]:
            for entry in sub["files"]:
                if entry["path"] == rel:
                    entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
    # signed with the key of the FLOWPOINT_HOME the runs use (_run): the job's owner wrote it
    meta = seal(meta, Keyring(key_file=os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(chk))), "home", "checkpoint-key")))
    with open(meta_path, "w") as f:
        json.dump(meta, f, indent=2)


@pytest.mark.slow
def test_resuming_from_a_part_that_does_not_unpickle_fails_once_naming_it(tmp_path):
    job = tmp_path / "job.py"
    job.write_text(textwrap.dedent(COUNTING_JOB))
    first = _run(tmp_path, "-D", "restart-strategy.type=none", str(job), "230")
    assert first.returncode == 1 and "injected failure" in first.stderr, first.stderr[-3000:]
    [job_dir] = [os.path.join(tmp_path, "ck", d) for d in os.listdir(tmp_path / "ck")]
    chk = max((os.path.join(job_dir, d) for d in os.listdir(job_dir) if d.startswith("chk-")), key=lambda d: int(d[len(job_dir) + 5 :]))
    with open(os.path.join(chk, "_metadata")) as f:
        [rel] = [e["path"] for op in json.load(f)["operators"] for s in op["subtasks"] for e in s["files"] if e["path"].endswith(".pkl")]
    _rewrite_with_valid_checksums(chk, rel, NOT_A_PICKLE)
    started = time.monotonic()
    second = _run(tmp_path, "--resume", str(job), "-1")  # the default restart strategy: unlimited restarts
    assert second.returncode == 1, second.stderr[-3000:]
    errors = [ln for ln in second.stderr.splitlines() if ln.startswith("flowpoint: error:")]
    assert len(errors) == 1, second.stderr[-3000:]
    assert os.path.join(job_dir, rel) in errors[0] and "'counting'" in errors[0], errors[0]
    assert "cannot be decoded" in errors[0]
    assert "Restarting" not in second.stderr
    assert time.monotonic() - started < 120
