"""IcebergSink (issue 30, item 2): Parquet data files written by the sink tasks, one snapshot per
completed checkpoint whose summary names the sink's identity, its batches and the checkpoint;
a restore commits only what the summaries do not show, then forks the identity. Exactly once
through a failure and a restart on both runtimes; the table read with pyiceberg and with Spark
(its current snapshot's data files, as plain Parquet: no Iceberg JVM package)."""

from __future__ import annotations

import datetime
import os
from collections import Counter

import pytest
import test_delta_sink
from checkpoint_jobs import Counting, expected_outputs, key_of, record

from flowpoint import DataGeneratorSource, IcebergSink, RestartStrategies, Types
from flowpoint.api.config import Configuration
from flowpoint.api.row import Row
from flowpoint.connectors.iceberg import (
    IcebergConfigurationError,
    IcebergSinkError,
    embedded_catalog,
)
from flowpoint.errors import ConfigurationError, FlowpointError, InsecurePathError

pyiceberg_catalogs = pytest.importorskip("pyiceberg.catalog")

COUNTS = Types.ROW_NAMED(["key", "n"], [Types.LONG(), Types.LONG()])
BUCKETED = Types.ROW_NAMED(["bucket", "key", "n"], [Types.STRING(), Types.LONG(), Types.LONG()])
TABLE = "db.clicks"
TRUST = "security.trust-shared-directories"
RUNTIMES = {
    "epoch": {"execution.runtime": "epoch"},
    "continuous": {"execution.runtime": "continuous", "execution.buffer-timeout": 5},
}


def sink(warehouse, type_info=COUNTS, partitions=(), mode="append", config=None):
    """An IcebergSink as sink_to and the job's start make it (driver side)."""
    s = (IcebergSink.builder().set_table(TABLE).set_warehouse(str(warehouse)).set_partition_columns(list(partitions))
         .set_mode(mode).build())
    s.input_type = type_info
    s.on_job_config(config)
    s.on_job_start(1000)
    return s


def epoch(s, n, subtask, rows):
    """One epoch of one sink task, acknowledged and committed on the driver."""
    w = s.create_writer(subtask, 2, None)
    w.write(rows)
    s.on_epoch_committed(n, [(subtask, w.finish(n))], 2)


def checkpoint(s, checkpoint_id):
    state = s.snapshot_driver_state()
    s.notify_checkpoint_complete(checkpoint_id)
    return state


def table(warehouse):
    return embedded_catalog(str(warehouse)).load_table(TABLE)


def read(warehouse) -> list[dict]:
    return sorted(table(warehouse).scan().to_arrow().to_pylist(), key=repr)


def keys(warehouse) -> list[int]:
    return sorted(r["key"] for r in read(warehouse))


def snapshots(warehouse) -> list:
    return table(warehouse).snapshots()


def summaries(warehouse) -> list[dict]:
    return [s.summary.additional_properties for s in snapshots(warehouse)]


def data_files(warehouse) -> list[str]:
    return sorted(os.path.join(d, f) for d, _, fs in os.walk(warehouse) if "/data" in d for f in fs if f.endswith(".parquet"))


def test_the_table_is_created_with_the_streams_columns_and_partitions(tmp_path):
    sink(tmp_path, BUCKETED, ["bucket"])
    t = table(tmp_path)
    assert [(f.name, str(f.field_type)) for f in t.schema().fields] == [("bucket", "string"), ("key", "long"), ("n", "long")]
    assert [(f.name, str(f.transform)) for f in t.spec().fields] == [("bucket", "identity")]
    assert t.location() == f"file://{tmp_path}/db/clicks" and t.current_snapshot() is None
    typed = Types.ROW_NAMED(["day", "at", "tags"], [Types.SQL_DATE(), Types.SQL_TIMESTAMP(), Types.LIST(Types.STRING())])
    s = IcebergSink.builder().set_table("other.days").set_warehouse(str(tmp_path)).set_partition_columns(["day"]).build()
    s.input_type = typed
    s.on_job_config(None)
    days = embedded_catalog(str(tmp_path)).load_table("other.days")
    assert [(f.name, str(f.field_type)) for f in days.schema().fields] == [("day", "date"), ("at", "timestamp"), ("tags", "list<string>")]


