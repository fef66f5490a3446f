"""Checkpoint storage: atomic writes, the _metadata format, retention, abort, listing, restore
paths, memory:// and s3:// (a local moto server), and `flowpoint checkpoints`. No Spark."""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import shutil
import socket
import time
import uuid
from dataclasses import dataclass

import pyarrow.fs as pafs
import pytest

from flowpoint.checkpoint.directory import (
    CheckpointInfo,
    CheckpointStore,
    find_latest,
    list_checkpoints,
    resolve_restore_path,
)
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess, read_uri_bytes
from flowpoint.checkpoint.integrity import metadata_checksum
from flowpoint.checkpoint.metadata import (
    CheckpointMetadata,
    OperatorState,
    SplitPosition,
    StateFile,
    SubtaskState,
    read_metadata,
    write_metadata,
)
from flowpoint.checkpoint.values import PickledValue
from flowpoint.cli import main
from flowpoint.errors import CheckpointError, CorruptStateError, FlowpointError

JOB = "0123456789abcdef0123456789abcdef"


@dataclass(frozen=True)
class Offset:  # a non-JSON source position (module level: picklable by reference)
    partition: int
    offset: int


def make_meta(n: int, files: list[str], job_id: str = JOB, contents: dict[str, bytes] | None = None, position=None) -> CheckpointMetadata:
    """Metadata of files whose content is their path (or ``contents[path]``), with their sizes and SHA-256."""
    data = {p: (contents or {}).get(p, p.encode()) for p in files}
    state_files = [
        StateFile(p, len(data[p]), "sst" if p.startswith("shared/") else "full", p.rsplit("/", 1)[-1], sha256=hashlib.sha256(data[p]).hexdigest())
        for p in files
    ]
    total = sum(f.size for f in state_files)
    return CheckpointMetadata(
        checkpoint_id=n,
        job_id=job_id,
        job_name="test job",
        kind="checkpoint",
        epoch=n * 10,
        trigger_time_ms=1_700_000_000_000 + n * 1000,
        completed_time_ms=1_700_000_000_000 + n * 1000 + 250,
        max_parallelism=128,
        backend="rocksdb",
        incremental=True,
        operators=[OperatorState("count", "Count", 1, 128, "rocksdb", [SubtaskState(0, 0, 127, state_files, 3, total, total)])],
        sources=[SplitPosition("src", 0, "split-0", {"offset": n} if position is None else position, False)],
        sinks={"sink": {"pending": [n]}},
        watermarks={"src": n * 100},
        stats={"sync_ms": 1.5, "async_ms": 12.0, "state_size": total, "incremental_size": total, "tasks_acknowledged": 1},
    )


def write_checkpoint(store: CheckpointStore, n: int, files: list[str]) -> CheckpointMetadata:
    """Write the checkpoint's files (content = their path) and complete it."""
    store.begin(n)
    for p in files:
        if not store.job_access.exists(p):
            store.write_file(p, p.encode())
    meta = make_meta(n, files)
    store.complete(meta)
    return meta


def files_in(access: CheckpointStorageAccess, rel: str) -> set[str]:
    return {name for name, is_dir, _ in access.list_dir(rel) if not is_dir} if access.exists(rel) else set()


def chk_dirs(access: CheckpointStorageAccess) -> set[str]:
    return {name for name, is_dir, _ in access.list_dir() if is_dir and name.startswith("chk-")}


@pytest.fixture(params=["file", "memory"])
def access(request, tmp_path) -> CheckpointStorageAccess:
    if request.param == "file":
        yield CheckpointStorageAccess(str(tmp_path / "checkpoints"))
        return
    a = CheckpointStorageAccess(f"memory://test-{uuid.uuid4().hex}")
    yield a
    a.delete("")


# -- storage -----------------------------------------------------------------------------------


