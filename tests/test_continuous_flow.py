"""The continuous runtime (DESIGN 4b) end to end: exactly-once sinks through a restart from a
checkpoint, barrier alignment with a fast and a slow input, checkpoints in flight, backpressure
from a stalled sink, and ``print()`` output that arrives while the job runs (issue 18).

Every wait has a deadline; jobs run on the session's ``local[2,4]`` (two slots).
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections import Counter

import pytest
from checkpoint_jobs import Counting, expected_outputs, expected_state, key_of, record
from test_checkpoints import completed
from test_continuous import continuous_env

from flowpoint import (
    DataGeneratorSource,
    DeliveryGuarantee,
    Encoder,
    FileSink,
    KeyedCoProcessFunction,
    KeyedProcessFunction,
    RestartStrategies,
    RollingPolicy,
    SinkFunction,
    ValueStateDescriptor,
)

pytestmark = pytest.mark.timeout(300)

EVENTS = 2_000
HERE = os.path.dirname(os.path.abspath(__file__))


def wait_for(condition, timeout: float, what: str, every: float = 0.02):
    """Poll ``condition`` until it is truthy (returns its value); fails the test after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            pytest.fail(f"timed out after {timeout} s waiting for {what}")
        time.sleep(every)


def counted(got: Counter, expected: Counter) -> str:
    return f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"


def counting_job(env, sink_builder, flag):
    """numbers (rate-limited, so checkpoints complete before the failure) -> keyed count that
    fails once at a record late in the input -> ``"key,n"`` strings -> the sink."""
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS, rate_limit_per_second=4000), source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting(fail_value=record(1_700), flag=flag, fail_times=1)).uid("counting")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(sink_builder).uid("out")
    )


EXPECTED_LINES = Counter(f"{k},{n}" for k, n in expected_outputs(EVENTS))


# -- 1. exactly-once and at-least-once sinks through a restart ----------------------------------


def read_committed(broker, topic: str, partitions: int) -> list[str]:
    """Every value of ``topic`` a ``read_committed`` consumer sees, up to the high watermarks."""
    from confluent_kafka import Consumer, TopicPartition
    from kafka_helpers import topic_name

    c = Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": topic_name("reader"), "isolation.level": "read_committed",
                  "enable.auto.commit": False, "log_level": 2, "fetch.wait.max.ms": 10})
    try:
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10, cached=False)[1] for p in range(partitions)}
        c.assign([TopicPartition(topic, p, 0) for p in range(partitions) if ends[p] > 0])
        out: list[str] = []
        todo = {p for p, e in ends.items() if e > 0}
        deadline = time.monotonic() + 60
        while todo and time.monotonic() < deadline:
            m = c.poll(1)
            if m is None or m.error():
                continue
            out.append(m.value().decode())
            if m.offset() >= ends[m.partition()] - 2:  # transaction markers take offsets too
                todo.discard(m.partition())
        while (m := c.poll(0.5)) is not None:  # what is left up to the ends
            if not m.error():
                out.append(m.value().decode())
        return out
    finally:
        c.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("guarantee", "backend"),
    [(DeliveryGuarantee.EXACTLY_ONCE, "hashmap"), (DeliveryGuarantee.EXACTLY_ONCE, "rocksdb"), (DeliveryGuarantee.AT_LEAST_ONCE, "hashmap")],
    ids=["exactly-once-hashmap", "exactly-once-rocksdb", "at-least-once-hashmap"],
)
def test_kafka_sink_through_a_restart_from_a_checkpoint(kafka_broker, make_env, tmp_path, guarantee, backend):
    """EXACTLY_ONCE: a read_committed consumer sees every result once (only completed
    checkpoints' transactions commit; the replayed segments are written again in new ones).
    AT_LEAST_ONCE: every result at least once."""
    from kafka_helpers import topic_name
    from test_kafka_sink import sink

    topic = topic_name("out")
    kafka_broker.create_topic(topic, 2)
    env = continuous_env(make_env, tmp_path, 2, backend)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    counting_job(env, sink(kafka_broker, topic, guarantee, prefix=topic_name("tx")), flag)
    result = env.execute(f"kafka {guarantee.name} on the continuous runtime")
    assert os.path.exists(flag), "the injected failure never happened"
    assert len(completed(result.get_checkpoint_stats())) >= 2
    got = Counter(read_committed(kafka_broker, topic, 2))
    if guarantee is DeliveryGuarantee.EXACTLY_ONCE:
        assert got == EXPECTED_LINES, counted(got, EXPECTED_LINES)
    else:
        assert set(got) == set(EXPECTED_LINES), counted(got, EXPECTED_LINES)
        assert all(got[line] >= n for line, n in EXPECTED_LINES.items())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_file_sink_through_a_restart_from_a_checkpoint(make_env, tmp_path, backend):
    """Finished part files hold every result exactly once: pieces of segments after the last
    completed checkpoint stay hidden and are written again by the replay."""
    from test_file_sink import visible

    out = tmp_path / "out"
    env = continuous_env(make_env, tmp_path, 2, backend)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    files = FileSink.for_row_format(str(out), Encoder.simple_string_encoder()).with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build()
    counting_job(env, files, flag)
    result = env.execute("file sink on the continuous runtime")
    assert os.path.exists(flag), "the injected failure never happened"
    assert len(completed(result.get_checkpoint_stats())) >= 2
    got = Counter(line for text in visible(out).values() for line in text.splitlines())
    assert got == EXPECTED_LINES, counted(got, EXPECTED_LINES)


