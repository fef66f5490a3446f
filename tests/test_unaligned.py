"""Unaligned checkpoints on the continuous runtime (execution.checkpointing.unaligned).

A rate-limited source feeds a keyed count whose output goes through a slow map (each record
takes milliseconds), so every channel in front of the map is full and its senders wait
(backpressure). Aligned, a checkpoint's barrier queues behind those frames and the checkpoint
takes as long as draining them; unaligned, the barrier overtakes them and they are stored with
the checkpoint (channel state), to be replayed on restore, at the same or another parallelism.
"""

from __future__ import annotations

import json
import os
import statistics
import time
from collections import Counter

import pytest

from flowpoint import (
    DataGeneratorSource,
    Duration,
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    RestartStrategies,
    ValueStateDescriptor,
)
from flowpoint.api.watermarks import TimestampAssigner
from flowpoint.connectors.sinks import CollectSink
from flowpoint.errors import FlowpointError

pytestmark = pytest.mark.slow

KEYS = 7


def record(i):
    return (f"k{i % KEYS}", i)


class Slow:
    """A map that takes ``ms`` per record; raises once at record ``fail_at`` if ``flag`` is
    missing (a recoverable failure), or once a subtask has mapped ``stop_after`` records (the
    job fails: no restart)."""

    def __init__(self, ms: float, flag: str | None = None, fail_at: int = -1, stop_after: int = -1):
        self.ms, self.flag, self.fail_at, self.stop_after = ms, flag, fail_at, stop_after
        self.mapped = 0

    def __call__(self, v):
        time.sleep(self.ms / 1000)
        self.mapped += 1
        if v[1] == self.fail_at and self.flag and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            msg = f"injected failure at record {v[1]}"
            raise RuntimeError(msg)
        if self.mapped == self.stop_after:
            msg = "stop here"
            raise RuntimeError(msg)
        return v


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield value[0], value[1], n


def job(make_env, tmp_path, *, unaligned: bool, count: int, rate: int, slow_ms: float, parallelism: int = 2, timeout_ms: int = 0, **slow):
    env = make_env(
        parallelism, execution_runtime="continuous", execution_progress_interval=0, state_checkpoints_dir=f"file://{tmp_path}/ck",
    )
    env.get_configuration().set("state.checkpoints.num-retained", 20)
    env.enable_checkpointing(300)
    # two frames per channel: the queues hold less than the job's backlog
    env.get_configuration().set("taskmanager.network.memory.buffers-per-channel", 2)
    config = env.get_checkpoint_config()
    config.set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    if unaligned:
        config.enable_unaligned_checkpoints()
        config.set_alignment_timeout(Duration.of_millis(timeout_ms))
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(record, count=count, rate_limit_per_second=rate), source_name="gen").uid("gen")
        .key_by(lambda v: v[0]).process(Count()).uid("count")
        .map(Slow(slow_ms, **slow)).uid("slow")
        .sink_to(sink).uid("sink")
    )
    return env, sink


def completed(stats):
    return [s for s in stats if s.status == "COMPLETED" and s.kind == "checkpoint"]


def during_input(stats):
    """The completed checkpoints but the final one (taken once every record was processed: it
    waits for the queues to drain whatever the mode, as Flink's final checkpoint)."""
    done = completed(stats)
    return done[:-1]


