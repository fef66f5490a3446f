"""DeltaSink (issue 30, item 1): Parquet data files written by the sink tasks, one Delta
transaction per completed checkpoint carrying the sink's txn action, exactly once through a
failure and a restart on both runtimes. The table is read with ``deltalake``; reading it with
Spark needs the Delta JVM package, which the tests do not install (no Spark read here)."""

from __future__ import annotations

import os
from collections import Counter

import pytest
from checkpoint_jobs import Counting, expected_outputs, key_of, record

from flowpoint import DataGeneratorSource, DeltaSink, RestartStrategies, Types
from flowpoint.api.row import Row
from flowpoint.connectors.delta import DeltaConfigurationError, DeltaSinkError
from flowpoint.errors import ConfigurationError, FlowpointError

deltalake = pytest.importorskip("deltalake")

COUNTS = Types.ROW_NAMED(["key", "n"], [Types.LONG(), Types.LONG()])
BUCKETED = Types.ROW_NAMED(["bucket", "key", "n"], [Types.STRING(), Types.LONG(), Types.LONG()])
RUNTIMES = {
    "epoch": {"execution.runtime": "epoch"},
    "continuous": {"execution.runtime": "continuous", "execution.buffer-timeout": 5},
}


def sink(path, type_info=COUNTS, partitions=(), mode="append"):
    """A DeltaSink as sink_to and the job's start make it (driver side)."""
    s = DeltaSink.builder().set_table_path(str(path)).set_partition_columns(list(partitions)).set_mode(mode).build()
    s.input_type = type_info
    s.on_job_config(None)
    s.on_job_start(1000)
    return s


def epoch(s, n, subtask, rows):
    """One epoch of one sink task, acknowledged and committed on the driver."""
    w = s.create_writer(subtask, 2, None)
    w.write(rows)
    s.on_epoch_committed(n, [(subtask, w.finish(n))], 2)


def read(path) -> list[dict]:
    return sorted(deltalake.DeltaTable(str(path)).to_pyarrow_table().to_pylist(), key=lambda r: sorted(r.items()))


def version(path) -> int:
    return deltalake.DeltaTable(str(path)).version()


def data_files(path) -> list[str]:
    return sorted(os.path.relpath(os.path.join(d, f), path) for d, _, fs in os.walk(path) if "_delta_log" not in d
                  for f in fs if f.endswith(".parquet"))


def test_the_table_is_created_with_the_streams_columns_and_partitions(tmp_path):
    t = tmp_path / "t"
    sink(t, BUCKETED, ["bucket"])
    table = deltalake.DeltaTable(str(t))
    assert table.version() == 0
    assert table.metadata().partition_columns == ["bucket"]
    assert [f.name for f in table.schema().fields] == ["bucket", "key", "n"]


def test_a_reader_never_sees_files_of_an_uncommitted_checkpoint(tmp_path):
    t = tmp_path / "t"
    s = sink(t)
    epoch(s, 1, 0, [Row(key=1, n=1), Row(key=2, n=1)])
    epoch(s, 1, 1, [Row(key=3, n=1)])
    assert len(data_files(t)) == 2  # written by the tasks ...
    assert read(t) == []  # ... but not in the log
    state = s.snapshot_driver_state()  # pre-commit: the checkpoint holds their paths
    assert read(t) == [] and version(t) == 0
    epoch(s, 2, 0, [Row(key=4, n=1)])  # after the checkpoint's cut: the next checkpoint's
    s.notify_checkpoint_complete(1)
    assert [r["key"] for r in read(t)] == [1, 2, 3]
    assert version(t) == 1
    assert deltalake.DeltaTable(str(t)).transaction_version(state["app_id"]) == 1
    assert deltalake.DeltaTable(str(t)).history(1)[0]["flowpoint.checkpointId"] == 1
    s.snapshot_driver_state()
    s.notify_checkpoint_complete(2)
    assert [r["key"] for r in read(t)] == [1, 2, 3, 4] and version(t) == 2