# -- 2. barrier alignment: a fast and a hard rate-limited input ----------------------------------

FAST, SLOW = 8_000, 80  # records; both inputs last ~2 s at their rates
FAST_RATE, SLOW_RATE = 4_000, 40
PAIR_KEYS = 7
FAIL_SLOW = 30  # the slow input's record at which the job fails once (~1.5 s in, after several checkpoints)


def fast_record(i: int) -> tuple:
    return (i * 31) % PAIR_KEYS, "a", i


def slow_record(i: int) -> tuple:
    return (i * 17) % PAIR_KEYS, "b", i


def first_item(x: tuple) -> int:
    return x[0]


def _fail_once(value: tuple, flag: str | None) -> None:
    if flag and value[1] == "b" and value[2] == FAIL_SLOW and not os.path.exists(flag):
        open(flag, "w").close()
        msg = f"injected failure at slow record {value[2]}"
        raise RuntimeError(msg)


class _Tally:
    """Per key and input: a count and a sum in value state; emits ``(key, input, count)``."""

    def open(self, ctx):
        self.states = {side: (ctx.get_state(ValueStateDescriptor(f"count_{side}")), ctx.get_state(ValueStateDescriptor(f"sum_{side}")))
                       for side in ("a", "b")}

    def _add(self, value, key):
        _fail_once(value, self.flag)
        count, total = self.states[value[1]]
        n = (count.value() or 0) + 1
        count.update(n)
        total.update((total.value() or 0) + value[2])
        return key, value[1], n


class PairCounts(_Tally, KeyedCoProcessFunction):
    def __init__(self, flag: str | None = None):
        self.flag = flag

    def process_element1(self, value, ctx):
        yield self._add(value, ctx.get_current_key())

    def process_element2(self, value, ctx):
        yield self._add(value, ctx.get_current_key())


class UnionCounts(_Tally, KeyedProcessFunction):
    def __init__(self, flag: str | None = None):
        self.flag = flag

    def process_element(self, value, ctx):
        yield self._add(value, ctx.get_current_key())


def tally_reference() -> tuple[dict, list]:
    """The final state and the sorted outputs, computed sequentially in plain Python."""
    state: dict = {}
    outputs = []
    for value in [fast_record(i) for i in range(FAST)] + [slow_record(i) for i in range(SLOW)]:
        k, side, v = value
        count = state.setdefault(f"count_{side}", {})
        total = state.setdefault(f"sum_{side}", {})
        count[k] = count.get(k, 0) + 1
        total[k] = total.get(k, 0) + v
        outputs.append((k, side, count[k]))
    return state, sorted(outputs)