def test_a_reader_never_sees_files_of_an_uncommitted_checkpoint(tmp_path):
    s = sink(tmp_path)
    epoch(s, 1, 0, [Row(key=1, n=1), Row(key=2, n=1)])
    epoch(s, 1, 1, [Row(key=3, n=1)])
    assert len(data_files(tmp_path)) == 2  # written by the tasks ...
    assert read(tmp_path) == []  # ... but in no snapshot
    state = s.snapshot_driver_state()  # pre-commit: the checkpoint holds their descriptions
    assert read(tmp_path) == [] and snapshots(tmp_path) == []
    epoch(s, 2, 0, [Row(key=4, n=1)])  # after the checkpoint's cut: the next checkpoint's
    s.notify_checkpoint_complete(1)
    assert keys(tmp_path) == [1, 2, 3]
    [committed] = summaries(tmp_path)
    assert committed["flowpoint.sink-id"] == state["sink_id"] and committed["flowpoint.batch"] == "1"
    assert committed["flowpoint.checkpoint-id"] == "1" and "flowpoint.restored-from" not in committed
    checkpoint(s, 2)
    assert keys(tmp_path) == [1, 2, 3, 4] and len(snapshots(tmp_path)) == 2


def test_a_restart_that_finds_its_checkpoint_committed_does_not_commit_it_again(tmp_path):
    s = sink(tmp_path)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    state = checkpoint(s, 1)  # committed; the driver dies before anything records that
    assert len(snapshots(tmp_path)) == 1
    restored = sink(tmp_path)
    restored.restore_driver_state(state)  # the checkpoint's batch comes back: the summary shows it
    assert len(snapshots(tmp_path)) == 1 and keys(tmp_path) == [1]
    again = sink(tmp_path)
    again.restore_driver_state(state)  # another crash, the same checkpoint
    assert len(snapshots(tmp_path)) == 1 and keys(tmp_path) == [1]
    # the run goes on: the replayed epoch after the checkpoint is committed once, under a new identity
    epoch(again, 2, 0, [Row(key=2, n=1)])
    checkpoint(again, 2)
    assert keys(tmp_path) == [1, 2]
    later = summaries(tmp_path)[-1]
    assert later["flowpoint.sink-id"] != state["sink_id"] and later["flowpoint.restored-from"] == state["sink_id"]


def test_a_restart_commits_what_the_crash_left_uncommitted_once(tmp_path):
    s = sink(tmp_path)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    state = s.snapshot_driver_state()  # the checkpoint completes; the driver dies before committing
    assert snapshots(tmp_path) == []
    sink(tmp_path).restore_driver_state(state)
    assert len(snapshots(tmp_path)) == 1 and read(tmp_path) == [{"key": 1, "n": 1}]
    assert summaries(tmp_path)[0]["flowpoint.sink-id"] == state["sink_id"]  # under the checkpoint's identity
    sink(tmp_path).restore_driver_state(state)
    assert len(snapshots(tmp_path)) == 1 and read(tmp_path) == [{"key": 1, "n": 1}]


def test_a_bounded_job_commits_what_is_left_at_its_end(tmp_path):
    s = sink(tmp_path)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    s.on_job_end("FAILED")
    assert read(tmp_path) == []
    s.on_job_end("FINISHED")
    assert read(tmp_path) == [{"key": 1, "n": 1}]


def test_partitioned_append_and_overwrite_partitions(tmp_path):
    s = sink(tmp_path, BUCKETED, ["bucket"], mode="overwrite_partitions")
    epoch(s, 1, 0, [Row(bucket="a", key=1, n=1), Row(bucket="b", key=2, n=1), Row(bucket="a b/c", key=5, n=1)])
    checkpoint(s, 1)
    dirs = sorted(os.path.basename(os.path.dirname(f)) for f in data_files(tmp_path))
    assert dirs == ["bucket=a", "bucket=a+b%2Fc", "bucket=b"]
    assert {(r["bucket"], r["key"]) for r in read(tmp_path)} == {("a", 1), ("b", 2), ("a b/c", 5)}
    # the next checkpoint writes partition a only: it replaces a, keeps b and "a b/c", in one snapshot
    epoch(s, 2, 0, [Row(bucket="a", key=3, n=2)])
    epoch(s, 2, 1, [Row(bucket="a", key=4, n=2)])
    checkpoint(s, 2)
    assert {(r["bucket"], r["key"]) for r in read(tmp_path)} == {("a", 3), ("a", 4), ("b", 2), ("a b/c", 5)}
    t = table(tmp_path)
    assert len(t.snapshots()) == 2 and t.current_snapshot().summary.operation.value == "overwrite"
    assert sorted(r["key"] for r in t.scan(row_filter="bucket == 'b'").to_arrow().to_pylist()) == [2]
    # append mode on the same table adds to partition a
    s2 = sink(tmp_path, BUCKETED, ["bucket"])
    epoch(s2, 1, 0, [Row(bucket="a", key=6, n=1)])
    checkpoint(s2, 1)
    assert sorted(r["key"] for r in read(tmp_path) if r["bucket"] == "a") == [3, 4, 6]


