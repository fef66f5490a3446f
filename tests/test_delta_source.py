"""DeltaSource (issue 30, item 3): a Delta table read as a bounded snapshot, or followed version
by version while another process appends; positions (each data file's records read, the
versions in the splits) restored exactly through a failure on both runtimes and through a
savepoint at another parallelism; versions that delete or rewrite rows refused naming the
version, compactions skipped."""

from __future__ import annotations

import datetime
import decimal
import os
import subprocess
import sys
import textwrap
import time
from collections import Counter

import pyarrow as pa
import pytest
import test_delta_sink

from flowpoint import (
    CollectSink,
    DeltaSink,
    DeltaSource,
    Duration,
    KeyedProcessFunction,
    RestartStrategies,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from flowpoint.api.row import Row
from flowpoint.api.time import MAX_WATERMARK
from flowpoint.connectors.delta import DeltaSourceConfigurationError, DeltaSourceError
from flowpoint.errors import FlowpointError

deltalake = pytest.importorskip("deltalake")

RUNTIMES = {
    "epoch": {"execution.runtime": "epoch"},
    "continuous": {"execution.runtime": "continuous", "execution.buffer-timeout": 5},
}
USERS = 7
s3_lake = test_delta_sink.s3_lake  # the moto S3 server fixture, shared with the sink's tests


def rows(start: int, n: int) -> pa.Table:
    seq = list(range(start, start + n))
    return pa.table({"user": [f"u{i % USERS}" for i in seq], "seq": pa.array(seq, pa.int64()), "day": [f"d{i % 2}" for i in seq]})


def append(path, start: int, n: int, mode: str = "append") -> None:
    deltalake.write_deltalake(str(path), rows(start, n), mode=mode, partition_by=["day"])


def source(path, **kw) -> DeltaSource:
    b = DeltaSource.builder().set_table_path(str(path))
    if "version" in kw:
        b.set_starting_version(kw["version"])
    if "columns" in kw:
        b.set_columns(kw["columns"])
    if kw.get("follow"):
        b.monitor_continuously(Duration.of_millis(kw.get("interval_ms", 1)))
    return b.build()


class Reading:
    """A source's driver and tasks without Spark: every lane planned and read in pieces of 2
    records, positions kept as the split planner keeps them (``positions``: a checkpoint's)."""

    def __init__(self, src: DeltaSource, parallelism: int = 2, positions: list | None = None):
        self.src = src
        self.reader = src.create_reader()
        self.splits = [split for split, _ in positions] if positions else src.create_splits(parallelism)
        self.positions = {s.split_id: p for s, p in positions} if positions else {s.split_id: s.start for s in self.splits}
        self.finished: dict[str, bool] = {}

    def read(self) -> list[dict]:
        time.sleep(0.002)  # past the (1 ms) monitoring interval
        out = []
        for split in self.splits:
            for _ in range(10_000):  # (a plan that does not move would loop for ever)
                if self.finished.get(split.split_id):
                    break
                position = self.positions[split.split_id]
                plan = self.src.plan(split, position, 2, 0.0)
                if list(plan.end) != list(position):
                    for batch in self.reader.read(split, self.src.read_spec(split, position, plan.end)):
                        assert batch.schema == self.src.schema
                        out.extend(batch.to_pylist())
                self.positions[split.split_id] = plan.end
                self.finished[split.split_id] = plan.finished
                if plan.records == 0:
                    break
        return out

    def checkpoint(self) -> list:
        """Every split and its position, through checkpoint data and back."""
        return [self.src.decode_position(s.split_id, self.src.encode_position(s, self.positions[s.split_id])) for s in self.splits]


def seqs(records) -> list[int]:
    return sorted(r["seq"] for r in records)


# -- the source alone (driver and reader, no Spark) -------------------------------------------


def test_a_bounded_snapshot_reads_every_row_once_with_the_tables_schema(tmp_path):
    t = tmp_path / "t"
    append(t, 0, 10)
    append(t, 10, 5)
    src = source(t)
    assert src.is_bounded()
    assert src.output_type == Types.ROW_NAMED(["user", "seq", "day"], [Types.STRING(), Types.LONG(), Types.STRING()])
    reading = Reading(src, parallelism=3)
    assert [s.payload for s in reading.splits] == [{"lane": i, "lanes": 3, "snapshot": 1} for i in range(3)]
    records = reading.read()
    assert seqs(records) == list(range(15))
    assert all(r["user"] == f"u{r['seq'] % USERS}" and r["day"] == f"d{r['seq'] % 2}" for r in records)  # partition values
    assert all(reading.finished.values())
    assert src.total_records() == 15


def test_a_starting_version_and_chosen_columns(tmp_path):
    t = tmp_path / "t"
    append(t, 0, 4)
    append(t, 4, 4)
    append(t, 8, 4)
    src = source(t, version=1, columns=["seq", "day"])
    assert src.output_type == Types.ROW_NAMED(["seq", "day"], [Types.LONG(), Types.STRING()])
    records = Reading(src, parallelism=1).read()
    assert seqs(records) == list(range(8))
    assert set(records[0]) == {"seq", "day"}


def test_following_reads_appends_skips_compactions_and_refuses_deletes_naming_the_version(tmp_path):
    t = tmp_path / "t"
    append(t, 0, 6)
    src = source(t, follow=True)
    assert not src.is_bounded()
    reading = Reading(src)
    assert seqs(reading.read()) == list(range(6))
    append(t, 6, 4)  # version 1
    append(t, 10, 3)  # version 2
    assert seqs(reading.read()) == list(range(6, 13))
    deltalake.DeltaTable(str(t)).optimize.compact()  # version 3: dataChange=false, skipped
    assert reading.read() == []
    append(t, 13, 2)  # version 4
    assert seqs(reading.read()) == [13, 14]
    assert not any(reading.finished.values())  # a followed table's lanes never finish
    assert {tuple(p)[0] for p in reading.positions.values()} == {4}  # the version read up to
    deltalake.DeltaTable(str(t)).delete("seq = 3")  # version 5
    with pytest.raises(DeltaSourceError, match=r"version 5 \(DELETE\) removes or rewrites data.*append-only"):
        reading.read()
    again = Reading(source(t, version=4, follow=True))  # a new job after it: version 5 is refused as well
    with pytest.raises(DeltaSourceError, match="version 5"):
        again.read()


def test_an_overwrite_while_following_is_refused(tmp_path):
    t = tmp_path / "t"
    append(t, 0, 3)
    reading = Reading(source(t, follow=True))
    reading.read()
    append(t, 3, 3, mode="overwrite")
    with pytest.raises(DeltaSourceError, match=r"version 1 \(WRITE\) removes or rewrites data"):
        reading.read()


def test_a_restore_continues_from_the_checkpoints_positions_without_gap_or_duplicate(tmp_path):
    """A checkpoint in the middle of a data file; the job read on past it, then failed. A
    restart (the same source object, which has seen later versions) and a --resume (a new
    one) read from the checkpoint's position: the rest, once."""
    t = tmp_path / "t"
    append(t, 0, 9)
    append(t, 9, 6)  # version 1
    src = source(t, version=0, follow=True)
    reading = Reading(src, parallelism=1)
    lane = reading.splits[0]
    plan = src.plan(lane, lane.start, 3, 0.0)
    got = [r for b in reading.reader.read(lane, src.read_spec(lane, lane.start, plan.end)) for r in b.to_pylist()]
    reading.positions[lane.split_id] = plan.end
    checkpoint = reading.checkpoint()
    assert len(got) == 3 and checkpoint[0][1] == [0, 0, 3]  # version 0, its first file, 3 records read
    reading.read()  # on past the checkpoint
    append(t, 15, 6)
    deltalake.DeltaTable(str(t)).optimize.compact()
    for restored in (src, source(t, version=0, follow=True)):
        rest = Reading(restored, positions=checkpoint).read()
        assert seqs(got + rest) == list(range(21))


def test_a_restart_without_a_checkpoint_reads_the_same_snapshot(tmp_path):
    t = tmp_path / "t"
    append(t, 0, 4)
    src = source(t, follow=True)
    first = src.create_splits(1)
    append(t, 4, 4)
    assert src.create_splits(1) == first  # pinned at version 0
    assert seqs(Reading(src, positions=[(s, s.start) for s in first]).read()) == list(range(8))


def test_missing_tables_versions_files_and_log_entries_are_named(tmp_path):
    with pytest.raises(DeltaSourceConfigurationError, match="no Delta table at .*nowhere"):
        source(tmp_path / "nowhere")
    t = tmp_path / "t"
    append(t, 0, 4)
    with pytest.raises(DeltaSourceConfigurationError, match="no version 3 .*latest is 0"):
        source(t, version=3)
    with pytest.raises(DeltaSourceConfigurationError, match=r"no column\(s\) \['nope'\]"):
        source(t, columns=["seq", "nope"])
    src = source(t, follow=True)
    reading = Reading(src, parallelism=1)
    snapshot_file = src.read_spec(reading.splits[0], [0, 0, 0], [0, 1, 0])[0][0]
    reading.read()
    append(t, 4, 4)
    append(t, 8, 4)
    deltalake.DeltaTable(str(t)).create_checkpoint()  # at version 2
    os.remove(t / "_delta_log" / f"{1:020d}.json")  # log retention removed version 1's entry
    with pytest.raises(DeltaSourceError, match=r"log entry of version 1 .* is gone"):
        reading.read()
    os.remove(t / snapshot_file["path"])  # vacuumed
    with pytest.raises(DeltaSourceError, match=rf"data file '{snapshot_file['path']}' \(version 0\) is gone.*VACUUM"):
        list(src.create_reader().read(reading.splits[0], [[snapshot_file, 0, 1]]))
    assert issubclass(DeltaSourceError, FlowpointError)


def test_a_schema_change_while_following_fails_naming_the_column(tmp_path):
    t = tmp_path / "t"
    append(t, 0, 2)
    reading = Reading(source(t, follow=True))
    reading.read()
    deltalake.write_deltalake(str(t), pa.table({"user": ["x"], "seq": pa.array([1.5]), "day": ["d0"]}), mode="overwrite",
                              schema_mode="overwrite", partition_by=["day"])
    with pytest.raises(DeltaSourceError, match=r"version 1 .*changes the type of columns the source reads \(seq: int64 -> double\)"):
        reading.read()


def test_delta_types_and_partition_values_read_as_flowpoint_types(tmp_path):
    t = tmp_path / "t"
    utc = datetime.timezone.utc
    table = pa.table({
        "ts": pa.array([datetime.datetime(2024, 1, 1, 1, 2, 3, 456789, tzinfo=utc)], pa.timestamp("us", "UTC")),
        "dec": pa.array([decimal.Decimal("12.34")], pa.decimal128(10, 2)),
        "l": pa.array([[1, 2]], pa.list_(pa.int32())),
        "st": pa.array([{"a": 1, "b": "x"}]),
        "m": pa.array([[("k", 1)]], pa.map_(pa.string(), pa.int64())),
        "pday": pa.array([datetime.date(2024, 5, 6)]),
        "pts": pa.array([datetime.datetime(2024, 5, 6, 7, 8, 9)], pa.timestamp("us")),
    })
    deltalake.write_deltalake(str(t), table, partition_by=["pday", "pts"])
    src = source(t)
    assert src.output_type == Types.ROW_NAMED(
        ["ts", "dec", "l", "st", "m", "pday", "pts"],
        [Types.SQL_TIMESTAMP(), Types.BIG_DEC(), Types.LIST(Types.INT()), Types.ROW_NAMED(["a", "b"], [Types.LONG(), Types.STRING()]),
         Types.MAP(Types.STRING(), Types.LONG()), Types.SQL_DATE(), Types.SQL_TIMESTAMP()])
    assert Reading(src, parallelism=1).read() == [{
        "ts": datetime.datetime(2024, 1, 1, 1, 2, 3, 456000),  # UTC wall-clock time, to the millisecond
        "dec": decimal.Decimal("12.34"), "l": [1, 2], "st": {"a": 1, "b": "x"}, "m": [("k", 1)],
        "pday": datetime.date(2024, 5, 6), "pts": datetime.datetime(2024, 5, 6, 7, 8, 9),
    }]


def test_a_column_without_a_flowpoint_type_is_refused_unless_left_out(tmp_path):
    t = tmp_path / "t"
    deltalake.write_deltalake(str(t), pa.table({"k": [1], "blob": pa.array([b"x"], pa.binary())}))
    with pytest.raises(DeltaSourceConfigurationError, match="column 'blob' has type binary.*set_columns"):
        source(t)
    assert Reading(source(t, columns=["k"])).read() == [{"k": 1}]


def test_an_s3_table_is_read_and_followed(s3_lake):
    """The driver reads the log and the reader the data files through delta-rs's object store
    (a moto S3 server; the same storage options as the table's)."""
    path = "s3://lake/events"
    deltalake.write_deltalake(path, rows(0, 6), partition_by=["day"], storage_options=s3_lake)
    src = DeltaSource.builder().set_table_path(path).set_storage_options(s3_lake).monitor_continuously(Duration.of_millis(1)).build()
    reading = Reading(src)
    assert seqs(reading.read()) == list(range(6))
    deltalake.write_deltalake(path, rows(6, 4), mode="append", partition_by=["day"], storage_options=s3_lake)
    assert seqs(reading.read()) == list(range(6, 10))


# -- jobs --------------------------------------------------------------------------------------


class CountPerUser(KeyedProcessFunction):
    """(user, n) for the n-th row of each user; fails at row ``fail_seq`` until ``flag`` exists
    (it creates the flag as it fails: the restart gets past it)."""

    def __init__(self, fail_seq: int | None = None, flag: str | None = None):
        self.fail_seq = fail_seq
        self.flag = flag

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, row, ctx):
        if row.seq == self.fail_seq and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            msg = f"injected failure at row {row.seq}"
            raise RuntimeError(msg)
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n