def test_unaligned_checkpoints_complete_under_backpressure_where_aligned_ones_wait(make_env, tmp_path, capfd):
    # the slow map takes 4 ms a record (500/s over 2 subtasks); the source offers 2,000/s
    env, sink = job(make_env, tmp_path / "u", unaligned=True, count=2_400, rate=2_000, slow_ms=4)
    result = env.execute("unaligned")
    assert Counter(v[1] for v in sink.results) == Counter(range(2_400))
    assert dict(result.get_keyed_state("count", "count")) == dict(Counter(f"k{i % KEYS}" for i in range(2_400)))
    unaligned = during_input(result.get_checkpoint_stats())
    assert len(unaligned) >= 3, [(s.status, s.failure_reason) for s in result.get_checkpoint_stats()]
    # records were in flight and stored: the barriers overtook them
    assert any(s.channel_state_size > 0 for s in unaligned)
    assert "unaligned checkpoints: barriers overtake the records in flight" in capfd.readouterr().err

    env, sink = job(make_env, tmp_path / "a", unaligned=False, count=2_400, rate=2_000, slow_ms=4)
    result = env.execute("aligned")
    assert Counter(v[1] for v in sink.results) == Counter(range(2_400))
    aligned = during_input(result.get_checkpoint_stats())
    u_ms = statistics.median(s.end_to_end_ms for s in unaligned)
    a_ms = statistics.median(s.end_to_end_ms for s in aligned) if aligned else float("inf")
    # aligned: each barrier waits for the frames queued before the slow map (about a second
    # and more); unaligned ones complete in a fraction of that
    assert u_ms * 3 < a_ms, (u_ms, a_ms, len(unaligned), len(aligned))
    assert u_ms < 1_000, u_ms


def test_an_alignment_timeout_turns_checkpoints_unaligned_only_once_their_barriers_wait_that_long(make_env, tmp_path):
    # 150 ms: every checkpoint under this backpressure times out, goes unaligned and completes
    env, sink = job(make_env, tmp_path / "short", unaligned=True, count=2_400, rate=2_000, slow_ms=4, timeout_ms=150)
    result = env.execute("alignment timeout 150 ms")
    assert Counter(v[1] for v in sink.results) == Counter(range(2_400))
    assert dict(result.get_keyed_state("count", "count")) == dict(Counter(f"k{i % KEYS}" for i in range(2_400)))
    short = during_input(result.get_checkpoint_stats())
    assert short and any(s.channel_state_size > 0 for s in short)
    # the timeout, then the item being processed when the barrier came ahead (a batch of
    # records at 4 ms each), then the upload
    assert statistics.median(s.end_to_end_ms for s in short) < 2_000, [s.end_to_end_ms for s in short]
    # 60 s: no checkpoint waits that long; they stay aligned and store nothing in flight
    env, sink = job(make_env, tmp_path / "long", unaligned=True, count=2_400, rate=2_000, slow_ms=4, timeout_ms=60_000)
    result = env.execute("alignment timeout 60 s")
    assert Counter(v[1] for v in sink.results) == Counter(range(2_400))
    assert all(s.channel_state_size == 0 for s in completed(result.get_checkpoint_stats()))


def test_a_failure_restores_the_in_flight_records_and_the_output_is_exact(make_env, tmp_path):
    flag = str(tmp_path / "failed")
    env, sink = job(make_env, tmp_path, unaligned=True, count=2_500, rate=2_000, slow_ms=3, flag=flag, fail_at=1_800)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    result = env.execute("unaligned, one failure")
    assert os.path.exists(flag)
    # exactly once: the sink's committed output has every record once, and each key's counts
    # run 1..n without a gap or a repeat (a lost in-flight record would leave a gap, a replayed
    # one twice would repeat a count)
    assert Counter(v[1] for v in sink.results) == Counter(range(2_500))
    per_key: dict[str, list[int]] = {}
    for k, _, n in sink.results:
        per_key.setdefault(k, []).append(n)
    for k, ns in per_key.items():
        assert sorted(ns) == list(range(1, len(ns) + 1)), k
    assert dict(result.get_keyed_state("count", "count")) == {k: len(ns) for k, ns in per_key.items()}
    assert any(s.channel_state_size > 0 for s in completed(result.get_checkpoint_stats()))