@pytest.mark.slow
@pytest.mark.parametrize("shape", ["connect", "union"])
@pytest.mark.parametrize("fail", [False, True], ids=["no-failure", "failure"])
def test_alignment_of_a_fast_and_a_slow_input_gives_exact_state_and_output(make_env, tmp_path, shape, fail):
    """Checkpoints every 100 ms complete while one input is 100 times slower than the other;
    the final state and output equal a sequential reference, also when the job fails after
    several checkpoints and restores from the last one (alignment makes the cut consistent)."""
    from flowpoint import CollectSink

    env = continuous_env(make_env, tmp_path, 2, "hashmap", interval_ms=100)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed") if fail else None
    fast = env.from_source(DataGeneratorSource(fast_record, count=FAST, rate_limit_per_second=FAST_RATE), source_name="fast").uid("fast")
    slow = env.from_source(DataGeneratorSource(slow_record, count=SLOW, rate_limit_per_second=SLOW_RATE), source_name="slow").uid("slow")
    if shape == "connect":
        counted_ = fast.connect(slow).key_by(first_item, first_item).process(PairCounts(flag)).uid("tally")
    else:
        counted_ = fast.union(slow).key_by(first_item).process(UnionCounts(flag)).uid("tally")
    sink = CollectSink()
    counted_.sink_to(sink).uid("collect")
    result = env.execute(f"{shape} of a fast and a slow input")
    if fail:
        assert os.path.exists(flag), "the injected failure never happened"
    stats = result.get_checkpoint_stats()
    assert len(completed(stats)) >= 5, [(s.checkpoint_id, s.status, s.failure_reason) for s in stats]
    assert not [s for s in stats if s.status == "FAILED" and not fail], [s.failure_reason for s in stats]
    want_state, want_outputs = tally_reference()
    assert result.get_keyed_state("tally") == want_state
    assert sorted(sink.results) == want_outputs


# -- sinks that take their time ------------------------------------------------------------------


class LinesSink(SinkFunction):
    """Appends ``"key,n"`` for each record to a file of its own under ``out_dir``; sleeps
    ``delay_s`` per record (a slow sink); the instance that first reaches ``stall_after``
    records (``marker`` created exclusively) stalls until ``release`` exists (at most 120 s)."""

    def __init__(self, out_dir: str, delay_s: float = 0.0, stall_after: int | None = None, marker: str = "", release: str = ""):
        self.out_dir, self.delay_s, self.stall_after, self.marker, self.release = out_dir, delay_s, stall_after, marker, release

    def open(self, runtime_context):
        self.seen = 0
        self.file = open(os.path.join(self.out_dir, f"part-{os.getpid()}-{threading.get_ident()}-{time.monotonic_ns()}"), "a")  # noqa: SIM115

    def invoke(self, value, context):
        self.file.write(f"{value[0]},{value[1]}\n")
        self.file.flush()
        self.seen += 1
        if self.delay_s:
            time.sleep(self.delay_s)
        if self.seen == self.stall_after:
            try:
                os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                return
            deadline = time.monotonic() + 120
            while not os.path.exists(self.release) and time.monotonic() < deadline:
                time.sleep(0.02)

    def close(self):
        self.file.close()


def sink_lines(out_dir) -> Counter:
    got: Counter = Counter()
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name)) as f:
            got.update(f.read().splitlines())
    return got


def lines_of(events: int) -> Counter:
    return Counter(f"{k},{n}" for k, n in expected_outputs(events))


# -- 3. several checkpoints in flight ------------------------------------------------------------


@pytest.mark.slow
def test_several_checkpoints_in_flight_while_the_sink_is_slow(make_env, tmp_path):
    """With max-concurrent-checkpoints 3 and a slow sink, the coordinator injects the next
    barriers before the earlier checkpoints complete: up to 3 are IN_PROGRESS at once, all of
    them complete, and the results are exact."""
    events = 1_500
    out = tmp_path / "out"
    out.mkdir()
    env = continuous_env(make_env, tmp_path, 2, "hashmap", interval_ms=20, max_records=50)
    env.get_configuration().set("execution.checkpointing.max-concurrent-checkpoints", 3)
    (
        # read over 0.75 s, twice as fast as the sinks write: barriers queue behind records, and the
        # periodic checkpoints come before the sources end (after that only the final one follows)
        env.from_source(DataGeneratorSource(record, count=events, rate_limit_per_second=2_000), source_name="numbers").uid("numbers")
        .key_by(key_of).process(Counting()).uid("counting")
        .add_sink(LinesSink(str(out), delay_s=0.002)).uid("slow")
    )
    client = env.execute_async("checkpoints in flight")
    most_in_flight = 0
    deadline = time.monotonic() + 120
    while not client.is_done() and time.monotonic() < deadline:
        in_progress = [s for s in client.get_checkpoint_stats() if s.status == "IN_PROGRESS"]
        most_in_flight = max(most_in_flight, len(in_progress))
        time.sleep(0.005)
    result = client.wait(60)
    stats = result.get_checkpoint_stats()
    assert most_in_flight >= 2, "never more than one checkpoint in flight"
    assert most_in_flight <= 3
    assert all(s.status == "COMPLETED" for s in stats), [(s.checkpoint_id, s.status, s.failure_reason) for s in stats]
    assert result.get_keyed_state("counting", "count") == expected_state(events)["count"]
    assert sink_lines(out) == lines_of(events)


