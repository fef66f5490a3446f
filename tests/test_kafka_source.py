"""KafkaSource end to end on the embedded Tansu broker (``kafka_broker`` fixture), Spark local[2].

Spark-free tests of offset planning and the builder are in tests/test_kafka_source_planning.py.
"""

from __future__ import annotations

import os
import time
from collections import Counter

import pytest

pytest.importorskip("confluent_kafka")

from checkpoint_jobs import Counting, expected_outputs, expected_state, key_of, record  # noqa: E402
from kafka_helpers import committed, produce, topic_name  # noqa: E402

from flowpoint import (  # noqa: E402
    CollectSink,
    Duration,
    JsonRowDeserializationSchema,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaSource,
    KafkaTopicPartition,
    KeyedProcessFunction,
    RestartStrategies,
    SimpleStringSchema,
    Types,
    WatermarkStrategy,
)
from flowpoint.api.checkpointing import ExternalizedCheckpointCleanup  # noqa: E402
from flowpoint.connectors.kafka import KafkaDeserializationError, KafkaUnreachableError  # noqa: E402

pytestmark = pytest.mark.timeout(300)


def source(broker, topic, bounded=True, starting=None, group=None, deserializer=None, **props):
    b = (
        KafkaSource.builder()
        .set_bootstrap_servers(broker.bootstrap_servers)
        .set_value_only_deserializer(deserializer or SimpleStringSchema())
        .set_property("default.api.timeout.ms", "10000")
    )
    b = b.set_topic_pattern(topic) if topic.startswith("^") else b.set_topics(topic)
    if starting is not None:
        b.set_starting_offsets(starting)
    if bounded:
        b.set_bounded(KafkaOffsetsInitializer.latest())
    if group:
        b.set_group_id(group)
    for k, v in props.items():
        b.set_property(k, str(v))
    return b.build()


def read_all(make_env, src, parallelism=2, max_records=None, strategy=None):
    env = make_env(parallelism=parallelism, max_records=max_records)
    sink = CollectSink()
    env.from_source(src, strategy, "kafka").sink_to(sink)
    result = env.execute("kafka read")
    return sink.results, result


# -- reading --------------------------------------------------------------------------------------


@pytest.mark.slow
def test_bounded_read_of_every_partition_in_offset_order(kafka_broker, make_env):
    topic = topic_name()
    kafka_broker.create_topic(topic, 3)
    values = [f"v{i}" for i in range(300)]
    produce(kafka_broker.bootstrap_servers, topic, values, partitions=3)
    out, result = read_all(make_env, source(kafka_broker, topic), parallelism=2, max_records=50)
    assert sorted(out) == sorted(values)
    for p in range(3):  # each partition's records keep their offset order
        mine = [v for v in out if int(v[1:]) % 3 == p]
        assert mine == sorted(mine, key=lambda v: int(v[1:]))
    epochs = result.get_epoch_stats()
    assert max(n for _, n, _ in epochs) <= 50, "an epoch read more than execution.epoch.max-records"


@pytest.mark.slow
def test_a_topic_matching_the_pattern_is_discovered_while_the_job_runs(kafka_broker, make_env):
    prefix = topic_name("pat")
    kafka_broker.create_topic(prefix + "-a", 1)
    produce(kafka_broker.bootstrap_servers, prefix + "-a", [f"a{i}" for i in range(50)])
    src = source(kafka_broker, "^" + prefix.replace("-", r"\-") + r"\-.*", bounded=False,
                 **{"partition.discovery.interval.ms": "200"})
    env = make_env(parallelism=2, max_records=100)
    sink = CollectSink()
    env.from_source(src, None, "kafka").sink_to(sink)
    client = env.execute_async("discovery")

    def wait_for(n):
        deadline = time.monotonic() + 60
        while client.progress().records_read < n and time.monotonic() < deadline and not client.is_done():
            time.sleep(0.05)
        return client.progress().records_read

    try:
        assert wait_for(50) == 50
        kafka_broker.create_topic(prefix + "-b", 2)
        produce(kafka_broker.bootstrap_servers, prefix + "-b", [f"b{i}" for i in range(30)], partitions=2)
        assert wait_for(80) == 80
        splits = sorted(sp.split_id for sp in client.progress().splits)
        assert splits == [prefix + "-a-0", prefix + "-b-0", prefix + "-b-1"]
    finally:
        client.cancel()
        with pytest.raises(Exception):
            client.wait(60)
    assert sorted(sink.results) == sorted([f"a{i}" for i in range(50)] + [f"b{i}" for i in range(30)])