@pytest.mark.parametrize(("before", "parallelism"), [(2, 1), (1, 2)])
def test_a_retained_unaligned_checkpoint_restores_at_another_parallelism(make_env, tmp_path, before, parallelism):
    count = 3_000
    env, _ = job(make_env, tmp_path, unaligned=True, count=count, rate=2_000, slow_ms=4, stop_after=600, parallelism=before)
    env.set_restart_strategy(RestartStrategies.no_restart())
    with pytest.raises(FlowpointError):
        env.execute("stops at 1500")
    job_dirs = [d for d in (tmp_path / "ck").iterdir() if d.is_dir()]
    assert len(job_dirs) == 1
    chks = sorted((int(n.name[4:]), n) for n in job_dirs[0].iterdir() if n.name.startswith("chk-") and (n / "_metadata").exists())
    with_flight = [(i, d) for i, d in chks if json.loads((d / "_metadata").read_text()).get("channel_state")]
    assert with_flight, "no retained checkpoint holds records in flight"
    chk = with_flight[-1][1]
    meta = json.loads((chk / "_metadata").read_text())
    assert meta["stats"]["channel_state_items"] > 0

    env2, sink2 = job(make_env, tmp_path / "second", unaligned=True, count=count, rate=20_000, slow_ms=0, parallelism=parallelism)
    env2.get_configuration().set("execution.savepoint.path", str(chk))
    result = env2.execute("restored")
    # the keyed counts are exact: the state at the cut, the in-flight records replayed (routed
    # by key group to their new owners) and the rest of the source after the cut's positions
    assert dict(result.get_keyed_state("count", "count")) == dict(Counter(f"k{i % KEYS}" for i in range(count)))
    # the restored run emits each key's counts from the cut on, none missing, none twice: the
    # in-flight records replayed and the rest of the source after the cut's positions
    assert max(Counter(v[1] for v in sink2.results).values()) == 1
    final = Counter(f"k{i % KEYS}" for i in range(count))
    for k in final:
        ns = sorted(n for key, _, n in sink2.results if key == k)
        assert ns == list(range(ns[0], final[k] + 1)), k


def test_the_epoch_runtime_refuses_an_unaligned_checkpoint_naming_the_runtime(make_env, tmp_path):
    env, _ = job(make_env, tmp_path, unaligned=True, count=3_000, rate=2_000, slow_ms=4, stop_after=600)
    env.set_restart_strategy(RestartStrategies.no_restart())
    with pytest.raises(FlowpointError):
        env.execute("stops at 1500")
    job_dir = next(d for d in (tmp_path / "ck").iterdir() if d.is_dir())
    chk = next(
        d for d in sorted(job_dir.iterdir(), reverse=True)
        if d.name.startswith("chk-") and (d / "_metadata").exists() and json.loads((d / "_metadata").read_text()).get("channel_state")
    )
    env2 = make_env(2, execution_runtime="epoch")
    env2.get_configuration().set("execution.savepoint.path", str(chk))
    env2.from_source(DataGeneratorSource(record, count=10), source_name="gen").uid("gen").key_by(lambda v: v[0]).process(Count()).uid("count").map(
        Slow(0),
    ).uid("slow").sink_to(CollectSink()).uid("sink")
    with pytest.raises(FlowpointError, match="unaligned.*continuous runtime"):
        env2.execute("epochs")