# -- 4. backpressure -----------------------------------------------------------------------------


def read_so_far(client, starts: list[int]) -> int:
    """Records the driver has assigned to the sources so far (the split positions advance when
    a read is assigned: at most two assignments ahead of what the source subtasks have read)."""
    return sum(s.position - starts[s.index] for s in client.progress().splits)


@pytest.mark.slow
@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_stalled_sink_stops_the_sources_and_the_job_recovers_exactly(make_env, tmp_path, parallelism):
    """A sink instance stalls (~6 s, released by the test): its input channels fill, their
    senders block, and the sources stop reading: what they have read stops growing and stays far
    below the input. No checkpoint completes while the barrier waits behind the stall; once the
    sink goes on, the pending checkpoint completes and the job ends with exact state and output.

    In one slot (parallelism 1) the records in flight are bounded by the settings: the stalled
    chain's gate (``buffers-per-channel`` frames of at most ``buffer-max-batches`` batches of at
    most one read), a frame in the blocked sender's hands and one pending, and two reads ahead.
    Between slots the channel is a TCP connection, and the kernel's socket buffers hold more
    than the gate (``ss`` showed ~155 KB queued on one channel during the stall, of the order of
    10,000 of these records): parallelism 2 is held to a looser bound."""
    from flowpoint.connectors.source import split_range

    events, stall_after = (20_000, 2_000) if parallelism == 1 else (60_000, 2_000)
    buffers, batches, per_read = 2, 4, 200
    out = tmp_path / "out"
    out.mkdir()
    marker, release = str(tmp_path / "stalled"), str(tmp_path / "release")
    env = continuous_env(make_env, tmp_path, parallelism, "hashmap", interval_ms=100, max_records=per_read)
    env.get_configuration().set("taskmanager.network.memory.buffers-per-channel", buffers)
    env.get_configuration().set("execution.buffer-max-batches", batches)
    (
        env.from_source(DataGeneratorSource(record, count=events), source_name="numbers").uid("numbers")
        .key_by(key_of).process(Counting()).uid("counting")
        .add_sink(LinesSink(str(out), stall_after=stall_after, marker=marker, release=release)).uid("stalling")
    )
    starts = [a for a, _ in split_range(0, events, parallelism)]
    client = env.execute_async("a stalled sink")
    try:
        wait_for(lambda: os.path.exists(marker) or client.is_done(), 120, "the sink to stall")
        assert not client.is_done(), "the job ended before the sink stalled"
        time.sleep(2.0)  # the channels fill up and the senders block
        read_then = read_so_far(client, starts)
        done_then = completed(client.get_checkpoint_stats())
        time.sleep(4.0)
        read_now = read_so_far(client, starts)
        done_now = completed(client.get_checkpoint_stats())
        assert read_now == read_then, f"the sources went on reading while the sink stalled: {read_then} -> {read_now}"
        if parallelism == 1:
            in_flight = parallelism * (buffers + 2) * batches * per_read + 2 * per_read
            assert read_now <= stall_after + in_flight, f"{read_now} records read while the sink stalled after {stall_after}"
        else:
            # the kernel's share varies from run to run (19,000 to 34,000 records read here): the
            # sources stopped, well before the end of the input
            assert read_now < events * 3 // 4, f"{read_now} of {events} records read while the sink stalled"
        assert done_now == done_then, "a checkpoint completed while its barrier was stuck behind the stalled sink"
    finally:
        open(release, "w").close()
    result = client.wait(120)
    stats = result.get_checkpoint_stats()
    assert len(completed(stats)) > len(done_now), "no checkpoint completed after the sink recovered"
    assert not [s for s in stats if s.status == "FAILED"], [s.failure_reason for s in stats]
    assert result.get_keyed_state("counting", "count") == expected_state(events)["count"]
    assert sink_lines(out) == lines_of(events)
    print(f"parallelism {parallelism}: {read_now} of {events} records read while the sink stalled")  # noqa: T201 - shown with -s