def test_storage_basic_operations(access, tmp_path):
    access.write_bytes("a/b/one.bin", b"12345")
    access.write_bytes("a/two.bin", b"67")
    assert access.read_bytes("a/b/one.bin") == b"12345"
    assert access.exists("a") and access.exists("a/b/one.bin") and not access.exists("a/nope")
    assert access.list_dir("a") == [("b", True, 0), ("two.bin", False, 2)]
    assert access.size_of("a") == 7 and access.size_of("a/two.bin") == 2
    assert access.uri("a/two.bin") == access.uri() + "/a/two.bin"
    access.write_bytes("a/two.bin", b"replaced")  # overwrite is atomic too
    assert access.read_bytes("a/two.bin") == b"replaced"

    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    access.upload_file(str(big), "up/big.bin")
    assert access.size_of("up/big.bin") == big.stat().st_size
    access.download_file("up/big.bin", str(tmp_path / "dl" / "copy.bin"))
    assert (tmp_path / "dl" / "copy.bin").read_bytes() == big.read_bytes()
    assert read_uri_bytes(access.uri("a/b/one.bin")) == b"12345"

    access.delete("a")
    access.delete("a")  # missing is fine
    access.delete("up/big.bin")
    assert not access.exists("a") and not access.exists("up/big.bin")


def test_storage_errors_name_the_uri(access):
    with pytest.raises(CheckpointError, match="does not exist") as e:
        access.read_bytes("chk-1/_metadata")
    assert access.uri("chk-1/_metadata") in str(e.value)
    with pytest.raises(CheckpointError, match="does not exist"):
        access.list_dir("nope")
    with pytest.raises(CheckpointError, match="does not exist"):
        access.size_of("nope")
    with pytest.raises(CheckpointError, match=r"\.\."):
        access.read_bytes("../escape")
    with pytest.raises(CheckpointError):
        access.download_file("nope", "/tmp/never-written")
    assert issubclass(CheckpointError, FlowpointError)


class _DenyingFS:
    """A filesystem on which the job's user may read but not write (root ignores chmod)."""

    def __init__(self, fs):
        self.fs = fs

    def open_output_stream(self, path, *args, **kwargs):
        raise PermissionError(13, "Permission denied", path)

    def __getattr__(self, name):
        return getattr(self.fs, name)


def test_storage_permission_error(tmp_path):
    access = CheckpointStorageAccess(str(tmp_path / "locked"))
    access.fs = _DenyingFS(access.fs)
    with pytest.raises(CheckpointError, match="permission denied") as e:
        access.write_bytes("chk-1/_metadata", b"{}")
    assert access.uri("chk-1/_metadata") in str(e.value)
    assert "Grant" in str(e.value)


def test_local_uris_and_relative_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    CheckpointStorageAccess("rel/dir").write_bytes("f", b"x")
    assert (tmp_path / "rel" / "dir" / "f").read_bytes() == b"x"
    uri_access = CheckpointStorageAccess(f"file://{tmp_path}/rel")
    assert uri_access.read_bytes("dir/f") == b"x"
    assert uri_access.uri("dir") == f"file://{tmp_path}/rel/dir"
    assert pickle.loads(pickle.dumps(uri_access)).read_bytes("dir/f") == b"x"