def expected_counts(total: int) -> Counter:
    per_user = Counter(f"u{i % USERS}" for i in range(total))
    return Counter((u, n) for u, c in per_user.items() for n in range(1, c + 1))


APPENDER = textwrap.dedent("""
    import sys, time
    import pyarrow as pa
    import deltalake
    path, start, versions, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    for v in range(versions):
        seq = list(range(start + v * per, start + (v + 1) * per))
        deltalake.write_deltalake(path, pa.table({"user": [f"u{i % 7}" for i in seq], "seq": pa.array(seq, pa.int64()),
                                                  "day": [f"d{i % 2}" for i in seq]}), mode="append", partition_by=["day"])
        time.sleep(0.15)
""")


def start_appender(path, start: int, versions: int, per: int) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", APPENDER, str(path), str(start), str(versions), str(per)])


def wait_for(sink: CollectSink, count: int, client, timeout_s: float = 90.0) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        results = sink.results
        if len(results) >= count:
            return results
        if client.is_done():
            client.wait()  # raises why the job ended
            pytest.fail(f"the job ended with {len(results)} of {count} records")
        time.sleep(0.05)
    pytest.fail(f"timed out: {len(sink.results)} of {count} records")


def follow_job(env, t, sink, function) -> None:
    (env.from_source(source(t, follow=True, interval_ms=100), WatermarkStrategy.no_watermarks(), "delta").uid("delta")
     .key_by("user").process(function).uid("count").sink_to(sink).uid("collect"))