def test_a_restart_that_finds_its_checkpoint_committed_does_not_commit_it_again(tmp_path):
    t = tmp_path / "t"
    s = sink(t)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    state = s.snapshot_driver_state()
    s.notify_checkpoint_complete(1)  # committed; the driver dies before anything records that
    assert version(t) == 1
    restored = sink(t)
    restored.restore_driver_state(state)  # the checkpoint's batch comes back: the txn shows it
    assert version(t) == 1 and read(t) == [{"key": 1, "n": 1}]
    again = sink(t)
    again.restore_driver_state(state)  # another crash, the same checkpoint
    assert version(t) == 1 and read(t) == [{"key": 1, "n": 1}]
    # the run goes on: the replayed epoch after the checkpoint is committed once, later
    epoch(again, 2, 0, [Row(key=2, n=1)])
    again.snapshot_driver_state()
    again.notify_checkpoint_complete(2)
    assert version(t) == 2 and [r["key"] for r in read(t)] == [1, 2]


def test_a_restart_commits_what_the_crash_left_uncommitted_once(tmp_path):
    t = tmp_path / "t"
    s = sink(t)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    state = s.snapshot_driver_state()  # the checkpoint completes; the driver dies before committing
    assert version(t) == 0
    restored = sink(t)
    restored.restore_driver_state(state)
    assert version(t) == 1 and read(t) == [{"key": 1, "n": 1}]
    sink(t).restore_driver_state(state)
    assert version(t) == 1 and read(t) == [{"key": 1, "n": 1}]


def test_a_bounded_job_commits_what_is_left_at_its_end(tmp_path):
    t = tmp_path / "t"
    s = sink(t)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    s.on_job_end("FAILED")
    assert read(t) == []
    s.on_job_end("FINISHED")
    assert read(t) == [{"key": 1, "n": 1}]


def test_partitioned_append_and_overwrite_partitions(tmp_path):
    t = tmp_path / "t"
    s = sink(t, BUCKETED, ["bucket"], mode="overwrite_partitions")
    epoch(s, 1, 0, [Row(bucket="a", key=1, n=1), Row(bucket="b", key=2, n=1), Row(bucket="a b/c", key=5, n=1)])
    s.snapshot_driver_state()
    s.notify_checkpoint_complete(1)
    files = data_files(t)
    dirs = sorted(f.split("/")[0] for f in files)
    assert dirs[1:] == ["bucket=a", "bucket=b"] and dirs[0].startswith("bucket=_h")  # "a b/c": a digest
    assert {(r["bucket"], r["key"]) for r in read(t)} == {("a", 1), ("b", 2), ("a b/c", 5)}
    # the next checkpoint writes partition a only: it replaces a, keeps b and "a b/c"
    epoch(s, 2, 0, [Row(bucket="a", key=3, n=2)])
    epoch(s, 2, 1, [Row(bucket="a", key=4, n=2)])
    s.snapshot_driver_state()
    s.notify_checkpoint_complete(2)
    assert {(r["bucket"], r["key"]) for r in read(t)} == {("a", 3), ("a", 4), ("b", 2), ("a b/c", 5)}
    table = deltalake.DeltaTable(str(t))
    assert table.version() == 2
    assert sorted(table.to_pyarrow_table(filters=[("bucket", "=", "b")]).column("key").to_pylist()) == [2]
    # append mode on the same table adds to partition a
    s2 = sink(t, BUCKETED, ["bucket"])
    epoch(s2, 1, 0, [Row(bucket="a", key=6, n=1)])
    s2.snapshot_driver_state()
    s2.notify_checkpoint_complete(1)
    assert sorted(r["key"] for r in read(t) if r["bucket"] == "a") == [3, 4, 6]


def test_a_stream_that_does_not_match_the_existing_table_is_refused_naming_the_columns(tmp_path):
    import pyarrow as pa

    t = tmp_path / "t"
    deltalake.write_deltalake(str(t), pa.table({"key": pa.array([1], pa.int64()), "count": pa.array(["x"])}))
    with pytest.raises(DeltaConfigurationError, match=(
            rf"DeltaSink at '{t}': the stream does not match the existing table: the stream lacks the table's columns "
            rf"\['count'\]; the table has no columns \['n'\]\. The table's columns: key int64, count string\. Give the "
            rf"stream the table's columns")) as e:
        sink(t)
    assert isinstance(e.value, FlowpointError) and isinstance(e.value, ConfigurationError) and not e.value.recoverable
    wrong_type = Types.ROW_NAMED(["key", "count"], [Types.STRING(), Types.STRING()])
    with pytest.raises(DeltaConfigurationError, match=r"types differ: key \(string in the stream, int64 in the table\)"):
        sink(t, wrong_type)
    good = Types.ROW_NAMED(["count", "key"], [Types.STRING(), Types.LONG()])  # the table's columns, another order
    with pytest.raises(DeltaConfigurationError, match=r"the table is partitioned by \[\], the sink by \['key'\]"):
        sink(t, good, ["key"])
    s = sink(t, good)
    epoch(s, 1, 0, [Row(count="y", key=2)])
    s.snapshot_driver_state()
    s.notify_checkpoint_complete(1)
    assert sorted(r["key"] for r in read(t)) == [1, 2]