# -- exactly once through failures, restores and rescaling ----------------------------------------

EVENTS = 1_200


def count_job(env, src, function=None):
    sink = CollectSink()
    (
        env.from_source(src, None, "kafka").uid("kafka")
        .map(int)
        .key_by(key_of)
        .process(function or Counting()).uid("counting")
        .sink_to(sink).uid("collect")
    )
    return sink


def counted_topic(broker, partitions, events=EVENTS):
    topic = topic_name("count")
    broker.create_topic(topic, partitions)
    produce(broker.bootstrap_servers, topic, [record(i) for i in range(events)], partitions=partitions)
    return topic


def state_of(result) -> dict:
    state = result.get_keyed_state("counting")
    return {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})}


def checkpointing_env(make_env, tmp_path, parallelism, backend="hashmap", max_records=300):
    env = make_env(parallelism=parallelism, max_records=max_records, state_checkpoints_dir=str(tmp_path / "ck"))
    env.get_configuration().set("state.backend.type", backend)
    env.enable_checkpointing(1)  # at every epoch boundary
    return env


@pytest.mark.slow
@pytest.mark.parametrize(("parallelism", "backend"), [(1, "hashmap"), (1, "rocksdb"), (3, "hashmap"), (3, "rocksdb")])
def test_keyed_count_is_exact_after_a_failure_and_restart(kafka_broker, make_env, tmp_path, parallelism, backend):
    """4 partitions; a record fails every task attempt until the job restarts from its last
    checkpoint: each partition resumes at the checkpoint's offset, no record lost or counted twice."""
    topic = counted_topic(kafka_broker, 4)
    group = topic_name("g")
    env = checkpointing_env(make_env, tmp_path, parallelism, backend)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    sink = count_job(env, source(kafka_broker, topic, group=group), Counting(fail_value=record(900), flag=flag))
    result = env.execute("kafka count with a failure")
    assert os.path.exists(flag), "the injected failure never happened"
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)
    # offsets of completed checkpoints went to the group (monitoring only), never past the ends
    offsets = committed(kafka_broker.bootstrap_servers, group, topic, 4)
    assert offsets and all(0 <= off <= EVENTS // 4 for off in offsets.values())


@pytest.mark.slow
def test_restore_from_a_savepoint_at_another_parallelism_resumes_every_partition(kafka_broker, make_env, tmp_path):
    from flowpoint.errors import JobCancelledError

    topic = counted_topic(kafka_broker, 5)
    env = make_env(parallelism=2, max_records=60)
    sink = count_job(env, source(kafka_broker, topic))
    client = env.execute_async("kafka savepointed")
    deadline = time.monotonic() + 120
    while client.progress().epoch < 4 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not client.is_done(), "the job ended before the savepoint"
    path = client.trigger_savepoint(str(tmp_path / "sp"))
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    import json

    local = path[len("file://"):] if path.startswith("file://") else path
    with open(os.path.join(local, "_metadata")) as f:
        meta = json.load(f)
    before = list(sink.results[: meta["sinks"]["collect"]])
    cut = {s["split_id"]: s["position"]["position"] for s in meta["sources"]}
    assert set(cut) == {f"{topic}-{p}" for p in range(5)} and 0 < sum(cut.values()) < EVENTS
    env2 = make_env(parallelism=3, max_records=500)
    env2.get_configuration().set("execution.savepoint.path", os.path.join(local, "_metadata"))
    sink2 = count_job(env2, source(kafka_broker, topic))
    result = env2.execute("kafka restored at parallelism 3")
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(before + list(sink2.results)) == expected_outputs(EVENTS)


@pytest.mark.slow
def test_a_topic_with_fewer_partitions_than_source_parallelism(kafka_broker, make_env):
    topic = counted_topic(kafka_broker, 2, events=600)
    env = make_env(parallelism=3, max_records=100)
    sink = count_job(env, source(kafka_broker, topic))
    result = env.execute("2 partitions, parallelism 3")
    assert state_of(result) == expected_state(600)
    assert sorted(sink.results) == expected_outputs(600)


class KillWorkerOnce:
    """A map that kills its Python worker (os._exit) at ``value`` the first time: Spark retries
    the task, which reads its planned offset ranges again."""

    def __init__(self, value: int, flag: str):
        self.value, self.flag = value, flag

    def __call__(self, text: str) -> int:
        v = int(text)
        if v == self.value and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            os._exit(1)
        return v


@pytest.mark.slow
def test_a_killed_python_worker_rereads_the_same_ranges(kafka_broker, make_env, tmp_path):
    topic = counted_topic(kafka_broker, 4)
    env = checkpointing_env(make_env, tmp_path, 2, "hashmap")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "killed")
    sink = CollectSink()
    (
        env.from_source(source(kafka_broker, topic), None, "kafka").uid("kafka")
        .map(KillWorkerOnce(record(700), flag))
        .key_by(key_of).process(Counting()).uid("counting").sink_to(sink).uid("collect")
    )
    result = env.execute("kafka count, a worker killed")
    assert os.path.exists(flag), "the worker was never killed"
    assert state_of(result) == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)