@pytest.mark.slow
def test_a_table_followed_while_another_process_appends(make_env, tmp_path):
    """Every appended row once; a compaction read nothing; then a delete fails the job naming
    its version."""
    t = tmp_path / "t"
    append(t, 0, 20)
    env = make_env(parallelism=2, max_records=50, execution_epoch_interval=50)
    sink = CollectSink()
    follow_job(env, t, sink, CountPerUser())
    client = env.execute_async("delta followed")
    try:
        appender = start_appender(t, 20, 6, 15)  # versions 1..6
        assert appender.wait(60) == 0
        got = Counter(wait_for(sink, 110, client))
        deltalake.DeltaTable(str(t)).optimize.compact()  # version 7: skipped
        time.sleep(0.5)  # a few more rounds: nothing is read twice
        assert Counter(sink.results) == expected_counts(110) == got
        deltalake.DeltaTable(str(t)).delete("seq = 3")  # version 8
        with pytest.raises(DeltaSourceError, match=r"version 8 \(DELETE\) removes or rewrites data"):
            client.wait(60)
    finally:
        if not client.is_done():
            client.cancel()


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_exactly_once_through_a_failure_and_a_restart(make_env, tmp_path, runtime):
    """A row fails once, after the job has read versions that came while it ran; the job
    restarts from its last checkpoint (file positions and versions restored) and every row is
    counted once."""
    t = tmp_path / "t"
    append(t, 0, 30)
    # reads of 8 records per lane: positions in the middle of data files (10 rows per file)
    env = make_env(parallelism=2, max_records=16, state_checkpoints_dir=str(tmp_path / "ck"), execution_epoch_interval=50,
                   **RUNTIMES[runtime])
    env.enable_checkpointing(1 if runtime == "epoch" else 100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    sink = CollectSink()
    follow_job(env, t, sink, CountPerUser(fail_seq=60, flag=flag))
    client = env.execute_async(f"delta followed through a restart ({runtime})")
    try:
        appender = start_appender(t, 30, 4, 20)  # versions 1..4: rows 30..109
        assert appender.wait(60) == 0
        wait_for(sink, 110, client)
        time.sleep(0.5)
        assert os.path.exists(flag), "the injected failure never happened"
        got = Counter(sink.results)
        expected = expected_counts(110)
        assert got == expected, f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"
    finally:
        client.cancel()


class Watermarks(KeyedProcessFunction):
    def process_element(self, row, ctx):
        yield row.seq, ctx.timer_service().current_watermark()


@pytest.mark.slow
def test_rows_of_versions_appended_after_every_file_was_read_are_not_late(make_env, tmp_path):
    """Event time on the continuous runtime: a followed table's lanes never finish, so the
    watermark never jumps to +infinity once every file so far is read (a lane without new
    files goes idle, as a Kafka partition does), and the rows of a version appended later are
    not dropped as late for that reason."""
    t = tmp_path / "t"
    append(t, 0, 10)
    env = make_env(parallelism=2, **RUNTIMES["continuous"])
    sink = CollectSink()
    strategy = (WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda row, ts: row.seq * 1000)
                .with_idleness(Duration.of_millis(200)))
    (env.from_source(source(t, follow=True, interval_ms=100), strategy, "delta").uid("delta")
     .key_by("user").process(Watermarks()).uid("marks").sink_to(sink).uid("collect"))
    client = env.execute_async("delta event time")
    try:
        wait_for(sink, 10, client)
        time.sleep(1.0)  # the snapshot is read, its watermarks are out, idle lanes are idle
        append(t, 10, 10)
        marks = dict(wait_for(sink, 20, client))
        # (a lane may run ahead of an idle one within a version, as Kafka partitions do: the
        # point is that no row meets a watermark of +infinity, as every appended row did when
        # each data file was a split that finished)
        at_end = [seq for seq, wm in marks.items() if wm >= MAX_WATERMARK]
        assert not at_end, f"rows read after a +infinity watermark: {sorted(at_end)}"
        assert max(marks[seq] for seq in range(10, 20)) > 0, "the watermark never moved"
    finally:
        client.cancel()