def test_bad_settings_are_refused_clearly(tmp_path):
    with pytest.raises(DeltaConfigurationError, match="needs set_table_path"):
        DeltaSink.builder().build()
    with pytest.raises(DeltaConfigurationError, match="'upsert' is not a mode"):
        DeltaSink.builder().set_mode("upsert")
    with pytest.raises(DeltaConfigurationError, match="'overwrite_partitions' needs set_partition_columns"):
        DeltaSink.builder().set_table_path(str(tmp_path)).set_mode("overwrite_partitions").build()
    with pytest.raises(DeltaConfigurationError, match="partition column 'day' is not a column of the stream"):
        sink(tmp_path / "t", COUNTS, ["day"])
    with pytest.raises(DeltaConfigurationError, match=rf"DeltaSink at '{tmp_path / 'u'}': the stream has no declared type"):
        sink(tmp_path / "u", None)
    with pytest.raises(DeltaConfigurationError, match="set_partition_columns needs a list"):
        DeltaSink.builder().set_partition_columns("day")
    assert issubclass(DeltaSinkError, FlowpointError) and DeltaSinkError.recoverable


def as_row(kv):
    return Row(bucket=str(kv[0] % 3), key=kv[0], n=kv[1])


EVENTS = 900


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_exactly_once_through_a_failure_and_a_restart(make_env, tmp_path, runtime):
    """A record fails until the job restarts from its last checkpoint; the work after it runs
    again. The table holds every result once, and each of its commits carries the sink's txn."""
    t = tmp_path / "table"
    env = make_env(parallelism=2, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"), **RUNTIMES[runtime])
    env.enable_checkpointing(1 if runtime == "epoch" else 60)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    delta = DeltaSink.builder().set_table_path(str(t)).set_partition_columns(["bucket"]).build()
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS, rate_limit_per_second=3000 if runtime == "continuous" else None),
                        source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting(fail_value=record(700), flag=flag)).uid("counting")
        .map(as_row, output_type=BUCKETED).uid("rows")
        .sink_to(delta).uid("delta")
    )
    env.execute(f"delta exactly once ({runtime})")
    assert os.path.exists(flag), "the injected failure never happened"
    table = deltalake.DeltaTable(str(t))
    got = Counter((r["key"], r["n"]) for r in table.to_pyarrow_table().to_pylist())
    expected = Counter(expected_outputs(EVENTS))
    assert got == expected, f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"
    assert all(r["bucket"] == str(r["key"] % 3) for r in table.to_pyarrow_table().to_pylist())
    commits = [h for h in table.history() if h.get("operation") == "WRITE"]
    assert len(commits) >= 2 and all("flowpoint.appId" in h for h in commits)  # one per completed checkpoint with output
    ids = [h["flowpoint.appId"] for h in reversed(commits)]
    forked = [h for h in commits if h.get("flowpoint.restoredFrom")]
    if forked:  # the restart restored a checkpoint: from then on, one identity of its own
        assert all(h["flowpoint.restoredFrom"] != h["flowpoint.appId"] == ids[-1] for h in forked), commits
    else:  # the record failed before the first checkpoint completed (a loaded machine): a fresh start
        assert len(set(ids)) == 1, ids


def test_restoring_an_older_checkpoint_repeats_what_came_after_it_and_loses_nothing(tmp_path):
    t = tmp_path / "t"
    s = sink(t)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    older = s.snapshot_driver_state()
    s.notify_checkpoint_complete(1)
    epoch(s, 2, 0, [Row(key=2, n=1)])
    s.snapshot_driver_state()
    s.notify_checkpoint_complete(2)
    restored = sink(t)
    restored.restore_driver_state(older)  # batch 1 is in the table; batch 2 came after this checkpoint
    assert version(t) == 2
    epoch(restored, 2, 0, [Row(key=2, n=1)])  # replayed
    restored.snapshot_driver_state()
    restored.notify_checkpoint_complete(2)
    assert [r["key"] for r in read(t)] == [1, 2, 2]  # repeated, as after any older restore; nothing lost
    assert deltalake.DeltaTable(str(t)).transaction_version(older["app_id"]) == 2  # never goes back
    assert deltalake.DeltaTable(str(t)).transaction_version(restored._driver_identity) == 2  # the restored run's own


