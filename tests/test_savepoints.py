"""Savepoints end to end on Spark: format, relocation, rescaling, backends, uids, drain,
corruption, reading and writing state as data.

Every restore test compares with the uninterrupted result: the same final keyed state and,
for the collecting sink, the same outputs (each run's outputs up to the savepoint it ended with,
as its ``_metadata`` records, plus the last run's).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import time

import pytest
from checkpoint_jobs import build, expected_outputs, expected_state

from flowpoint.checkpoint.savepoint import describe, dispose_savepoint
from flowpoint.errors import CheckpointError, ConfigurationError, CorruptStateError, JobCancelledError

EVENTS = 2_000


def env_for(make_env, parallelism=2, backend="hashmap", restore=None, allow=False, max_records=100, **config):
    env = make_env(parallelism=parallelism, max_records=max_records, **config)
    env.get_configuration().set("state.backend.type", backend)
    if restore is not None:
        env.get_configuration().set("execution.savepoint.path", str(restore))
    if allow:
        env.get_configuration().set("execution.savepoint.ignore-unclaimed-state", True)
    return env


def wait_for(predicate, timeout=120.0, what="condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    msg = f"timed out waiting for {what}"
    raise AssertionError(msg)


def local(uri: str) -> str:
    return uri[len("file://"):] if uri.startswith("file://") else uri


def metadata(path: str) -> dict:
    with open(os.path.join(local(path), "_metadata")) as f:
        return json.load(f)


def state_of(result) -> dict:
    state = result.get_keyed_state("counting")
    return {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})}


def savepoint_mid_run(make_env, target, parallelism, backend="hashmap", restore=None, stop=False, epochs=3):
    """Run the counting job (rate-limited) until a few epochs passed, take a savepoint, end it.
    Returns ``(savepoint path, outputs up to the savepoint)``."""
    env = env_for(make_env, parallelism, backend, restore)
    sink = build(env, EVENTS, rate=1500)
    client = env.execute_async("savepointed")
    start = client.progress().epoch
    wait_for(lambda: client.progress().epoch >= start + epochs or client.is_done(), what="epochs")
    assert not client.is_done(), "the job ended before the savepoint"
    if stop:
        path = client.stop_with_savepoint(str(target))
        client.wait(60)
        assert client.get_job_status().value == "FINISHED"
    else:
        path = client.trigger_savepoint(str(target))
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    n = metadata(path)["sinks"]["collect"]
    return path, list(sink.results[:n])


def finish_from(make_env, path, parallelism, backend="hashmap"):
    env = env_for(make_env, parallelism, backend, path)
    sink = build(env, EVENTS)
    result = env.execute("restored")
    return result, list(sink.results)


@pytest.mark.slow
def test_savepoint_move_and_rescale_1_3_2(make_env, tmp_path):
    sp1, out1 = savepoint_mid_run(make_env, tmp_path / "sp", 2)
    name = os.path.basename(local(sp1))
    assert re.fullmatch(r"savepoint-[0-9a-f]{6}-[0-9a-f]{12}", name), name
    meta = metadata(sp1)
    assert meta["kind"] == "savepoint" and meta["operators"][0]["backend"] == "canonical"
    files = [f["path"] for op in meta["operators"] for s in op["subtasks"] for f in s["files"]]
    assert files and all("/" not in f and f.endswith(".parquet") for f in files)
    assert sorted(os.listdir(local(sp1))) == sorted(["_metadata", *files])
    moved = tmp_path / "elsewhere" / "moved-savepoint"
    shutil.move(local(sp1), moved)  # relocatable: nothing refers to the old place
    sp2, out2 = savepoint_mid_run(make_env, tmp_path / "sp", 1, restore=moved)
    assert metadata(sp2)["checkpoint_id"] == meta["checkpoint_id"] + 1
    sp3, out3 = savepoint_mid_run(make_env, tmp_path / "sp", 3, restore=os.path.join(local(sp2), "_metadata"))
    result, out4 = finish_from(make_env, sp3, 2)
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(out1 + out2 + out3 + out4) == expected_outputs(EVENTS)
    assert metadata(sp3)["job_id"] != metadata(sp2)["job_id"] != meta["job_id"]


@pytest.mark.slow
def test_hashmap_rocksdb_hashmap_through_savepoints(make_env, tmp_path):
    sp1, out1 = savepoint_mid_run(make_env, tmp_path / "sp", 2, "hashmap", stop=True)
    sp2, out2 = savepoint_mid_run(make_env, tmp_path / "sp", 3, "rocksdb", restore=sp1, stop=True)
    assert metadata(sp2)["backend"] == "rocksdb"
    assert {s["kind"] for s in metadata(sp2)["operators"][0]["states"].values()} == {"value", "list", "map"}
    result, out3 = finish_from(make_env, sp2, 2, "hashmap")
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(out1 + out2 + out3) == expected_outputs(EVENTS)
    # and from a HashMap savepoint straight into RocksDB to the end
    result, out4 = finish_from(make_env, sp1, 1, "rocksdb")
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(out1 + out4) == expected_outputs(EVENTS)


def test_savepoint_needs_a_directory(make_env):
    env = env_for(make_env)
    build(env, None, rate=500)
    client = env.execute_async("no-dir")
    try:
        with pytest.raises(ConfigurationError, match="state.savepoints.dir"):
            client.trigger_savepoint()
    finally:
        client.cancel()


def test_default_directory_describe_and_dispose(spark, make_env, tmp_path):
    from flowpoint import state_reader

    env = env_for(make_env)
    env.set_default_savepoint_directory(str(tmp_path / "default"))
    build(env, None, rate=1500)
    client = env.execute_async("default-dir")
    wait_for(lambda: client.progress().epoch >= 2, what="epochs")
    path = client.stop_with_savepoint()
    result = client.wait(60)
    assert local(path).startswith(str(tmp_path / "default"))
    # the job stopped right after the savepoint: its final state is the savepoint's
    read = state_reader(spark, path)
    assert read.keyed_state_dict("counting") == result.get_keyed_state("counting")
    df = read.keyed_state("counting", "by_digit")
    assert {(r.key, r.user_key): r.value for r in df.collect()} == {
        (k, d): n for k, m in result.get_keyed_state("counting", "by_digit").items() for d, n in m.items()
    }
    info = describe(path)
    assert info["kind"] == "savepoint"
    ops = {o["uid"]: o for o in info["operators"]}
    assert set(ops["counting"]["state_names"]) == {"count", "last", "by_digit"}
    assert ops["counting"]["states"]["by_digit"]["kind"] == "map"
    assert ops["counting"]["states"]["count"]["keys"] == 13 and ops["counting"]["bytes"] > 0
    assert info["sources"][0]["uid"] == "numbers"
    with pytest.raises(CheckpointError, match="not a savepoint"):
        dispose_savepoint(str(tmp_path))
    dispose_savepoint(path)
    assert not os.path.exists(local(path))


def test_truncated_file_and_corrupt_metadata_are_refused(make_env, tmp_path):
    writer_path = write_counts(tmp_path / "sp-a", {k: 5 for k in range(13)})
    data_file = next(f for f in os.listdir(writer_path) if f.endswith(".parquet"))
    with open(os.path.join(writer_path, data_file), "r+b") as f:
        f.truncate(os.path.getsize(f.name) - 10)
    env = env_for(make_env, restore=writer_path)
    build(env, 100)
    with pytest.raises(CorruptStateError, match=re.escape(data_file)):
        env.execute("truncated")
    # the same size, other bytes: the checksum refuses it
    other = write_counts(tmp_path / "sp-b", {k: 5 for k in range(13)})
    target = os.path.join(other, next(f for f in os.listdir(other) if f.endswith(".parquet")))
    raw = bytearray(open(target, "rb").read())
    raw[len(raw) // 2] ^= 0xFF
    open(target, "wb").write(bytes(raw))
    env = env_for(make_env, restore=other)
    build(env, 100)
    with pytest.raises(CorruptStateError, match="does not match the SHA-256 recorded in _metadata") as e:
        env.execute("corrupt")
    assert e.value.path.endswith(os.path.basename(target))
    bad = write_counts(tmp_path / "sp-c", {1: 1})
    with open(os.path.join(bad, "_metadata"), "r+b") as f:
        f.truncate(40)
    env = env_for(make_env, restore=bad)
    build(env, 100)
    with pytest.raises(CorruptStateError, match="_metadata") as e:
        env.execute("corrupt-metadata")
    assert e.value.path.endswith("/_metadata")


# -- uids --------------------------------------------------------------------------------------


def write_counts(path, counts: dict, uid="counting", extra_uid=None) -> str:
    from flowpoint import state_writer

    w = state_writer(128).with_keyed_state(uid, "count", list(counts.items()))
    if extra_uid:
        w = w.with_keyed_state(extra_uid, "count", [(1, 1)])
    return local(w.write(str(path)))


def counts_after(events: int, start: dict) -> dict:
    expected = expected_state(events)["count"]
    return {k: expected.get(k, 0) + start.get(k, 0) for k in set(expected) | set(start)}


def test_uid_missing_is_an_error_unless_allowed(make_env, tmp_path):
    start = {k: 100 for k in range(13)}
    path = write_counts(tmp_path / "sp", start, extra_uid="gone-operator")
    env = env_for(make_env, restore=path)
    build(env, 300)
    with pytest.raises(CheckpointError, match="'gone-operator'.*--allow-non-restored-state"):
        env.execute("missing")
    env = env_for(make_env, restore=path, allow=True)
    build(env, 300)
    result = env.execute("allowed")
    assert result.get_keyed_state("counting", "count") == counts_after(300, start)


def test_uid_added_removed_stateless_and_reordered(make_env, tmp_path):
    from checkpoint_jobs import Counting, key_of, record

    from flowpoint import (
        CollectSink,
        DataGeneratorSource,
        KeyedProcessFunction,
        ValueStateDescriptor,
    )

    class Sum(KeyedProcessFunction):
        def open(self, ctx):
            self.total = ctx.get_state(ValueStateDescriptor("total"))

        def process_element(self, value, ctx):
            self.total.update((self.total.value() or 0) + value[1])
            yield value

    start = {k: 7 for k in range(13)}
    path = write_counts(tmp_path / "sp", start)
    env = env_for(make_env, restore=path)
    # a stateless map added (and the old one removed: the writer's job had none), the stateful
    # operator now after it, and a new stateful operator "summing" that starts empty
    (
        env.from_source(DataGeneratorSource(record, count=300), source_name="numbers").uid("numbers")
        .map(lambda v: v).uid("added-map")
        .key_by(key_of)
        .process(Counting()).uid("counting")
        .key_by(lambda kv: kv[0])
        .process(Sum()).uid("summing")
        .sink_to(CollectSink()).uid("collect")
    )
    result = env.execute("changed")
    assert result.get_keyed_state("counting", "count") == counts_after(300, start)
    sums = result.get_keyed_state("summing", "total")
    expected = expected_state(300)["count"]
    assert sums == {k: sum(range(start[k] + 1, start[k] + n + 1)) for k, n in expected.items()}


def test_missing_uid_warning(make_env, caplog):
    from checkpoint_jobs import Counting, key_of, record

    from flowpoint import CollectSink, DataGeneratorSource

    env = env_for(make_env)
    env.from_source(DataGeneratorSource(record, count=10), source_name="numbers").key_by(key_of).process(Counting()).sink_to(CollectSink())
    with caplog.at_level("WARNING", logger="flowpoint"):
        env.execute("no-uids")
    missing = [r.getMessage() for r in caplog.records if "no uid" in r.getMessage()]
    assert len(missing) == 1, missing  # one line for the job, naming every operator
    assert "'numbers'" in missing[0] and "'KeyedProcess'" in missing[0] and ".uid(" in missing[0]


# -- drain -------------------------------------------------------------------------------------


def test_stop_with_savepoint_drain_fires_windows(make_env, tmp_path):
    from flowpoint import (
        Aggregates,
        CollectSink,
        DataGeneratorSource,
        Duration,
        TumblingEventTimeWindows,
        WatermarkStrategy,
    )

    env = env_for(make_env)
    sink = CollectSink()
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v * 10)
    (
        env.from_source(DataGeneratorSource(lambda i: i, count=None, rate_limit_per_second=1000), source_name="gen").uid("gen")
        .assign_timestamps_and_watermarks(strategy).uid("ts")
        .key_by(lambda v: v % 3)
        .window(TumblingEventTimeWindows.of(Duration.of_seconds(1000)))
        .aggregate(Aggregates.count()).uid("windows")
        .sink_to(sink).uid("collect")
    )
    client = env.execute_async("drain")
    wait_for(lambda: client.progress().epoch >= 3, what="epochs")
    assert sink.results == []  # windows of 1000 s of event time: nothing fired yet
    path = client.stop_with_savepoint(str(tmp_path / "sp"), drain=True)
    client.wait(60)
    assert client.get_job_status().value == "FINISHED"
    read = client.progress().records_read
    assert read > 0 and len(sink.results) == 3
    assert sum(r if isinstance(r, int) else r[-1] for r in sink.results) == read  # every record counted once
    assert metadata(path)["kind"] == "savepoint"


# -- state as data -----------------------------------------------------------------------------


def test_state_reader_and_writer(spark, make_env, tmp_path):
    import pandas as pd

    from flowpoint import state_reader, state_writer

    counts = {k: k * 10 for k in range(13)}
    digits = [(k, d, k + d) for k in range(13) for d in range(3)]
    frame = spark.createDataFrame(pd.DataFrame({"key": list(counts), "value": list(counts.values())}))
    path = (
        state_writer(128)
        .with_keyed_state("counting", "count", frame)
        .with_keyed_state("counting", "by_digit", spark.createDataFrame(digits, ["key", "user_key", "value"]), kind="map")
        .with_keyed_state("counting", "last", [(k, 1) for k in range(13)] + [(0, 2)], kind="list")
        .write(str(tmp_path / "bootstrap"))
    )
    reader = state_reader(spark, path)
    [op] = reader.operators()
    assert op["uid"] == "counting" and op["states"] == {"by_digit": "map", "count": "value", "last": "list"}
    df = reader.keyed_state("counting", "count")
    assert df.columns == ["key", "namespace", "user_key", "value"]
    assert {r.key: r.value for r in df.collect()} == counts
    maps = reader.keyed_state("counting", "by_digit").collect()
    assert sorted((r.key, r.user_key, r.value) for r in maps) == sorted(digits)
    assert reader.keyed_state_dict("counting", "last")[0] == [1, 2]
    assert reader.keyed_state("counting").count() == 13 + len(digits) + 13
    # a job restored from it sees that state, and its own state reads back the same way
    env = env_for(make_env, parallelism=3, restore=path)
    build(env, 200)
    result = env.execute("bootstrapped")
    assert result.get_keyed_state("counting", "count") == counts_after(200, counts)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_state_reader_on_retained_checkpoint(spark, make_env, tmp_path, backend):
    """A retained checkpoint (native files of either backend) reads like the savepoint taken at
    the same epoch boundary, and like the job's committed state there."""
    from flowpoint import ExternalizedCheckpointCleanup, state_reader

    env = env_for(make_env, parallelism=2, backend=backend, state_checkpoints_dir=str(tmp_path / "ck"))
    env.get_configuration().set("state.checkpoints.num-retained", 100)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    build(env, None, rate=300)
    client = env.execute_async("checkpointed")
    wait_for(lambda: sum(s.status == "COMPLETED" for s in client.get_checkpoint_stats()) >= 2, what="checkpoints")
    job_dir = tmp_path / "ck" / client.get_job_id()

    def checkpoint_at(epoch):
        for name in os.listdir(job_dir):
            if name.startswith("chk-") and os.path.exists(job_dir / name / "_metadata") and metadata(str(job_dir / name))["epoch"] == epoch:
                return str(job_dir / name)
        return None

    for attempt in range(8):  # a checkpoint still in flight may skip the savepoint's epoch boundary: try again
        time.sleep(0.15 * attempt)  # RocksDB checkpoints take every other boundary: shift the phase
        sp = client.trigger_savepoint(str(tmp_path / "sp"))
        epoch = metadata(sp)["epoch"]
        wait_for(lambda: any(s.epoch >= epoch and s.status == "COMPLETED" for s in client.get_checkpoint_stats()), what="a later checkpoint")  # noqa: B023
        chk = checkpoint_at(epoch)
        if chk is not None:
            break
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert chk is not None, "no checkpoint at a savepoint's epoch"
    expected = state_reader(spark, sp).keyed_state_dict("counting")
    assert expected["count"] and set(expected) == {"count", "last", "by_digit"}
    reader = state_reader(spark, chk)
    assert reader.keyed_state_dict("counting") == expected
    assert {r.key: r.value for r in reader.keyed_state("counting", "count").collect()} == expected["count"]
    info = describe(chk)
    assert info["kind"] == "checkpoint" and info["backend"] == backend
    [op] = [o for o in info["operators"] if o["uid"] == "counting"]
    assert op["states"]["count"]["keys"] == len(expected["count"]) and op["states"]["by_digit"]["kind"] == "map"