class _FailingStream:
    """Writes part of the first write through, then fails like a full disk."""

    def __init__(self, inner):
        self.inner = inner

    def write(self, data):
        self.inner.write(bytes(data)[: max(1, len(data) // 2)])
        msg = "No space left on device (simulated)"
        raise OSError(msg)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.inner.close()
        return False


class _FailingFS:
    def __init__(self, fs):
        self.fs = fs

    def open_output_stream(self, path, *args, **kwargs):
        return _FailingStream(self.fs.open_output_stream(path, *args, **kwargs))

    def __getattr__(self, name):
        return getattr(self.fs, name)


def test_failed_write_leaves_no_partial_metadata(access):
    store = CheckpointStore(access, JOB, 1)
    store.init()
    write_checkpoint(store, 1, ["chk-1/a.pkl"])
    before = store.job_access.read_bytes("chk-1/_metadata")

    store.begin(2)
    store.write_file("chk-2/a.pkl", b"x")
    real = store.job_access.fs
    store.job_access.fs = _FailingFS(real)
    with pytest.raises(CheckpointError, match="No space left"):
        store.complete(make_meta(2, ["chk-2/a.pkl"]))
    # an overwrite that fails midway keeps the old file whole
    with pytest.raises(CheckpointError):
        write_metadata(store.job_access, "chk-1", make_meta(1, ["chk-1/a.pkl", "chk-1/b.pkl"]))
    store.job_access.fs = real

    assert not store.job_access.exists("chk-2/_metadata")
    assert store.job_access.list_dir("chk-2") == [("a.pkl", False, 1)]
    assert store.job_access.read_bytes("chk-1/_metadata") == before
    # no temporary files are left behind either
    raw = real.get_file_info(pafs.FileSelector(store.job_access.root, recursive=True))
    assert not [i.path for i in raw if i.path.endswith(".inprogress")]
    assert [m.checkpoint_id for m in store.retained()] == [1]
    assert [(i.id, i.complete) for i in list_checkpoints(store.job_dir_uri())] == [(1, True), (2, False)]


# -- metadata ----------------------------------------------------------------------------------


def test_metadata_round_trip_as_data():
    meta = make_meta(7, ["chk-7/op-count-part-0.pkl", "shared/3f2a.sst"], position=(3, "tail", b"\x00\xff"))
    meta.sources.append(SplitPosition("src", 2, "split-2", [1, "two", None, 2.5, {"k": True}, float("inf")], False))
    meta.sinks["files"] = {"pending": {b"bytes-key": ["part-0.inprogress"]}}
    meta.sinks["weird"] = {"__pickle__": "not really"}  # a dict that looks like an encoded value
    text = meta.to_json()
    back = CheckpointMetadata.from_json(text)
    assert back == meta
    assert back.sources[0].position == (3, "tail", b"\x00\xff")  # tuples and bytes come back as such
    assert CheckpointMetadata.from_json(back.to_json().encode()) == meta

    raw = json.loads(text)
    assert raw["format_version"] == 2
    assert raw["sources"][0]["position"] == {"__tuple__": [3, "tail", {"__bytes__": "AP8="}]}
    assert raw["sources"][1]["position"] == [1, "two", None, 2.5, {"k": True}, {"__float__": "inf"}]  # JSON stays readable
    assert raw["sinks"]["weird"] == {"__map__": [["__pickle__", "not really"]]}
    sst = hashlib.sha256(b"shared/3f2a.sst").hexdigest()
    assert raw["operators"][0]["subtasks"][0]["files"][1] == {"path": "shared/3f2a.sst", "size": 15, "kind": "sst", "local_name": "3f2a.sst", "sha256": sst}
    assert len(raw["metadata_sha256"]) == 64
    assert "\n" in text  # indented, human-readable


def test_metadata_holds_no_pickles_but_user_values_that_are_not_data():
    with pytest.raises(CheckpointError, match="position of split 'split-0'.*Offset.*not data"):
        make_meta(1, [], position=Offset(3, 42)).to_json()  # source positions: data only
    meta = make_meta(1, [])
    meta.sinks["custom"] = Offset(1, 9)  # a user sink's driver state: kept pickled, opaque until a restore
    back = CheckpointMetadata.from_json(meta.to_json())
    assert isinstance(back.sinks["custom"], PickledValue) and back.sinks["custom"].load() == Offset(1, 9)
    raw = json.loads(meta.to_json())
    raw["sources"][0]["position"] = raw["sinks"]["custom"]  # a pickle where only data may be
    raw["metadata_sha256"] = metadata_checksum(raw)
    with pytest.raises(CheckpointError, match="pickled value where checkpoint metadata holds only data"):
        CheckpointMetadata.from_json(json.dumps(raw))


def test_metadata_rejects_absolute_paths_and_unknown_kinds():
    with pytest.raises(CheckpointError, match="relative"):
        make_meta(1, ["/abs/chk-1/x"]).to_json()
    with pytest.raises(CheckpointError, match="relative"):
        make_meta(1, ["chk-1/../../x"]).to_json()
    bad = make_meta(1, [])
    bad.kind = "snapshot"
    with pytest.raises(CheckpointError, match="kind"):
        bad.to_json()


def test_read_metadata_missing_corrupt_and_wrong_version(tmp_path):
    access = CheckpointStorageAccess(str(tmp_path))
    with pytest.raises(CheckpointError, match="chk-1/_metadata does not exist"):
        read_metadata(access, "chk-1")
    write_metadata(access, "chk-1", make_meta(1, ["chk-1/a"]))
    assert read_metadata(access, "chk-1") == make_meta(1, ["chk-1/a"])

    good = access.read_bytes("chk-1/_metadata")
    access.write_bytes("chk-1/_metadata", good[: len(good) // 2])
    with pytest.raises(CorruptStateError, match="corrupt or truncated") as e:
        read_metadata(access, "chk-1")
    assert access.uri("chk-1/_metadata") in str(e.value) and e.value.path == access.uri("chk-1/_metadata")

    def rewrite(d: dict) -> None:  # a consistent file: its checksum matches
        d["metadata_sha256"] = metadata_checksum(d)
        access.write_bytes("chk-1/_metadata", json.dumps(d).encode())

    newer = json.loads(good)
    newer["format_version"] = 3
    rewrite(newer)
    with pytest.raises(CheckpointError, match="newer flowpoint") as e:
        read_metadata(access, "chk-1")
    assert access.uri("chk-1/_metadata") in str(e.value)

    del newer["format_version"]
    rewrite(newer)
    with pytest.raises(CheckpointError, match="format_version"):
        read_metadata(access, "chk-1")

    older = json.loads(good)
    older["format_version"] = 1
    del older["metadata_sha256"]
    access.write_bytes("chk-1/_metadata", json.dumps(older).encode())
    with pytest.raises(CheckpointError, match="format version 1 was written by an earlier flowpoint.*pre-1.0"):
        read_metadata(access, "chk-1")

    lacking = json.loads(good)
    del lacking["operators"]
    rewrite(lacking)
    with pytest.raises(CheckpointError, match="operators"):
        read_metadata(access, "chk-1")

    changed = json.loads(good)
    changed["epoch"] += 1  # the checksum no longer matches
    access.write_bytes("chk-1/_metadata", json.dumps(changed).encode())
    with pytest.raises(CorruptStateError, match="does not match its metadata_sha256") as e:
        read_metadata(access, "chk-1")
    assert e.value.path == access.uri("chk-1/_metadata")


# -- retention ---------------------------------------------------------------------------------


def test_init_creates_layout(access):
    store = CheckpointStore(access, JOB, 1)
    store.init()
    assert access.list_dir(JOB) == [("shared", True, 0), ("taskowned", True, 0)]
    assert store.chk_dir(7) == "chk-7"
    assert store.job_dir_uri() == access.uri(JOB)
    assert store.latest() is None and store.retained() == [] and store.next_id() == 1
    with pytest.raises(CheckpointError, match="num-retained"):
        CheckpointStore(access, JOB, 0)


def test_retention_keeps_one_and_reference_counts_shared_files(access):
    store = CheckpointStore(access, JOB, 1)
    store.init()
    job = store.job_access
    write_checkpoint(store, 1, ["chk-1/p", "shared/a.sst", "shared/b.sst"])
    write_checkpoint(store, 2, ["chk-2/p", "shared/b.sst", "shared/c.sst"])
    assert chk_dirs(job) == {"chk-2"}
    assert files_in(job, "shared") == {"b.sst", "c.sst"}  # a.sst was only in chk-1
    write_checkpoint(store, 3, ["chk-3/p", "shared/c.sst", "shared/d.sst"])
    assert chk_dirs(job) == {"chk-3"}
    assert files_in(job, "shared") == {"c.sst", "d.sst"}
    assert files_in(job, "chk-3") == {"_metadata", "p"}
    assert [m.checkpoint_id for m in store.retained()] == [3]
    assert store.latest() == make_meta(3, ["chk-3/p", "shared/c.sst", "shared/d.sst"])
    assert store.next_id() == 4
    assert job.exists("taskowned")


def test_retention_keeps_three_and_files_shared_by_several(access):
    store = CheckpointStore(access, JOB, 3)
    store.init()
    job = store.job_access
    # s1 is used by 1 and 4 (several, not adjacent), s2 by 1..3, each checkpoint has a file of its own
    plan = {
        1: ["chk-1/p", "shared/s1", "shared/s2", "shared/only1"],
        2: ["chk-2/p", "shared/s2", "shared/only2"],
        3: ["chk-3/p", "shared/s2", "shared/only3"],
        4: ["chk-4/p", "shared/s1", "shared/only4"],
        5: ["chk-5/p", "shared/only5"],
    }
    for n in (1, 2, 3):
        write_checkpoint(store, n, plan[n])
    assert chk_dirs(job) == {"chk-1", "chk-2", "chk-3"}
    assert files_in(job, "shared") == {"s1", "s2", "only1", "only2", "only3"}

    write_checkpoint(store, 4, plan[4])  # chk-1 goes: only1 with it; s1 (in 4) and s2 (in 2, 3) stay
    assert chk_dirs(job) == {"chk-2", "chk-3", "chk-4"}
    assert files_in(job, "shared") == {"s1", "s2", "only2", "only3", "only4"}

    write_checkpoint(store, 5, plan[5])  # chk-2 goes: only2; s2 is still in 3
    assert files_in(job, "shared") == {"s1", "s2", "only3", "only4", "only5"}
    assert [m.checkpoint_id for m in store.retained()] == [3, 4, 5]

    store.begin(6)
    store.write_file("chk-6/p", b"p")
    store.complete(make_meta(6, ["chk-6/p"]))  # chk-3 goes: s2 and only3 are now unreferenced
    assert chk_dirs(job) == {"chk-4", "chk-5", "chk-6"}
    assert files_in(job, "shared") == {"s1", "only4", "only5"}


def test_orphan_shared_files_wait_for_checkpoints_in_progress(access):
    store = CheckpointStore(access, JOB, 1)
    store.init()
    job = store.job_access
    write_checkpoint(store, 1, ["chk-1/p", "shared/a"])
    store.begin(2)
    store.begin(3)  # in progress: its upload may already be in shared/
    job.write_bytes("shared/uploading-for-3", b"x")
    job.write_bytes("chk-2/p", b"p")
    store.complete(make_meta(2, ["chk-2/p"]))
    assert files_in(job, "shared") == {"uploading-for-3"}  # a was released by chk-1; the orphan waits
    assert chk_dirs(job) == {"chk-2", "chk-3"}
    store.abort(3)  # no other checkpoint in progress: the orphan goes with it
    assert files_in(job, "shared") == set()
    assert chk_dirs(job) == {"chk-2"}


def test_older_incomplete_checkpoints_are_subsumed(access):
    store = CheckpointStore(access, JOB, 2)
    store.init()
    store.begin(1)
    store.write_file("chk-1/half", b"h")  # never completed (driver crash)
    write_checkpoint(store, 2, ["chk-2/p"])
    assert chk_dirs(store.job_access) == {"chk-2"}
    with pytest.raises(CheckpointError, match="already complete"):
        store.complete(make_meta(2, ["chk-2/p"]))
    with pytest.raises(CheckpointError, match="belongs to job"):
        store.complete(make_meta(3, [], job_id="f" * 32))
    with pytest.raises(CheckpointError, match="must be in chk-3/"):
        store.complete(make_meta(3, ["chk-2/p"]))


def test_abort(access):
    store = CheckpointStore(access, JOB, 2)
    store.init()
    job = store.job_access
    write_checkpoint(store, 1, ["chk-1/p", "shared/kept"])
    n = store.next_id()
    assert n == 2
    store.begin(n)
    store.write_file("chk-2/p", b"p")
    store.write_file("shared/new-for-2", b"x")
    store.abort(n)
    assert chk_dirs(job) == {"chk-1"}
    assert files_in(job, "shared") == {"kept"}

    store.begin(3)
    store.begin(4)
    store.write_file("shared/for-3", b"x")
    store.write_file("shared/for-4", b"x")
    store.abort(3, shared_files=["shared/for-3", "shared/kept"])  # named files; referenced ones stay
    assert files_in(job, "shared") == {"kept", "for-4"}
    store.abort(4)
    assert files_in(job, "shared") == {"kept"}
    store.abort(99)  # nothing there: fine
    with pytest.raises(CheckpointError, match="cannot be aborted"):
        store.abort(1)
    assert [m.checkpoint_id for m in store.retained()] == [1]
    assert store.next_id() == 5  # ids handed to begin() are not reused

    store.discard_all()
    assert not access.exists(JOB)


def test_ids_continue_after_restore(access):
    store = CheckpointStore(access, JOB, 1)
    store.init()
    store.continue_after(860)
    assert store.next_id() == 861


# -- listing and restoring ---------------------------------------------------------------------


def test_list_checkpoints_with_an_incomplete_one(access):
    store = CheckpointStore(access, JOB, 3)
    store.init()
    m1 = write_checkpoint(store, 1, ["chk-1/p", "shared/s"])
    write_checkpoint(store, 2, ["chk-2/p", "shared/s"])
    store.begin(3)
    store.write_file("chk-3/half", b"12345")
    store.begin(4)
    store.write_file("chk-4/_metadata", b'{"format_version": 1, "checkpo')  # corrupt

    infos = list_checkpoints(store.job_dir_uri())
    assert [(i.id, i.complete) for i in infos] == [(1, True), (2, True), (3, False), (4, False)]
    first = infos[0]
    assert isinstance(first, CheckpointInfo)
    assert first.time_ms == m1.completed_time_ms
    assert first.path == store.uri("chk-1")
    assert first.size_bytes == m1.state_size() + store.job_access.size_of("chk-1/_metadata")
    assert infos[2].size_bytes == 5 and infos[2].time_ms is not None
    assert find_latest(store.job_dir_uri()).checkpoint_id == 2
    assert [m.checkpoint_id for m in store.retained()] == [1, 2]

    with pytest.raises(CheckpointError, match="does not exist"):
        list_checkpoints(access.uri("no-such-job"))


def test_moved_job_dir_restores(tmp_path, monkeypatch):
    access = CheckpointStorageAccess(str(tmp_path / "old"))
    store = CheckpointStore(access, JOB, 2)
    store.init()
    write_checkpoint(store, 1, ["chk-1/p", "shared/a"])
    meta2 = write_checkpoint(store, 2, ["chk-2/p", "shared/a", "shared/b"])
    moved = tmp_path / "elsewhere" / "job-copy"
    moved.parent.mkdir()
    shutil.move(str(tmp_path / "old" / JOB), str(moved))

    for path in (str(moved / "chk-2"), str(moved / "chk-2" / "_metadata"), f"file://{moved}/chk-2/"):
        job_access, meta = resolve_restore_path(path)
        assert meta == meta2
        assert job_access.uri() == f"file://{moved}"
        assert {f.path: job_access.read_bytes(f.path) for f in meta.files()} == {p: p.encode() for p in ("chk-2/p", "shared/a", "shared/b")}
    monkeypatch.chdir(tmp_path / "elsewhere")
    job_access, meta = resolve_restore_path("job-copy/chk-2")
    assert meta == meta2 and job_access.read_bytes("shared/b") == b"shared/b"
    assert find_latest("job-copy").checkpoint_id == 2

    with pytest.raises(CheckpointError, match="job's checkpoint directory"):
        resolve_restore_path("job-copy")
    (moved / "shared" / "b").unlink()
    with pytest.raises(CorruptStateError, match="shared/b .*is missing"):
        resolve_restore_path("job-copy/chk-2")
    shutil.move(str(moved / "chk-1"), str(moved / "chk-9"))
    with pytest.raises(CheckpointError, match="rename it back to chk-1"):
        resolve_restore_path("job-copy/chk-9")
    with pytest.raises(CheckpointError, match="does not exist"):
        resolve_restore_path("job-copy/chk-5")


def test_savepoint_dir_resolves_to_itself(tmp_path):
    sp = CheckpointStorageAccess(str(tmp_path / "savepoint-012345-abcdefabcdef"))
    sp.write_bytes("op-count.parquet", b"rows")
    meta = make_meta(5, ["op-count.parquet"], contents={"op-count.parquet": b"rows"})
    meta.kind = "savepoint"
    write_metadata(sp, "", meta)
    access, back = resolve_restore_path(str(tmp_path / "savepoint-012345-abcdefabcdef" / "_metadata"))
    assert back == meta and access.read_bytes("op-count.parquet") == b"rows"


def test_memory_storage_is_process_wide():
    uri = f"memory://flowpoint-test-{uuid.uuid4().hex}"
    store = CheckpointStore(CheckpointStorageAccess(uri), JOB, 1)
    store.init()
    meta = write_checkpoint(store, 1, ["chk-1/p", "shared/a"])
    other = CheckpointStorageAccess(f"{uri}/{JOB}")  # a second access sees the same files
    assert other.read_bytes("chk-1/p") == b"chk-1/p"
    assert store.uri("chk-1") == f"{uri}/{JOB}/chk-1"
    assert [(i.id, i.complete) for i in list_checkpoints(f"{uri}/{JOB}")] == [(1, True)]
    access, back = resolve_restore_path(f"{uri}/{JOB}/chk-1")
    assert back == meta and access.read_bytes("shared/a") == b"shared/a"
    assert read_uri_bytes(f"{uri}/{JOB}/shared/a") == b"shared/a"
    assert pickle.loads(pickle.dumps(other)).read_bytes("chk-1/p") == b"chk-1/p"
    store.discard_all()
    assert not CheckpointStorageAccess(uri).exists(JOB)


# -- S3 (a moto server on a loopback port) -----------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def s3_endpoint():
    server_mod = pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    port = _free_port()
    server = server_mod.ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    endpoint = f"http://127.0.0.1:{port}"
    admin = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1", endpoint_override=f"127.0.0.1:{port}", scheme="http", allow_bucket_creation=True)
    admin.create_dir("flowpoint-ckpt")
    yield endpoint
    server.stop()


@pytest.fixture
def s3_env(s3_endpoint, monkeypatch):
    for key, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": s3_endpoint,
    }.items():
        monkeypatch.setenv(key, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    return f"s3://flowpoint-ckpt/run-{uuid.uuid4().hex[:8]}"


def test_s3_storage(s3_env, tmp_path, capsys):
    access = CheckpointStorageAccess(s3_env)
    access.write_bytes("x/a.bin", b"hello")
    assert access.read_bytes("x/a.bin") == b"hello"
    assert access.list_dir("x") == [("a.bin", False, 5)]
    big = tmp_path / "big"
    big.write_bytes(os.urandom(6 * 1024 * 1024))  # more than one multipart part
    access.upload_file(str(big), "x/big")
    access.download_file("x/big", str(tmp_path / "back"))
    assert (tmp_path / "back").read_bytes() == big.read_bytes()
    assert access.size_of("x") == 5 + big.stat().st_size
    access.delete("x")
    assert not access.exists("x")
    with pytest.raises(CheckpointError, match="does not exist") as e:
        access.read_bytes("x/a.bin")
    assert f"{s3_env}/x/a.bin" in str(e.value)

    real = access.fs
    access.fs = _FailingFS(real)  # a writer failing midway publishes nothing
    with pytest.raises(CheckpointError, match="No space left"):
        access.write_bytes("chk-0/_metadata", b"{" * 1000)
    access.fs = real
    assert not access.exists("chk-0/_metadata")

    store = CheckpointStore(access, JOB, 1)
    store.init()
    write_checkpoint(store, 1, ["chk-1/p", "shared/a", "shared/b"])
    meta2 = write_checkpoint(store, 2, ["chk-2/p", "shared/b"])
    assert chk_dirs(store.job_access) == {"chk-2"}
    assert files_in(store.job_access, "shared") == {"b"}
    assert [(i.id, i.complete) for i in list_checkpoints(store.job_dir_uri())] == [(2, True)]
    job_access, meta = resolve_restore_path(f"{s3_env}/{JOB}/chk-2/_metadata")
    assert meta == meta2 and job_access.read_bytes("shared/b") == b"shared/b"

    assert main(["checkpoints", store.job_dir_uri()]) == 0
    assert f"{s3_env}/{JOB}/chk-2" in capsys.readouterr().out


def test_s3_unreachable_endpoint_fails_fast(s3_env):
    start = time.monotonic()
    access = CheckpointStorageAccess("s3://flowpoint-ckpt/x", {"s3.endpoint": f"http://127.0.0.1:{_free_port()}", "s3.max-attempts": 1})
    with pytest.raises(CheckpointError, match="s3://flowpoint-ckpt/x/chk-1") as e:
        access.write_bytes("chk-1/_metadata", b"{}")
    assert "retry" in str(e.value) or "check" in str(e.value)
    assert time.monotonic() - start < 60


# -- CLI ---------------------------------------------------------------------------------------


def test_cli_lists_checkpoints(tmp_path, capsys):
    store = CheckpointStore(CheckpointStorageAccess(str(tmp_path)), JOB, 2)
    store.init()
    write_checkpoint(store, 1, ["chk-1/p"])
    write_checkpoint(store, 2, ["chk-2/p", "shared/s"])
    store.begin(3)
    store.write_file("chk-3/partial", b"x" * 3000)

    assert main(["checkpoints", str(tmp_path / JOB)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["ID", "TIME", "SIZE", "COMPLETE", "PATH"]
    rows = [line.split() for line in lines[1:]]
    assert [r[0] for r in rows] == ["1", "2", "3"]
    assert [r[-2] for r in rows] == ["yes", "yes", "no"]
    assert rows[2][-1] == f"file://{tmp_path}/{JOB}/chk-3"
    assert rows[2][2:4] == ["2.9", "KiB"]
    assert rows[0][1].startswith(time.strftime("%Y-%m-%dT", time.localtime(1_700_000_001.25)))


def test_cli_errors(tmp_path, capsys):
    assert main(["checkpoints", str(tmp_path / "missing")]) == 1
    assert "does not exist" in capsys.readouterr().err

    root = CheckpointStorageAccess(str(tmp_path / "ckpts"))
    CheckpointStore(root, JOB, 1).init()
    assert main(["checkpoints", str(tmp_path / "ckpts" / JOB)]) == 1
    assert "no checkpoints in" in capsys.readouterr().err
    assert main(["checkpoints", str(tmp_path / "ckpts")]) == 1
    assert f"pass file://{tmp_path}/ckpts/{JOB}" in capsys.readouterr().err

    store = CheckpointStore(root, JOB, 1)
    store.begin(1)
    store.write_file("chk-1/x", b"x")
    assert main(["checkpoints", str(tmp_path / "ckpts" / JOB)]) == 1
    captured = capsys.readouterr()
    assert " no " in captured.out and "no complete checkpoint" in captured.err
