"""Who wrote a checkpoint or savepoint (issue 25, item 2): ``_metadata`` is signed with the
installation's key, and a restore refuses, before anything is unpickled, a ``_metadata``
resealed by someone who can write checkpoint storage, a swapped state file, and a savepoint of
another installation unless trusted; a verified state file of the wrong shape fails the job once.

The attacks are those of the issue: a pickle that runs a command (here: creates a marker file)
put where a restore unpickles it, with sizes, SHA-256 sums and ``metadata_sha256`` recomputed
as anyone could.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import pickle
import re
import shutil
import stat
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from checkpoint_jobs import build, expected_state
from conftest import build_env
from test_integrity import (
    BACKENDS,
    EVENTS,
    _failed_run,
    _metadata,
    copy_checkpoint,
    files_root,
    referenced,
    restore_env,
    state_of,
    write_json,
)

from flowpoint import RestartStrategies
from flowpoint.checkpoint.integrity import metadata_checksum
from flowpoint.checkpoint.savepoint import SCHEMA, parquet_bytes
from flowpoint.checkpoint.signing import KEY_FILE, Keyring, read_key, seal
from flowpoint.cli import _parser, _settings
from flowpoint.errors import (
    ConfigurationError,
    InsecurePathError,
    JobCancelledError,
    StateDecodeError,
    UntrustedStateError,
)
from flowpoint.state_io import state_reader


class RunsCommand:
    """Unpickles to ``os.system(command)``: the issue's payload (0 when the command succeeds)."""

    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def evil(marker: str) -> bytes:
    return pickle.dumps(RunsCommand(f"touch {marker}"))


def reseal_with_file(directory: str, rel: str, data: bytes, keyring: Keyring | None = None) -> None:
    """Replace ``rel`` (relative to the checkpoint's or savepoint's file root) by ``data`` and
    record its size and SHA-256 in ``_metadata``; ``keyring``: sign as its owner, else reseal
    only ``metadata_sha256`` as anyone who can write the storage can."""
    with open(os.path.join(files_root(directory), rel), "wb") as f:
        f.write(data)
    d = _metadata(directory)
    for op in d["operators"]:
        for sub in op["subtasks"]:
            for entry in sub["files"]:
                if entry["path"] == rel:
                    entry["size"], entry["sha256"] = len(data), hashlib.sha256(data).hexdigest()
                    if "rows" in entry:  # a savepoint's Parquet file: its row count too
                        entry["rows"] = pq.read_metadata(pa.BufferReader(data)).num_rows
    if keyring is not None:
        d = seal(d, keyring)
    else:
        d["metadata_sha256"] = metadata_checksum(d)
    write_json(os.path.join(directory, "_metadata"), d)


def restarting_env(spark, base: str, path: str, backend: str, **config):
    env, _ = restore_env(spark, base, path, backend)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))  # a recoverable error would restart 3 times
    for k, v in config.items():
        env.get_configuration().set(k, v)
    return env


def fails_once(env, name: str, cls: type[Exception]) -> Exception:
    client = env.execute_async(name)
    with pytest.raises(cls) as e:
        client.wait(240)
    assert client.progress().restarts == 0, "the job restarted"
    assert client.get_job_status().value == "FAILED"
    assert not e.value.recoverable
    return e.value


@pytest.fixture(scope="module")
def checkpoints(spark, tmp_path_factory) -> dict[str, str]:
    return {b: _failed_run(spark, str(tmp_path_factory.mktemp(f"signed-{b}")), b) for b in BACKENDS}


@pytest.fixture(scope="module")
def savepoint(spark, tmp_path_factory) -> str:
    """A savepoint of the counting job, taken mid-run (as tests/test_integrity.py takes one)."""
    base = str(tmp_path_factory.mktemp("signed-savepoint"))
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


# -- the key -----------------------------------------------------------------------------------