@pytest.mark.slow
def test_driver_killed_then_resume_continues_each_partition_from_the_latest_checkpoint(kafka_broker, tmp_path):
    """kill -9 of the driver mid-run, then ``flowpoint run --resume``: the counts are exact, so
    every partition went on at its offset in the checkpoint the resumed run restored."""
    import json
    import signal
    import subprocess
    import sys

    here = os.path.dirname(os.path.abspath(__file__))
    topic = counted_topic(kafka_broker, 4, events=3_000)
    ck = str(tmp_path / "ck")
    args = [os.path.join(here, "kafka_source_job.py"), kafka_broker.bootstrap_servers, topic, ck, "rocksdb"]
    first = subprocess.Popen([sys.executable, *args, "40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=here)
    try:
        deadline = time.monotonic() + 180
        while sum("_metadata" in files for _, _, files in os.walk(ck)) < 2:
            assert first.poll() is None, first.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "no two checkpoints in the first run"
            time.sleep(0.1)
    finally:
        first.send_signal(signal.SIGKILL)
        first.wait(60)
    [job] = os.listdir(ck)
    done = [int(n[4:]) for n in os.listdir(os.path.join(ck, job))
            if n.startswith("chk-") and os.path.exists(os.path.join(ck, job, n, "_metadata"))]
    proc = subprocess.run([sys.executable, "-m", "flowpoint.cli", "run", "--resume", *args, "1000"],
                          capture_output=True, text=True, timeout=300, cwd=here)
    assert proc.returncode == 0, proc.stderr[-3000:]
    import re

    restored = int(re.search(r"restoring checkpoint (\d+)", proc.stderr).group(1))
    assert restored == max(done)
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert out["count"] == {str(k): v for k, v in expected_state(3_000)["count"].items()}
    assert out["checkpoints"] and out["checkpoints"][0] == restored + 1


# -- event time per partition ---------------------------------------------------------------------


class WindowCount(KeyedProcessFunction):
    """Counts per key and 10 s event-time window; the window's timer emits its count."""

    def open(self, ctx):
        from flowpoint import MapStateDescriptor

        self.n = ctx.get_map_state(MapStateDescriptor("n"))

    def process_element(self, value, ctx):
        end = ctx.timestamp() // 10_000 * 10_000 + 9_999
        self.n.put(end, (self.n.get(end) or 0) + 1)
        ctx.timer_service().register_event_time_timer(end)

    def on_timer(self, timestamp, ctx):
        yield ctx.get_current_key(), timestamp, self.n.get(timestamp)
        self.n.remove(timestamp)


@pytest.mark.slow
def test_an_idle_partition_does_not_hold_the_watermark_back_with_idleness(kafka_broker, make_env):
    """3 partitions, partition 2 never gets a record. Record timestamps are Kafka's (no
    assigner). With idleness the watermark is the minimum over partitions 0 and 1 only, so the
    first window fires while the job runs; the watermark per partition never passes a record of
    its own partition (every window's count is complete)."""
    topic = topic_name("idle")
    kafka_broker.create_topic(topic, 3)
    base = 1_700_000_000_000 // 10_000 * 10_000
    stamps = [base + i * 100 for i in range(400)]  # 40 s of records over partitions 0 and 1
    produce(kafka_broker.bootstrap_servers, topic, ["k"] * 400, timestamps=stamps, partition_of=lambda i: i % 2)
    env = make_env(parallelism=2, max_records=100)
    env.get_configuration().set("execution.epoch.idle-interval", 100)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0)).with_idleness(Duration.of_millis(300))
    sink = CollectSink()
    src = source(kafka_broker, topic, bounded=False)
    env.from_source(src, strategy, "kafka").key_by(lambda v: v).process(WindowCount()).sink_to(sink)
    client = env.execute_async("idle partition")
    deadline = time.monotonic() + 90
    while len(sink.results) < 3 and time.monotonic() < deadline and not client.is_done():
        time.sleep(0.1)
    client.cancel()
    with pytest.raises(Exception):
        client.wait(60)
    fired = sorted(sink.results)
    assert len(fired) >= 3, f"windows did not fire while partition 2 was idle: {fired}"
    assert fired[:3] == [("k", base + 9_999, 100), ("k", base + 19_999, 100), ("k", base + 29_999, 100)]