def test_date_and_timestamp_partitions(tmp_path):
    typed = Types.ROW_NAMED(["day", "at", "n"], [Types.SQL_DATE(), Types.SQL_TIMESTAMP(), Types.LONG()])
    s = (IcebergSink.builder().set_table(TABLE).set_warehouse(str(tmp_path)).set_partition_columns(["day", "at"])
         .set_mode("overwrite_partitions").build())
    s.input_type = typed
    s.on_job_config(None)
    s.on_job_start(1000)
    day, at = datetime.date(2026, 11, 27), datetime.datetime(2026, 11, 27, 10, 30)
    epoch(s, 1, 0, [Row(day=day, at=at, n=1), Row(day=day, at=None, n=2)])
    checkpoint(s, 1)
    epoch(s, 2, 0, [Row(day=day, at=at, n=3)])
    checkpoint(s, 2)
    assert sorted((r["day"], r["at"], r["n"]) for r in read(tmp_path) if r["at"]) == [(day, at, 3)]
    assert [r["n"] for r in read(tmp_path) if r["at"] is None] == [2]
    assert sorted(os.path.relpath(os.path.dirname(f), tmp_path / "db/clicks/data") for f in data_files(tmp_path))[0] \
        == "day=2026-11-27/at=2026-11-27T10%3A30%3A00"


def test_a_stream_that_does_not_match_the_existing_table_is_refused_naming_the_columns(tmp_path):
    import pyarrow as pa

    catalog = embedded_catalog(str(tmp_path))
    catalog.create_namespace("db")
    catalog.create_table(TABLE, schema=pa.schema([pa.field("key", pa.int64()), pa.field("count", pa.string())]))
    with pytest.raises(IcebergConfigurationError, match=(
            r"IcebergSink of table 'db.clicks': the stream does not match the existing table: the stream lacks the "
            r"table's columns \['count'\]; the table has no columns \['n'\]\. The table's columns: key long, count "
            r"string\. Give the stream the table's columns")) as e:
        sink(tmp_path)
    assert isinstance(e.value, FlowpointError) and isinstance(e.value, ConfigurationError) and not e.value.recoverable
    wrong_type = Types.ROW_NAMED(["key", "count"], [Types.STRING(), Types.STRING()])
    with pytest.raises(IcebergConfigurationError, match=r"types differ: key \(string in the stream, long in the table\)"):
        sink(tmp_path, wrong_type)
    good = Types.ROW_NAMED(["count", "key"], [Types.STRING(), Types.LONG()])  # the table's columns, another order
    with pytest.raises(IcebergConfigurationError, match=r"the table is partitioned by \[\], the sink by \['key'\]"):
        sink(tmp_path, good, ["key"])
    s = sink(tmp_path, good)
    epoch(s, 1, 0, [Row(count="y", key=2)])
    checkpoint(s, 1)
    assert read(tmp_path) == [{"key": 2, "count": "y"}]


