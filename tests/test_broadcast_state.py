"""Broadcast state: every parallel instance sees the same broadcast records and holds the same
state; keyed and non-keyed; read-only in process_element; checkpointed and restored."""

from __future__ import annotations

import pytest

from flowpoint import CollectSink, MapStateDescriptor, ValueStateDescriptor
from flowpoint.api.broadcast import BroadcastProcessFunction, KeyedBroadcastProcessFunction
from flowpoint.api.operator_state import BROADCAST, redistribute
from flowpoint.errors import JobExecutionError, StateAccessError, UserFunctionError

RULES = MapStateDescriptor("rules")


class Threshold(BroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        name, limit = value
        ctx.get_broadcast_state(RULES).put(name, limit)

    def process_element(self, value, ctx):
        limit = ctx.get_broadcast_state(RULES).get("min")
        if limit is not None and value >= limit:
            yield value


def test_broadcast_rules_reach_every_instance(make_env):
    env = make_env(parallelism=3)
    rules = env.from_collection([("min", 15)]).broadcast(RULES)
    sink = CollectSink()
    env.from_sequence(0, 29).connect(rules).process(Threshold()).sink_to(sink)
    env.execute("broadcast")
    # every instance applied the rule before its records (broadcast input first in an epoch)
    assert sorted(sink.results) == list(range(15, 30))


class CountPerKeyWithReset(KeyedBroadcastProcessFunction):
    """Counts per key; a broadcast "reset" clears every key's count via apply_to_keyed_state."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("resets", (ctx.get_broadcast_state(RULES).get("resets") or 0) + 1)
        ctx.apply_to_keyed_state(ValueStateDescriptor("count"), lambda key, state: state.clear())

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n, ctx.get_broadcast_state(RULES).get("resets")


def test_keyed_broadcast_applies_to_keyed_state(make_env):
    env = make_env(parallelism=2)
    resets = env.from_collection(["reset"]).broadcast(RULES)
    sink = CollectSink()
    env.from_collection(["a", "b", "a"]).key_by(lambda w: w).connect(resets).process(CountPerKeyWithReset()).uid("c").sink_to(sink)
    result = env.execute("keyed broadcast")
    assert sorted(sink.results) == [("a", 1, 1), ("a", 2, 1), ("b", 1, 1)]
    assert result.get_keyed_state("c", "count") == {"a": 2, "b": 1}


class Writes(BroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        pass

    def process_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("x", value)


def test_broadcast_state_is_read_only_for_main_records(make_env):
    env = make_env(parallelism=1)
    env.from_collection([1]).connect(env.from_collection([0]).broadcast(RULES)).process(Writes()).sink_to(CollectSink())
    with pytest.raises((StateAccessError, UserFunctionError, JobExecutionError), match="read-only"):
        env.execute("read only")


def test_broadcast_state_is_given_whole_to_every_instance_on_restore():
    saved = {0: {"rules": (BROADCAST, [("min", 5)])}, 1: {"rules": (BROADCAST, [("min", 5)])}}
    assert all(v["rules"] == (BROADCAST, [("min", 5)]) for v in redistribute(saved, 4).values())


class ThresholdFailingOnce(Threshold):
    def __init__(self, flag: str):
        self.flag = flag

    def process_element(self, value, ctx):
        import os

        if value == 700 and not os.path.exists(self.flag):
            with open(self.flag + ".n", "a") as f:
                f.write("x")
            if os.path.getsize(self.flag + ".n") >= 1:  # once: Spark does not retry it, the job restarts
                open(self.flag, "w").close()
            msg = "injected failure"
            raise RuntimeError(msg)
        yield from super().process_element(value, ctx)


@pytest.mark.slow
@pytest.mark.parametrize("parallelism", [1, 3])
def test_broadcast_state_survives_a_failure(make_env, tmp_path, parallelism):
    import os

    from flowpoint import DataGeneratorSource, RestartStrategies

    env = make_env(parallelism=parallelism, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    rules = env.from_collection([("min", 15)]).broadcast(RULES)
    sink = CollectSink()
    numbers = env.from_source(DataGeneratorSource(lambda i: i, count=1_000), source_name="numbers")
    numbers.connect(rules).process(ThresholdFailingOnce(flag)).uid("threshold").sink_to(sink)
    env.execute("broadcast failure")
    assert os.path.exists(flag)
    # the rule came in the first epoch; after the restore every instance still has it
    assert sorted(sink.results) == list(range(15, 1_000))


class RememberRules(BroadcastProcessFunction):
    """Reports, on its first main record after starting, the broadcast state it started with."""

    def open(self, ctx):
        self.index = ctx.get_index_of_this_subtask()
        self.reported = False

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put(value, True)

    def process_element(self, value, ctx):
        if not self.reported:
            self.reported = True
            yield self.index, sorted(ctx.get_broadcast_state(RULES).keys())


def test_broadcast_state_after_a_savepoint_and_rescale(make_env, tmp_path):
    import time

    from flowpoint import DataGeneratorSource

    def build(env):
        sink = CollectSink()
        rules = env.from_collection(["r1", "r2"]).uid("rules").broadcast(RULES)
        numbers = env.from_source(DataGeneratorSource(lambda i: i, count=None, rate_limit_per_second=500), source_name="n").uid("n")
        numbers.rebalance().connect(rules).process(RememberRules()).uid("remember").sink_to(sink).uid("sink")
        return sink

    env = make_env(parallelism=2, max_records=50)
    sink = build(env)
    client = env.execute_async("before")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(set(map(_frozen, sink.results))) < 2:
        time.sleep(0.1)
    path = client.trigger_savepoint(str(tmp_path / "savepoints"))
    client.cancel()
    try:
        client.wait(60)
    except JobExecutionError:
        pass
    assert sorted(set(map(_frozen, sink.results))) == [(0, ("r1", "r2")), (1, ("r1", "r2"))]

    env = make_env(parallelism=3, max_records=50)
    env.get_configuration().set("execution.savepoint.path", path)
    sink = build(env)
    client = env.execute_async("after")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(set(map(_frozen, sink.results))) < 3:
        time.sleep(0.1)
    client.cancel()
    try:
        client.wait(60)
    except JobExecutionError:
        pass
    # three instances now, each with the whole broadcast state (the rules source had ended)
    assert sorted(set(map(_frozen, sink.results))) == [(0, ("r1", "r2")), (1, ("r1", "r2")), (2, ("r1", "r2"))]


def _frozen(report):
    index, rules = report
    return index, tuple(rules)


class AlertAfterQuiet(KeyedBroadcastProcessFunction):
    """PyFlink's form: each record registers an event-time timer 10 ms after its timestamp; the
    timer reports its key, its timestamp, the domain, the broadcast rule (read-only) and the
    clocks, and registers no more."""

    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("label", value)

    def process_element(self, value, ctx):
        service = ctx.timer_service()
        assert service.current_watermark() == ctx.current_watermark()
        assert ctx.current_processing_time() > 0
        service.register_event_time_timer(ctx.timestamp() + 10)
        return []

    def on_timer(self, timestamp, ctx):
        from flowpoint import TimeDomain

        assert ctx.time_domain() == TimeDomain.EVENT_TIME
        assert ctx.timestamp() == timestamp and ctx.current_watermark() >= timestamp
        yield ctx.get_current_key(), timestamp, ctx.get_broadcast_state(RULES).get("label")


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_keyed_broadcast_timers_fire_with_the_key_and_the_broadcast_state(make_env, backend):
    from flowpoint import WatermarkStrategy
    from flowpoint.api.watermarks import TimestampAssigner

    class At(TimestampAssigner):
        def extract_timestamp(self, value, record_timestamp):
            return value[1]

    env = make_env(parallelism=2)
    env.get_configuration().set("state.backend.type", backend)
    label = env.from_collection(["quiet"]).broadcast(RULES)
    sink = CollectSink()
    events = env.from_collection([("a", 100), ("b", 105), ("a", 103)]).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(At()))
    events.key_by(lambda e: e[0]).connect(label).process(AlertAfterQuiet()).uid("alerts").sink_to(sink)
    env.execute("keyed broadcast timers")
    # one timer per (key, timestamp): registering again at the same time is one timer
    assert sorted(sink.results) == [("a", 110, "quiet"), ("a", 113, "quiet"), ("b", 115, "quiet")]


class TimerOnBroadcastSide(KeyedBroadcastProcessFunction):
    """PyFlink's broadcast-side Context has a timer service too: its clocks work, but there is
    no current key for a timer."""

    def process_broadcast_element(self, value, ctx):
        service = ctx.timer_service()
        assert service.current_watermark() == ctx.current_watermark()
        assert service.current_processing_time() == ctx.current_processing_time()
        service.register_event_time_timer(10)

    def process_element(self, value, ctx):
        return []


def test_a_timer_registered_on_the_broadcast_side_fails_naming_it(make_env):
    env = make_env(parallelism=1)
    env.from_collection([1]).key_by(lambda x: x).connect(env.from_collection([0]).broadcast(RULES)).process(TimerOnBroadcastSide()).sink_to(CollectSink())
    with pytest.raises((StateAccessError, UserFunctionError, JobExecutionError), match="in process_broadcast_element, which has no current key"):
        env.execute("timer on the broadcast side")


class TimerInPlainBroadcast(BroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        return []

    def process_element(self, value, ctx):
        assert ctx.timer_service().current_watermark() == ctx.current_watermark()
        ctx.timer_service().register_processing_time_timer(10)


def test_a_non_keyed_broadcast_function_has_clocks_but_no_timers(make_env):
    env = make_env(parallelism=1)
    env.from_collection([1]).connect(env.from_collection([0]).broadcast(RULES)).process(TimerInPlainBroadcast()).name("plain").sink_to(CollectSink())
    with pytest.raises((StateAccessError, UserFunctionError, JobExecutionError), match="'plain' registered a timer, but timers exist only on keyed streams"):
        env.execute("timer in a non-keyed broadcast function")