def test_unaligned_with_concurrent_checkpoints_is_refused_naming_both_settings(make_env):
    env = make_env(2, execution_runtime="continuous")
    env.get_configuration().set("execution.checkpointing.max-concurrent-checkpoints", 2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    env.from_collection([1, 2, 3]).sink_to(CollectSink())
    with pytest.raises(FlowpointError, match="max-concurrent-checkpoints"):
        env.execute("refused")


def test_an_epoch_job_says_unaligned_checkpoints_do_not_apply_to_it(make_env, caplog):
    env = make_env(2, execution_runtime="epoch")
    env.enable_checkpointing(300)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    sink = CollectSink()
    env.from_collection(list(range(10))).map(lambda x: x + 1).sink_to(sink)
    with caplog.at_level("WARNING", logger="flowpoint"):
        env.execute("epochs")
    assert sorted(sink.results) == list(range(1, 11))
    assert any("do not apply to the epoch runtime" in r.getMessage() for r in caplog.records)


def restarting_unaligned_env(make_env, checkpoints: str, interval_ms: int):
    """Continuous, parallelism 2, unaligned checkpoints every ``interval_ms``, two frames per
    channel (the queues fill), two restarts 100 ms apart."""
    env = make_env(2, execution_runtime="continuous", state_checkpoints_dir=checkpoints)
    env.enable_checkpointing(interval_ms)
    env.get_configuration().set("taskmanager.network.memory.buffers-per-channel", 2)
    env.get_checkpoint_config().enable_unaligned_checkpoints()
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    return env


class Stamped:
    """Record ``i``: ``(key, i)`` at event time ``i * 10`` ms (in order: no record is late in an
    uninterrupted run)."""

    def __call__(self, i):
        return (f"k{i % KEYS}", i)


class Tens(TimestampAssigner):
    """Record ``i``'s event time: ``i * 10`` ms."""

    def extract_timestamp(self, value, record_timestamp):
        return value[1] * 10


class SlowPass(KeyedProcessFunction):
    """Passes records on, ``ms`` each (the stage in front of the windows backpressures its
    input); fails once at record ``fail_at`` when ``flag`` is missing."""

    def __init__(self, ms: float, flag: str, fail_at: int):
        self.ms, self.flag, self.fail_at = ms, flag, fail_at

    def process_element(self, value, ctx):
        time.sleep(self.ms / 1000)
        if value[1] == self.fail_at and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            msg = f"injected failure at record {value[1]}"
            raise RuntimeError(msg)
        yield value


def test_event_time_windows_restored_from_unaligned_checkpoints_lose_no_record_to_lateness(make_env, tmp_path):
    """A restored subtask replays the records that were in flight to it before it reads any
    input or moves any watermark (the restored watermarks are the senders', which may have run
    ahead of those records): every record lands in its window as in an uninterrupted run, none
    turns late."""
    from flowpoint import OutputTag, TumblingEventTimeWindows, WatermarkStrategy

    count = 2_400
    env = restarting_unaligned_env(make_env, f"file://{tmp_path}/ck2", 300)
    late = OutputTag("late")
    sink, late_sink = CollectSink(), CollectSink()
    windows = (
        env.from_source(DataGeneratorSource(Stamped(), count=count, rate_limit_per_second=2_000), source_name="gen").uid("gen")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Tens())).uid("ts")
        .key_by(lambda v: v[0]).process(SlowPass(3, str(tmp_path / "failed"), 1_900)).uid("slow")
        .key_by(lambda v: v[0]).window(TumblingEventTimeWindows.of(Duration.of_millis(1_000)))
        .side_output_late_data(late)
        .reduce(lambda a, b: (a[0], a[1] + b[1])).uid("windows")
    )
    windows.map(lambda v: v).uid("out").sink_to(sink).uid("sink")
    windows.get_side_output(late).sink_to(late_sink).uid("late-sink")
    result = env.execute("event time, unaligned, one failure")
    assert (tmp_path / "failed").exists()
    assert any(s.channel_state_size > 0 for s in completed(result.get_checkpoint_stats()))
    assert late_sink.results == []  # no record turned late after the restore
    expected: Counter = Counter()
    for i in range(count):
        expected[(f"k{i % KEYS}", i * 10 // 1_000)] += i
    got = Counter()
    for key, total in sink.results:
        got[key] += total
    assert sum(got.values()) == sum(expected.values())
    assert sorted(v for _, v in sink.results) == sorted(expected.values())


class OneSideStamped:
    """Record ``i``: ``(key, i)`` at event time ``i * 10`` ms, its key one of three whose key
    groups all belong to partition 0 of 2: partition 1 of the keyed stage gets no record."""

    def __init__(self, keys):
        self.keys = keys

    def __call__(self, i):
        return (self.keys[i % len(self.keys)], i)


def test_windows_behind_a_finished_source_fire_after_a_restore_whatever_each_subtask_had_sent(make_env, tmp_path):
    """All keys go to one of the two slow subtasks, so the other receives the source's final
    watermark at once and sends it on, while the busy one's barriers overtake its queue. A
    checkpoint then holds a low mark for the stage's channels to the windows (the lowest of its
    subtasks'), and the restored idle subtask, already at +infinity, must send +infinity again:
    without that, the windows never fired after the restore and the job FINISHED with most of
    its results missing (found under load in CI)."""
    from flowpoint import TumblingEventTimeWindows, WatermarkStrategy
    from flowpoint.state.keygroups import assign_to_key_group, compute_operator_index_for_key_group

    keys = [k for k in (f"u{i}" for i in range(100)) if compute_operator_index_for_key_group(128, 2, assign_to_key_group(k, 128)) == 0][:3]
    count = 1_200
    env = restarting_unaligned_env(make_env, f"file://{tmp_path}/ck", 200)
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(OneSideStamped(keys), count=count, rate_limit_per_second=4_000), source_name="gen").uid("gen")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Tens())).uid("ts")
        .key_by(lambda v: v[0]).process(SlowPass(3, str(tmp_path / "failed"), 1_000)).uid("slow")
        .key_by(lambda v: v[0]).window(TumblingEventTimeWindows.of(Duration.of_millis(1_000)))
        .reduce(lambda a, b: (a[0], a[1] + b[1])).uid("windows")
        .sink_to(sink).uid("sink")
    )
    result = env.execute("windows behind a finished source, restored")
    assert (tmp_path / "failed").exists()
    assert completed(result.get_checkpoint_stats()), "no checkpoint completed before the failure"
    expected: Counter = Counter()
    for i in range(count):
        expected[keys[i % 3]] += i
    got: Counter = Counter()
    for key, total in sink.results:
        got[key] += total
    assert got == expected
    assert len(sink.results) == 3 * (count * 10 // 1_000)


class Checked(KeyedProcessFunction):
    """A slow event-time consumer (its input queues hold the in-flight records at every
    barrier) that reports, per record, whether it came at or behind the current watermark
    (late) and whether it came before an earlier record of the same key from the same source
    split (a channel's order broken)."""

    def __init__(self, ms: float, flag: str, fail_at: int, half: int):
        self.ms, self.flag, self.fail_at, self.half = ms, flag, fail_at, half

    def open(self, ctx):
        from flowpoint import MapStateDescriptor

        self.last = ctx.get_map_state(MapStateDescriptor("last"))

    def process_element(self, value, ctx):
        time.sleep(self.ms / 1000)
        if value[1] == self.fail_at and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            msg = f"injected failure at record {value[1]}"
            raise RuntimeError(msg)
        wm = ctx.timer_service().current_watermark()
        if ctx.timestamp() <= wm:
            yield ("late", value[1], wm)
        split = int(value[1] >= self.half)
        prev = self.last.get(split)
        if prev is not None and value[1] <= prev:
            yield ("order", value[1], prev)
        self.last.put(split, value[1])
        yield ("ok", value[1], 0)


def test_a_restored_subtask_replays_in_flight_records_in_channel_order_before_its_watermark_moves(make_env, tmp_path):
    """The restored watermark of a subtask is what it had seen at its cut, not what its senders
    had sent (those marks ran ahead of the records in flight): no replayed record is behind the
    watermark, and each channel's records come in the order they were sent (the receiver's
    recorded frames before the sender's unsent ones)."""
    from flowpoint import WatermarkStrategy

    count = 2_400
    env = restarting_unaligned_env(make_env, f"file://{tmp_path}/ck", 300)
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(Stamped(), count=count, rate_limit_per_second=2_000), source_name="gen").uid("gen")
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(Tens())).uid("ts")
        .key_by(lambda v: v[0]).process(Checked(3, str(tmp_path / "failed"), 1_900, count // 2)).uid("checked")
        .sink_to(sink).uid("sink")
    )
    result = env.execute("event time, unaligned, one failure, checked")
    assert (tmp_path / "failed").exists()
    assert any(s.channel_state_size > 0 for s in completed(result.get_checkpoint_stats()))
    assert [r for r in sink.results if r[0] != "ok"] == []
    assert Counter(r[1] for r in sink.results) == Counter(range(count))