def test_two_jobs_restored_from_one_savepoint_both_land_every_batch(tmp_path):
    """Two runs restored from one savepoint into one table: each commits under an identity of its
    own, so neither takes the other's txn version for its own and skips a batch (a silent loss
    when both kept the savepoint's)."""
    t = tmp_path / "t"
    first = sink(t)
    epoch(first, 1, 0, [Row(key=1, n=1)])
    savepoint = first.snapshot_driver_state()
    first.on_job_end("FINISHED")
    a, b = sink(t), sink(t)
    a.restore_driver_state(savepoint)
    b.restore_driver_state(savepoint)
    assert version(t) == 1  # the savepoint's batch once
    epoch(a, 2, 0, [Row(key=2, n=1)])
    a.snapshot_driver_state()
    a.notify_checkpoint_complete(2)
    epoch(b, 2, 0, [Row(key=3, n=1)])  # the same batch number as a's
    b.snapshot_driver_state()
    b.notify_checkpoint_complete(2)
    assert [r["key"] for r in read(t)] == [1, 2, 3]
    history = [h for h in deltalake.DeltaTable(str(t)).history() if h.get("operation") == "WRITE"]
    assert {h.get("flowpoint.restoredFrom") for h in history} == {None, savepoint["app_id"]}
    assert len({h["flowpoint.appId"] for h in history}) == 3


@pytest.mark.slow
def test_a_failure_right_after_a_commit_restores_that_checkpoint_without_committing_it_again(make_env, tmp_path, monkeypatch):
    """The driver commits a checkpoint's transaction, then fails before it goes on (as if it
    crashed right after the commit): the job restarts from that checkpoint, whose batches come
    back; the table's txn shows them committed, so no batch is in two commits and every result
    is in the table once."""
    original = DeltaSink._commit
    failed = []

    def commit_then_fail(self):
        before = len(self._driver_batches)
        original(self)
        if before and not failed and self._driver_checkpoint is not None:
            failed.append(self._driver_checkpoint)
            msg = "injected: the driver fails right after committing"
            raise DeltaSinkError(msg)

    monkeypatch.setattr(DeltaSink, "_commit", commit_then_fail)
    restores = []
    original_restore = DeltaSink.restore_driver_state

    def restore(self, state):
        if state is not None and state["batches"]:
            restores.append(([n for n, _ in state["batches"]], deltalake.DeltaTable(str(t)).transaction_version(state["app_id"])))
        original_restore(self, state)

    monkeypatch.setattr(DeltaSink, "restore_driver_state", restore)
    t = tmp_path / "table"
    env = make_env(parallelism=2, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS), source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting()).uid("counting")
        .map(as_row, output_type=BUCKETED).uid("rows")
        .sink_to(DeltaSink.builder().set_table_path(str(t)).build()).uid("delta")
    )
    env.execute("delta commit then fail")
    assert failed, "the injected failure never happened"
    # the restart restored a checkpoint whose batches the table already held
    assert any(done is not None and max(numbers) <= done for numbers, done in restores), restores
    table = deltalake.DeltaTable(str(t))
    got = Counter((r["key"], r["n"]) for r in table.to_pyarrow_table().to_pylist())
    expected = Counter(expected_outputs(EVENTS))
    assert got == expected, f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"
    batches = [n for h in table.history() if h.get("operation") == "WRITE" for n in h["flowpoint.batches"]]
    assert len(batches) == len(set(batches)), f"a batch committed twice: {sorted(batches)}"


@pytest.fixture(scope="module")
def s3_lake():
    """A moto S3 server in a process of its own (delta-rs holds the GIL while it waits for S3, so
    a server thread in this process would never answer) and a bucket ``lake``; the storage
    options a DeltaSink needs to reach it."""
    pytest.importorskip("moto.server", reason="moto[server] is in the test extra")
    import socket
    import subprocess
    import sys
    import time

    import pyarrow.fs as pafs

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.1)
        pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1", endpoint_override=f"127.0.0.1:{port}",
                          scheme="http", allow_bucket_creation=True).create_dir("lake")
        yield {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ALLOW_HTTP": "true", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": "us-east-1"}
    finally:
        server.terminate()
        server.wait(10)