@pytest.mark.slow
def test_a_checkpoint_stuck_behind_a_stalled_sink_expires_and_later_ones_complete(make_env, tmp_path):
    """``execution.checkpointing.timeout`` holds for barriers in flight: the checkpoint whose
    barrier waits behind a stalled sink fails as expired (naming the subtasks it waited for)
    within the timeout, not when the sink recovers; the job goes on (failures tolerated), the
    checkpoints after the stall complete, and state and output are exact."""
    events, stall_after = 20_000, 2_000
    out = tmp_path / "out"
    out.mkdir()
    marker, release = str(tmp_path / "stalled"), str(tmp_path / "release")
    env = continuous_env(make_env, tmp_path, 1, "hashmap", interval_ms=100, max_records=200)
    env.get_configuration().set("execution.checkpointing.timeout", 1000)
    env.get_configuration().set("execution.checkpointing.tolerable-failed-checkpoints", 1000)
    env.get_configuration().set("taskmanager.network.memory.buffers-per-channel", 2)  # the sources stop early
    env.get_configuration().set("execution.buffer-max-batches", 4)
    (
        env.from_source(DataGeneratorSource(record, count=events), source_name="numbers").uid("numbers")
        .key_by(key_of).process(Counting()).uid("counting")
        .add_sink(LinesSink(str(out), stall_after=stall_after, marker=marker, release=release)).uid("stalling")
    )
    client = env.execute_async("an expiring checkpoint")
    try:
        wait_for(lambda: os.path.exists(marker) or client.is_done(), 120, "the sink to stall")
        assert not client.is_done(), "the job ended before the sink stalled"
        expired = wait_for(lambda: [s for s in client.get_checkpoint_stats() if s.status == "FAILED"], 10, "a checkpoint to expire")
        assert "expired after 1000 ms" in expired[0].failure_reason
        assert "had not acknowledged its barrier" in expired[0].failure_reason
        assert not client.is_done()
    finally:
        open(release, "w").close()
    result = client.wait(120)
    stats = result.get_checkpoint_stats()
    last_failed = max(s.checkpoint_id for s in stats if s.status == "FAILED")
    assert [cid for cid in completed(stats) if cid > last_failed], "no checkpoint completed after the sink recovered"
    assert not [s for s in stats if s.status == "IN_PROGRESS"]
    assert result.get_keyed_state("counting", "count") == expected_state(events)["count"]
    assert sink_lines(out) == lines_of(events)


# -- 5. print() while the job runs ---------------------------------------------------------------


@pytest.mark.slow
def test_print_output_arrives_while_the_job_runs(tmp_path):
    """``print()`` on the continuous runtime writes each line within a second of the source's
    read of its record, not when a checkpoint or the job ends: a job printing 5 records a second
    for 6 s, in a subprocess whose stdout is read line by line with the time each line came."""
    count, rate = 30, 5
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.dirname(HERE), HERE, os.environ.get("PYTHONPATH", "")]),
               FLOWPOINT_HOME=str(tmp_path / "home"), PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "continuous_print_job.py"), str(count), str(rate)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, cwd=str(tmp_path))
    lines: queue.Queue = queue.Queue()

    def pump():
        for line in proc.stdout:
            lines.put((time.time(), line.rstrip("\n")))
        lines.put(None)

    threading.Thread(target=pump, daemon=True).start()
    got = []
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                item = lines.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                pytest.fail(f"the job printed {len(got)} of {count} lines within 180 s")
            if item is None:
                break
            arrived, line = item
            m = re.fullmatch(r"tick (\d+) (\d+\.\d+)", line)
            if m:
                got.append((int(m[1]), float(m[2]), arrived))
        assert proc.wait(60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert sorted(i for i, _, _ in got) == list(range(count))
    delays = sorted(arrived - read for _, read, arrived in got)
    assert delays[-1] < 1.0, f"lines came up to {delays[-1]:.2f} s after their records were read (median {delays[len(delays) // 2]:.3f} s)"
    first, last = min(a for _, _, a in got), max(a for _, _, a in got)
    assert last - first >= 3.0, f"the lines came within {last - first:.2f} s: together, not as the job ran"
    print(f"print delays: median {delays[len(delays) // 2] * 1000:.0f} ms, max {delays[-1] * 1000:.0f} ms; lines over {last - first:.1f} s")  # noqa: T201