def test_bad_settings_are_refused_clearly(tmp_path):
    with pytest.raises(IcebergConfigurationError, match=r"needs set_table\('namespace.table'\)"):
        IcebergSink.builder().set_warehouse(str(tmp_path)).build()
    with pytest.raises(IcebergConfigurationError, match=r"set_table needs 'namespace.table'.*got 'clicks'"):
        IcebergSink.builder().set_table("clicks")
    with pytest.raises(IcebergConfigurationError, match="'db.clicks' needs a catalog: set_warehouse"):
        IcebergSink.builder().set_table(TABLE).build()
    with pytest.raises(IcebergConfigurationError, match="either set_warehouse .* or set_catalog_properties"):
        IcebergSink.builder().set_table(TABLE).set_warehouse(str(tmp_path)).set_catalog_properties({"type": "sql"}).build()
    with pytest.raises(IcebergConfigurationError, match="set_warehouse needs a local directory"):
        IcebergSink.builder().set_warehouse("s3://bucket/lake")
    with pytest.raises(IcebergConfigurationError, match="'upsert' is not a mode"):
        IcebergSink.builder().set_mode("upsert")
    with pytest.raises(IcebergConfigurationError, match="'overwrite_partitions' needs set_partition_columns"):
        IcebergSink.builder().set_table(TABLE).set_warehouse(str(tmp_path)).set_mode("overwrite_partitions").build()
    with pytest.raises(IcebergConfigurationError, match="set_partition_columns needs a list"):
        IcebergSink.builder().set_partition_columns("day")
    with pytest.raises(IcebergConfigurationError, match="partition column 'day' is not a column of the stream"):
        sink(tmp_path, COUNTS, ["day"])
    with pytest.raises(IcebergConfigurationError, match="partition column 'x' has Iceberg type double"):
        sink(tmp_path, Types.ROW_NAMED(["x", "n"], [Types.DOUBLE(), Types.LONG()]), ["x"])
    with pytest.raises(IcebergConfigurationError, match="IcebergSink of table 'db.clicks': the stream has no declared type"):
        sink(tmp_path, None)
    unreachable = IcebergSink.builder().set_table(TABLE).set_catalog_properties({"type": "rest", "uri": "http://127.0.0.1:9"}).build()
    unreachable.input_type = COUNTS
    with pytest.raises(IcebergSinkError, match="IcebergSink of table 'db.clicks': cannot load catalog 'default' \\(rest\\)"):
        unreachable.on_job_config(None)
    assert issubclass(IcebergSinkError, FlowpointError) and IcebergSinkError.recoverable


def test_any_pyiceberg_catalog_by_its_properties(tmp_path):
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/other.db", "warehouse": f"file://{tmp_path}/wh"}
    s = IcebergSink.builder().set_table("a.b.clicks").set_catalog_name("mine").set_catalog_properties(props).build()
    s.input_type = COUNTS
    s.on_job_config(Configuration({}))
    s.on_job_start(1000)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    checkpoint(s, 1)
    loaded = pyiceberg_catalogs.load_catalog("mine", **props).load_table("a.b.clicks")
    assert loaded.scan().to_arrow().to_pylist() == [{"key": 1, "n": 1}]


def test_two_sinks_restored_from_one_savepoint_both_land_all_their_batches(tmp_path):
    """The fork: each restore commits under an identity of its own, so the second job's batch 2
    is not taken for the first job's (same number, same restored identity) and skipped."""
    first = sink(tmp_path)
    epoch(first, 1, 0, [Row(key=1, n=1)])
    savepoint = first.snapshot_driver_state()
    first.on_job_end("FINISHED")  # stop-with-savepoint: batch 1 committed as the job ends
    a, b = sink(tmp_path), sink(tmp_path)
    a.restore_driver_state(savepoint)
    b.restore_driver_state(savepoint)
    assert keys(tmp_path) == [1]  # batch 1 once
    epoch(a, 2, 0, [Row(key=2, n=1)])
    epoch(b, 2, 0, [Row(key=3, n=1)])
    checkpoint(a, 2)
    checkpoint(b, 2)
    assert keys(tmp_path) == [1, 2, 3]
    ids = [s["flowpoint.sink-id"] for s in summaries(tmp_path)]
    assert len(set(ids)) == 3 and all(s["flowpoint.restored-from"] == savepoint["sink_id"] for s in summaries(tmp_path)[1:])


def test_restoring_an_older_checkpoint_repeats_what_came_after_it_and_loses_nothing(tmp_path):
    s = sink(tmp_path)
    epoch(s, 1, 0, [Row(key=1, n=1)])
    older = checkpoint(s, 1)
    epoch(s, 2, 0, [Row(key=2, n=1)])
    checkpoint(s, 2)
    restored = sink(tmp_path)
    restored.restore_driver_state(older)  # batch 1 is in the table; batch 2 came after this checkpoint
    assert len(snapshots(tmp_path)) == 2
    epoch(restored, 2, 0, [Row(key=2, n=1)])  # replayed
    checkpoint(restored, 2)
    assert keys(tmp_path) == [1, 2, 2]  # repeated, as after any older restore; nothing lost