def _round_trip(env, t_in, t_out) -> None:
    env.enable_checkpointing(1)
    (env.from_source(source(t_in), WatermarkStrategy.no_watermarks(), "delta in").uid("delta-in")
     .key_by("user").process(CountPerUser()).uid("count")
     .map(lambda kv: Row(user=kv[0], n=kv[1]), output_type=Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.LONG()])).uid("rows")
     .sink_to(DeltaSink.builder().set_table_path(str(t_out)).build()).uid("delta-out"))


@pytest.mark.slow
def test_round_trip_into_a_delta_sink_through_a_savepoint_at_another_parallelism(make_env, tmp_path):
    """DeltaSource -> keyed count -> DeltaSink: stopped with a savepoint part way through the
    snapshot, restored at parallelism 3; the output table holds every count once."""
    t_in, t_out = tmp_path / "in", tmp_path / "out"
    for v in range(12):
        append(t_in, v * 25, 25)
    env = make_env(parallelism=2, max_records=20, state_checkpoints_dir=str(tmp_path / "ck"), execution_runtime="epoch")
    _round_trip(env, t_in, t_out)
    client = env.execute_async("delta round trip")
    deadline = time.monotonic() + 90
    while client.progress().epoch < 4 and time.monotonic() < deadline and not client.is_done():
        time.sleep(0.05)
    assert not client.is_done(), "the job ended before the savepoint"
    path = client.stop_with_savepoint(str(tmp_path / "sp"))
    client.wait(60)
    before = deltalake.DeltaTable(str(t_out)).to_pyarrow_table().num_rows
    assert 0 < before < 300, "the savepoint should cut the input"
    env2 = make_env(parallelism=3, max_records=200, state_checkpoints_dir=str(tmp_path / "ck2"), execution_runtime="epoch")
    env2.get_configuration().set("execution.savepoint.path", path)
    _round_trip(env2, t_in, t_out)
    env2.execute("delta round trip, restored at parallelism 3")
    got = Counter((r["user"], r["n"]) for r in deltalake.DeltaTable(str(t_out)).to_pyarrow_table().to_pylist())
    expected = expected_counts(300)
    assert got == expected, f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"