def test_the_key_is_private_created_once_and_refused_when_others_can_read_it(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    key = Keyring().own
    path = str(tmp_path / "home" / KEY_FILE)
    assert key.path == path and stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert Keyring().own.secret == key.secret  # the same key next time
    os.chmod(path, 0o644)
    with pytest.raises(InsecurePathError, match=f"{path}.*other users.*chmod 600"):
        read_key(path)
    os.chmod(path, 0o600)
    with pytest.raises(ConfigurationError, match="does not exist"):
        Keyring(key_file=str(tmp_path / "missing")).sign({})


def test_the_trust_option_on_the_command_line():
    parsed = _parser().parse_args(["run", "--trust-savepoint-from-others", "-s", "/sp", "job.py"])
    assert _settings(parsed) == {"execution.savepoint.path": "/sp", "execution.savepoint.trust-from-others": True}


# -- a resealed _metadata, a swapped state file ------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_resealed_metadata_is_refused_before_anything_is_unpickled(spark, tmp_path, checkpoints, backend):
    marker = str(tmp_path / "code-ran")
    chk = copy_checkpoint(checkpoints[backend], str(tmp_path))
    d = _metadata(chk)
    payload = {"__pickle__": base64.b64encode(evil(marker)).decode()}
    d["sinks"] = {"collect": payload}  # the slots a restore unpickles
    d["watermarks"]["operator_state"] = payload
    d["metadata_sha256"] = metadata_checksum(d)  # resealed: its own checksum matches
    write_json(os.path.join(chk, "_metadata"), d)
    error = fails_once(restarting_env(spark, str(tmp_path), chk, backend), "resealed", UntrustedStateError)
    assert error.path == f"file://{chk}/_metadata" and error.path in str(error)
    assert "changed after flowpoint signed it" in str(error) and "--trust-savepoint-from-others" in str(error)
    assert not os.path.exists(marker)

    # the same without its signature (as a checkpoint written before checkpoints were signed)
    del d["metadata_hmac"]
    d["metadata_sha256"] = metadata_checksum(d)
    write_json(os.path.join(chk, "_metadata"), d)
    error = fails_once(restarting_env(spark, str(tmp_path), chk, backend), "unsigned", UntrustedStateError)
    assert "carries no signature" in str(error) and "before checkpoints were signed" in str(error)
    assert not os.path.exists(marker)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_swapped_state_file_is_refused_before_it_is_unpickled(spark, tmp_path, checkpoints, savepoint, backend):
    marker = str(tmp_path / "code-ran")
    if backend == "hashmap":  # a HashMap checkpoint's pickled part
        directory = copy_checkpoint(checkpoints[backend], str(tmp_path))
        rel = next(p for p in referenced(directory) if p.endswith(".pkl"))
        data = evil(marker)
    else:  # a savepoint's Parquet rows, restored into RocksDB: every value a payload
        directory = str(tmp_path / "sp")
        shutil.copytree(savepoint, directory)
        rel = referenced(directory)[0]
        rows = [pa.array([1], pa.int32()), pa.array([pickle.dumps(1)]), pa.array(["count"]), pa.nulls(1, pa.binary()),
                pa.nulls(1, pa.binary()), pa.array([evil(marker)])]
        data = parquet_bytes(pa.Table.from_arrays(rows, schema=SCHEMA))
    reseal_with_file(directory, rel, data)
    error = fails_once(restarting_env(spark, str(tmp_path), directory, backend), "swapped", UntrustedStateError)
    assert error.path == f"file://{directory}/_metadata" and "changed after flowpoint signed it" in str(error)
    assert not os.path.exists(marker)


# -- another installation's savepoint ----------------------------------------------------------


@pytest.mark.slow
def test_a_savepoint_of_another_installation_restores_only_when_trusted(spark, tmp_path, savepoint, monkeypatch):
    theirs = Keyring().own  # the installation that wrote the savepoint (this session's FLOWPOINT_HOME)
    sp = str(tmp_path / "sp")
    shutil.copytree(savepoint, sp)
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "other-home"))  # a second installation
    mine = Keyring().own
    assert mine.key_id != theirs.key_id

    error = fails_once(restarting_env(spark, str(tmp_path), sp, "hashmap"), "foreign", UntrustedStateError)
    assert error.path == f"file://{sp}/_metadata"
    assert f"signed by another flowpoint installation (key {theirs.key_id})" in str(error)
    assert "--trust-savepoint-from-others" in str(error) and "security.checkpoint-signing.trusted-key-files" in str(error)
    with pytest.raises(UntrustedStateError, match="another flowpoint installation"):
        state_reader(spark, sp)  # the State Processor API verifies too
    assert len(state_reader(spark, sp, trust_savepoint_from_others=True).keyed_state_dict("counting", "count")) == 13
    assert len(state_reader(spark, sp, trusted_key_files=(theirs.path,)).keyed_state_dict("counting", "count")) == 13

    env = restarting_env(spark, str(tmp_path), sp, "rocksdb", **{"execution.savepoint.trust-from-others": True})
    assert state_of(env.execute("trusted")) == expected_state(EVENTS)
    env = restarting_env(spark, str(tmp_path), sp, "hashmap", **{"security.checkpoint-signing.trusted-key-files": theirs.path})
    assert state_of(env.execute("trusted-key")) == expected_state(EVENTS)