@pytest.mark.slow
def test_failure_before_the_first_checkpoint_goes_back_to_the_savepoint(make_env, tmp_path):
    from checkpoint_jobs import Counting, record

    from flowpoint import RestartStrategies

    start = {k: 1000 for k in range(13)}
    path = write_counts(tmp_path / "sp", start)
    env = env_for(make_env, restore=path)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 10))
    build(env, 500, function=Counting(fail_value=record(400), flag=str(tmp_path / "flag")))
    result = env.execute("fails-once")
    assert os.path.exists(tmp_path / "flag")  # it did fail
    assert result.get_keyed_state("counting", "count") == counts_after(500, start)


def test_other_max_parallelism_is_refused_with_both_values(make_env, tmp_path):
    from flowpoint import state_writer

    path = state_writer(64).with_keyed_state("counting", "count", [(1, 1)]).write(str(tmp_path / "sp"))
    env = env_for(make_env, restore=path)
    build(env, 10)
    with pytest.raises(CheckpointError, match=r"max parallelism 64.*128"):
        env.execute("other-max-parallelism")


def window_job(env, count, rate=None):
    from flowpoint import (
        Aggregates,
        CollectSink,
        DataGeneratorSource,
        Duration,
        TumblingEventTimeWindows,
        WatermarkStrategy,
    )

    sink = CollectSink()
    # out of order by up to 399 ms within the 500 ms bound: no record is late, so the windows do
    # not depend on how the splits' records interleave (which the epochs' sizes, and so the
    # machine's load, decide: with jitter beyond the bound a record could be late in one run and
    # not in the other)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(500)).with_timestamp_assigner(lambda v, ts: (v * 37) % 400 + v * 10)
    (
        env.from_source(DataGeneratorSource(lambda i: i, count=count, rate_limit_per_second=rate), source_name="gen").uid("gen")
        .assign_timestamps_and_watermarks(strategy).uid("ts")
        .key_by(lambda v: v % 5)
        .window(TumblingEventTimeWindows.of(Duration.of_seconds(2)))
        .aggregate(Aggregates.count()).uid("windows")
        .sink_to(sink).uid("collect")
    )
    return sink


@pytest.mark.slow
def test_windows_and_timers_restore_rescaled_from_a_savepoint(make_env, tmp_path):
    events = 2000
    env = env_for(make_env, parallelism=2, max_records=1000)
    expected = window_job(env, events)
    env.execute("uninterrupted")
    env = env_for(make_env, parallelism=2, max_records=400)
    first = window_job(env, events, rate=2000)
    client = env.execute_async("windows-a")
    wait_for(lambda: client.progress().epoch >= 2 or client.is_done(), what="epochs")
    path = client.trigger_savepoint(str(tmp_path / "sp"))
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    meta = metadata(path)
    assert any(op["uid"] == "windows" for op in meta["operators"])
    before = list(first.results[: meta["sinks"]["collect"]])
    env = env_for(make_env, parallelism=3, restore=path, max_records=1000)
    second = window_job(env, events)
    env.execute("windows-b")
    assert sorted(map(repr, before + list(second.results))) == sorted(map(repr, expected.results))
    assert before and second.results  # the savepoint was taken between firings