def test_another_users_or_a_world_writable_warehouse_is_refused(tmp_path, other_uid):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"IcebergSink warehouse directory {shared} can be written by other users.*{TRUST}: true"):
        sink(shared)
    owned = tmp_path / "owned"
    owned.mkdir()
    os.chown(owned, other_uid, -1)
    with pytest.raises(InsecurePathError, match=rf"IcebergSink warehouse directory {owned} belongs to .*uid {other_uid}.*{TRUST}: true"):
        sink(owned)
    sink(owned, config=Configuration({TRUST: True}))  # the named setting accepts it
    mine = tmp_path / "mine"
    sink(mine)
    (mine / "db" / "clicks" / "data").chmod(0o777)  # a directory of the table others can write
    with pytest.raises(InsecurePathError, match=rf"IcebergSink table directory {mine}/db/clicks/data can be written by other users"):
        sink(mine)
    # a partition directory another user made after the job started: the task refuses to write there
    parts = sink(tmp_path / "parts", BUCKETED, ["bucket"])
    planted = tmp_path / "parts" / "db" / "clicks" / "data" / "bucket=x"
    planted.mkdir()
    os.chown(planted, other_uid, -1)
    w = parts.create_writer(0, 1, None)
    w.write([Row(bucket="x", key=1, n=1)])
    with pytest.raises(InsecurePathError, match=rf"IcebergSink data directory {planted} belongs to .*uid {other_uid}"):
        w.finish(1)


def as_row(kv):
    return Row(bucket=str(kv[0] % 3), key=kv[0], n=kv[1])


EVENTS = 900


def _current_files(t) -> list[str]:
    return [task.file.file_path for task in t.scan().plan_files()]


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_exactly_once_through_a_failure_and_a_restart(make_env, spark, tmp_path, runtime):
    """A record fails until the job restarts from its last checkpoint; the work after it runs
    again. The table, read with pyiceberg and with Spark, holds every result once; each of its
    snapshots names the sink's identity, and no batch of an identity is in two snapshots."""
    lake = tmp_path / "lake"
    env = make_env(parallelism=2, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"), **RUNTIMES[runtime])
    env.enable_checkpointing(1 if runtime == "epoch" else 60)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    iceberg = IcebergSink.builder().set_table(TABLE).set_warehouse(str(lake)).set_partition_columns(["bucket"]).build()
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS, rate_limit_per_second=3000 if runtime == "continuous" else None),
                        source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting(fail_value=record(700), flag=flag)).uid("counting")
        .map(as_row, output_type=BUCKETED).uid("rows")
        .sink_to(iceberg).uid("iceberg")
    )
    env.execute(f"iceberg exactly once ({runtime})")
    assert os.path.exists(flag), "the injected failure never happened"
    rows = table(lake).scan().to_arrow().to_pylist()
    expected = Counter(expected_outputs(EVENTS))
    got = Counter((r["key"], r["n"]) for r in rows)
    assert got == expected, f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"
    assert all(r["bucket"] == str(r["key"] % 3) for r in rows)
    frame = spark.read.parquet(*_current_files(table(lake)))
    assert Counter((r["key"], r["n"]) for r in frame.select("key", "n").collect()) == expected
    commits = summaries(lake)
    assert len(commits) >= 2 and all("flowpoint.sink-id" in c for c in commits)  # one per completed checkpoint with output
    batches = [(c["flowpoint.sink-id"], n) for c in commits for n in c["flowpoint.batches"].split(",")]
    assert len(batches) == len(set(batches)), f"a batch committed twice: {sorted(batches)}"
    forked = [c for c in commits if "flowpoint.restored-from" in c]
    if forked:  # the restart restored a checkpoint: from then on, one identity of its own
        assert all(c["flowpoint.restored-from"] != c["flowpoint.sink-id"] == commits[-1]["flowpoint.sink-id"] for c in forked)
    else:  # the record failed before the first checkpoint completed (a loaded machine): a fresh start
        assert len({c["flowpoint.sink-id"] for c in commits}) == 1