# -- a verified state file of the wrong shape --------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_verified_state_file_of_the_wrong_shape_fails_the_job_once(spark, tmp_path, checkpoints, savepoint, backend):
    if backend == "hashmap":  # the case: the part unpickles to 0
        directory = copy_checkpoint(checkpoints[backend], str(tmp_path))
        rel = next(p for p in referenced(directory) if p.endswith(".pkl"))
        data = pickle.dumps(0)
        expected = "holds a int, not a table per state"
    else:  # a savepoint's MapState value that is not a dict, restored into RocksDB
        directory = str(tmp_path / "sp")
        shutil.copytree(savepoint, directory)
        rel = referenced(directory)[0]
        rows = [pa.array([1], pa.int32()), pa.array([pickle.dumps(1)]), pa.array(["by_digit"]), pa.nulls(1, pa.binary()),
                pa.nulls(1, pa.binary()), pa.array([pickle.dumps(5)])]
        data = parquet_bytes(pa.Table.from_arrays(rows, schema=SCHEMA))
        expected = "a value of this map state is a int, not a dict"
    reseal_with_file(directory, rel, data, Keyring())  # signed by the owner: it verifies
    error = fails_once(restarting_env(spark, str(tmp_path), directory, backend), "misshapen", StateDecodeError)
    target = os.path.join(files_root(directory), rel)
    assert target in str(error) and "'counting'" in str(error) and expected in str(error), str(error)


def test_what_seal_signs_verifies_and_a_changed_field_does_not():
    """seal() signs as flowpoint does: what it seals verifies, and one changed byte does not."""
    from flowpoint.checkpoint.metadata import CheckpointMetadata

    meta = CheckpointMetadata(1, "a" * 32, "j", "savepoint", 0, 0, 0, 128, "hashmap", False, [], [], {}, {}, {})
    d = json.loads(meta.to_json())
    Keyring().verify(CheckpointMetadata.from_json(json.dumps(seal(d))), "x")
    d["job_name"] = "k"
    d["metadata_sha256"] = metadata_checksum(d)
    with pytest.raises(UntrustedStateError, match="changed after flowpoint signed it"):
        Keyring().verify(CheckpointMetadata.from_json(json.dumps(d)), "x")


# -- durable working state: its manifest is the driver's committed chain -----------------------


def test_a_swapped_working_state_file_is_refused_before_it_is_unpickled(tmp_path):
    from flowpoint.checkpoint import part_writer
    from flowpoint.errors import StateNotFoundError
    from flowpoint.partition import durable

    marker = str(tmp_path / "code-ran")
    uri = f"file://{tmp_path}/durable/job/run-0/stage-1/part-0/delta-00000004-t.pkl"
    digest = part_writer.write_working_file(uri, pickle.dumps(("delta", {"counting": {}}))).sha256
    part_writer.recent_writes().clear()  # as another executor, which never saw the write
    with open(uri[len("file://"):], "wb") as f:
        f.write(evil(marker))  # swapped by someone who can write the durable root
    with pytest.raises(StateNotFoundError, match="does not match the checksum recorded when its epoch committed"):
        durable.read_file(uri, None, digest)
    with pytest.raises(StateNotFoundError, match="has no SHA-256 in the committed chain"):
        durable.read_file(uri, None, None)  # a chain entry without a checksum is not read at all
    assert not os.path.exists(marker)


def test_a_working_state_file_of_the_wrong_shape_fails_naming_it():
    import types

    from flowpoint.partition.backend import HashMapPartitionBackend, PartitionBackend
    from flowpoint.partition.committed_chain import CommittedFile

    path = "file:///w/durable/run/stage-1/part-0/delta-00000004-t.pkl"
    for payload, expected in ((0, "holds a int, not a base or delta"), (("delta", {"counting": {"count": 5}}), "not (puts, deletes)")):
        data = pickle.dumps(payload)
        backend = types.SimpleNamespace(read=lambda f, what, stage, part, data=data: data)
        backend.load = lambda f, what, stage, part, backend=backend: PartitionBackend.load(backend, f, what, stage, part)
        f = CommittedFile(4, "t", path, len(data), hashlib.sha256(data).hexdigest())
        with pytest.raises(StateDecodeError, match=re.escape(expected)) as e:
            HashMapPartitionBackend._apply_file(backend, None, f, "delta", 1, 0)
        assert e.value.path == path and not e.value.recoverable