def test_an_s3_table_is_written_and_a_restore_commits_nothing_twice(s3_lake):
    def s3_sink():
        s = DeltaSink.builder().set_table_path("s3://lake/clicks").set_partition_columns(["bucket"]).set_storage_options(s3_lake).build()
        s.input_type = BUCKETED
        s.on_job_config(None)
        s.on_job_start(1000)
        return s

    s = s3_sink()
    epoch(s, 1, 0, [Row(bucket="a", key=1, n=1), Row(bucket="b", key=2, n=1)])
    state = s.snapshot_driver_state()
    table = deltalake.DeltaTable("s3://lake/clicks", storage_options=s3_lake)
    assert table.to_pyarrow_table().num_rows == 0  # written, not committed
    s.notify_checkpoint_complete(1)
    s3_sink().restore_driver_state(state)  # the driver died after the commit
    table = deltalake.DeltaTable("s3://lake/clicks", storage_options=s3_lake)
    assert table.version() == 1
    assert sorted((r["bucket"], r["key"]) for r in table.to_pyarrow_table().to_pylist()) == [("a", 1), ("b", 2)]


def test_stop_with_savepoint_then_restore_commits_nothing_twice(tmp_path):
    """A job stopped with a savepoint commits what the savepoint staged as it ends; a job
    restored from that savepoint finds it committed and goes on with the next batch."""
    t = tmp_path / "t"
    first = sink(t)
    epoch(first, 1, 0, [Row(key=1, n=1)])
    savepoint = first.snapshot_driver_state()
    first.on_job_end("FINISHED")  # stop-with-savepoint: the job ends
    assert version(t) == 1
    second = sink(t)
    second.restore_driver_state(savepoint)
    assert version(t) == 1
    epoch(second, 2, 0, [Row(key=2, n=1)])
    second.on_job_end("FINISHED")
    assert version(t) == 2 and [r["key"] for r in read(t)] == [1, 2]
    assert deltalake.DeltaTable(str(t)).transaction_version(savepoint["app_id"]) == 1
    assert deltalake.DeltaTable(str(t)).transaction_version(second._driver_identity) == 2


TRUST = "security.trust-shared-directories"


def _configured(path, type_info=COUNTS, partitions=(), trust=False):
    from flowpoint.api.config import Configuration

    s = DeltaSink.builder().set_table_path(str(path)).set_partition_columns(list(partitions)).build()
    s.input_type = type_info
    s.on_job_config(Configuration({TRUST: trust}))
    return s


@pytest.mark.parametrize("planted", ["table owned", "log writable", "partition owned"])
def test_a_table_directory_another_user_owns_or_can_write_is_refused_before_the_job_starts(tmp_path, other_uid, planted):
    """Whoever can write the table's directories could forge this sink's txn version in the log
    (its commits would be skipped) or replace a data file before the commit adds it."""
    from flowpoint.errors import InsecurePathError

    t = tmp_path / "t"
    _configured(t, BUCKETED, ["bucket"])  # creates the table
    target = {"table owned": t, "log writable": t / "_delta_log", "partition owned": t / "bucket=a"}[planted]
    target.mkdir(exist_ok=True)
    if planted.endswith("owned"):
        os.chown(target, other_uid, -1)
    else:
        target.chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"DeltaSink table directory {target} .*{TRUST}: true"):
        _configured(t, BUCKETED, ["bucket"])
    _configured(t, BUCKETED, ["bucket"], trust=True)


def test_a_task_refuses_a_partition_directory_of_another_user_and_writes_nothing_into_it(tmp_path, other_uid):
    from flowpoint.errors import InsecurePathError

    t = tmp_path / "t"
    s = _configured(t, BUCKETED, ["bucket"])
    w = s.create_writer(0, 1, None)
    w.write([Row(bucket="b", key=1, n=1)])
    planted = t / "bucket=b"
    planted.mkdir()
    os.chown(planted, other_uid, -1)
    with pytest.raises(InsecurePathError, match=rf"DeltaSink partition directory {planted} "):
        w.finish(1)
    assert os.listdir(planted) == []
    assert oct(os.stat(t).st_mode & 0o777) == oct(0o755 & ~_umask())  # created readable, writable by the user only


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