@pytest.mark.slow
def test_a_failure_right_after_a_commit_restores_that_checkpoint_without_committing_it_again(make_env, tmp_path, monkeypatch):
    """The driver commits a checkpoint's snapshot, then fails before it goes on (as if it
    crashed right after the commit): the job restarts from that checkpoint, whose batches come
    back; the snapshots' summaries show them committed, so every result is in the table once."""
    original = IcebergSink._commit
    failed = []

    def commit_then_fail(self):
        before = len(self._driver_batches)
        original(self)
        if before and not failed and self._driver_checkpoint is not None:
            failed.append(self._driver_checkpoint)
            msg = "injected: the driver fails right after committing"
            raise IcebergSinkError(msg)

    monkeypatch.setattr(IcebergSink, "_commit", commit_then_fail)
    restores = []
    original_restore = IcebergSink.restore_driver_state

    def restore(self, state):
        if state is not None and state["batches"]:
            restores.append((max(n for n, _ in state["batches"]), state["sink_id"], len(snapshots(lake))))
        original_restore(self, state)
        if state is not None and state["batches"]:
            restores[-1] += (len(snapshots(lake)),)

    monkeypatch.setattr(IcebergSink, "restore_driver_state", restore)
    lake = tmp_path / "lake"
    env = make_env(parallelism=2, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS), source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting()).uid("counting")
        .map(as_row, output_type=BUCKETED).uid("rows")
        .sink_to(IcebergSink.builder().set_table(TABLE).set_warehouse(str(lake)).build()).uid("iceberg")
    )
    env.execute("iceberg commit then fail")
    assert failed, "the injected failure never happened"
    # the restart restored a checkpoint whose batches the table already held, and committed no snapshot for them
    [(batch, sink_id, before, after)] = restores
    assert before == after and any(c["flowpoint.sink-id"] == sink_id and c["flowpoint.batch"] == str(batch) for c in summaries(lake))
    got = Counter((r["key"], r["n"]) for r in table(lake).scan().to_arrow().to_pylist())
    expected = Counter(expected_outputs(EVENTS))
    assert got == expected, f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"


moto_s3 = test_delta_sink.s3_lake  # the moto S3 server and its bucket ``lake``, shared with the Delta sink's tests


@pytest.fixture(scope="module")
def s3_lake(moto_s3):
    """The FileIO properties an IcebergSink's catalog needs to reach the moto server."""
    return {"s3.endpoint": moto_s3["AWS_ENDPOINT_URL"], "s3.access-key-id": moto_s3["AWS_ACCESS_KEY_ID"],
            "s3.secret-access-key": moto_s3["AWS_SECRET_ACCESS_KEY"], "s3.region": moto_s3["AWS_REGION"]}


def test_an_s3_table_is_written_and_a_restore_commits_nothing_twice(tmp_path, s3_lake):
    props = {"type": "sql", "uri": f"sqlite:///{tmp_path}/catalog.db", "warehouse": "s3://lake/warehouse", **s3_lake}

    def s3_sink():
        s = IcebergSink.builder().set_table(TABLE).set_catalog_properties(props).set_partition_columns(["bucket"]).build()
        s.input_type = BUCKETED
        s.on_job_config(None)
        s.on_job_start(1000)
        return s

    def s3_table():
        return pyiceberg_catalogs.load_catalog("default", **props).load_table(TABLE)

    s = s3_sink()
    assert s.table_location.startswith("s3://lake/warehouse/db")  # pyiceberg's layout: db/clicks (0.12), db.db/clicks (0.9)
    epoch(s, 1, 0, [Row(bucket="a", key=1, n=1), Row(bucket="b", key=2, n=1)])
    state = s.snapshot_driver_state()
    assert s3_table().scan().to_arrow().num_rows == 0  # written, not committed
    s.notify_checkpoint_complete(1)
    s3_sink().restore_driver_state(state)  # the driver died after the commit
    t = s3_table()
    assert len(t.snapshots()) == 1
    assert sorted((r["bucket"], r["key"]) for r in t.scan().to_arrow().to_pylist()) == [("a", 1), ("b", 2)]
    assert all(f.startswith(f"{s.table_location}/data/bucket=") for f in _current_files(t))