@pytest.mark.slow
def test_without_idleness_an_empty_partition_holds_the_watermark(kafka_broker, make_env):
    topic = topic_name("held")
    kafka_broker.create_topic(topic, 2)
    base = 1_700_000_000_000 // 10_000 * 10_000
    produce(kafka_broker.bootstrap_servers, topic, ["k"] * 200, timestamps=[base + i * 100 for i in range(200)], partition_of=lambda i: 0)
    env = make_env(parallelism=1, max_records=100)
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(0))
    sink = CollectSink()
    env.from_source(source(kafka_broker, topic, bounded=False), strategy, "kafka").key_by(lambda v: v).process(WindowCount()).sink_to(sink)
    client = env.execute_async("held watermark")
    deadline = time.monotonic() + 60
    while client.progress().records_read < 200 and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(1.0)
    client.cancel()
    with pytest.raises(Exception):
        client.wait(60)
    assert client.progress().records_read == 200 and sink.results == []


# -- bad input ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_an_undeserializable_record_fails_the_job_once_naming_it(kafka_broker, make_env, tmp_path):
    topic = topic_name("bad")
    kafka_broker.create_topic(topic, 2)
    produce(kafka_broker.bootstrap_servers, topic, [b'{"n": 1}', b'{"n": 2}', b"{oops", b'{"n": 4}'], partition_of=lambda i: 1)
    schema = JsonRowDeserializationSchema.builder().type_info(Types.ROW_NAMED(["n"], [Types.INT()])).build()
    env = checkpointing_env(make_env, tmp_path, 2)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1_000_000, 10))
    env.from_source(source(kafka_broker, topic, deserializer=schema), None, "kafka").sink_to(CollectSink())
    t0 = time.monotonic()
    with pytest.raises(KafkaDeserializationError, match=rf"topic '{topic}', partition 1, offset 2 cannot be read by JsonRowDeserializationSchema"):
        env.execute("bad record")
    assert time.monotonic() - t0 < 60, "the job was restarted instead of failing"

    env = make_env(parallelism=2)
    sink = CollectSink()
    env.from_source(source(kafka_broker, topic, deserializer=schema, **{"deserialization.skip-errors": "true"}), None, "kafka").sink_to(sink)
    result = env.execute("skipping")
    assert sorted(r.n for r in sink.results) == [1, 2, 4]
    assert result.get_metrics()["kafka.numRecordsSkippedDeserialization"] == 1


@pytest.mark.slow
def test_an_unreachable_broker_fails_the_job_within_the_timeout(make_env):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    src = (KafkaSource.builder().set_bootstrap_servers(f"127.0.0.1:{port}").set_topics("t")
           .set_value_only_deserializer(SimpleStringSchema()).set_property("default.api.timeout.ms", "2000").build())
    env = make_env(parallelism=1)
    env.from_source(src, None, "kafka").sink_to(CollectSink())
    t0 = time.monotonic()
    with pytest.raises(KafkaUnreachableError, match=f"127.0.0.1:{port} did not answer"):
        env.execute("no broker")
    assert time.monotonic() - t0 < 30
