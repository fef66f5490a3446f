"""PyFlink's side-output idiom: a process function that does ``yield output_tag, value`` sends
``value`` to that side output, not ``(output_tag, value)`` to the main output.

Regression: the pair used to reach the main output as a tuple, a silent wrong result. Every kind
of process function PyFlink documents side outputs for is covered (ProcessFunction,
KeyedProcessFunction in process_element and on_timer, ProcessWindowFunction, the broadcast
process functions), with the record timestamps carried to the side output."""

from __future__ import annotations

from flowpoint import (
    CollectSink,
    Duration,
    KeyedProcessFunction,
    MapStateDescriptor,
    OutputTag,
    ProcessFunction,
    ProcessWindowFunction,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)
from flowpoint.api.broadcast import BroadcastProcessFunction, KeyedBroadcastProcessFunction

ODD = OutputTag("odd", Types.INT())
TIMER = OutputTag("timer", Types.STRING())


class Split(ProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, value
        else:
            yield value


class StampOf(ProcessFunction):
    """The value and the timestamp it carries."""

    def process_element(self, value, ctx):
        yield value, ctx.timestamp()


def _stamped(env, n):
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: v * 1000)
    return env.from_collection(list(range(n)), Types.INT()).assign_timestamps_and_watermarks(strategy)


def test_process_function(make_env):
    env = make_env(parallelism=2)
    main = _stamped(env, 10).process(Split(), Types.INT())
    evens, odds = CollectSink(), CollectSink()
    main.process(StampOf()).sink_to(evens)
    main.get_side_output(ODD).process(StampOf()).sink_to(odds)
    env.execute("yield tag, value")
    assert sorted(evens.results) == [(v, v * 1000) for v in range(0, 10, 2)]
    assert sorted(odds.results) == [(v, v * 1000) for v in range(1, 10, 2)]


def test_a_tag_nobody_reads_is_dropped_not_sent_to_the_main_output(make_env):
    env = make_env(parallelism=1)
    sink = CollectSink()
    env.from_collection(list(range(6)), Types.INT()).process(Split(), Types.INT()).sink_to(sink)
    env.execute("unread side output")
    assert sorted(sink.results) == [0, 2, 4]


class CountThenReport(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if value % 2:
            yield ODD, value
        else:
            yield value
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 500)

    def on_timer(self, timestamp, ctx):
        yield TIMER, f"{ctx.get_current_key()}@{timestamp}"
        yield f"main {ctx.get_current_key()}@{timestamp}"


def test_keyed_process_function_and_its_timers(make_env):
    env = make_env(parallelism=2)
    main = _stamped(env, 6).key_by(lambda v: v % 3).process(CountThenReport(), Types.STRING())
    out, odds, timers = CollectSink(), CollectSink(), CollectSink()
    main.sink_to(out)
    main.get_side_output(ODD).process(StampOf()).sink_to(odds)
    main.get_side_output(TIMER).sink_to(timers)
    env.execute("keyed yield tag, value")
    assert sorted(odds.results) == [(1, 1000), (3, 3000), (5, 5000)]
    fired = sorted(f"{v % 3}@{v * 1000 + 500}" for v in range(6))
    assert sorted(timers.results) == fired
    assert sorted(out.results, key=str) == sorted([0, 2, 4] + [f"main {t}" for t in fired], key=str)


class WindowSplit(ProcessWindowFunction):
    def process(self, key, context, elements):
        values = list(elements)
        yield key, len(values)
        for v in values:
            if v % 2:
                yield ODD, v


def test_process_window_function(make_env):
    env = make_env(parallelism=2)
    main = (_stamped(env, 8).key_by(lambda v: v % 2)
            .window(TumblingEventTimeWindows.of(Duration.of_seconds(4))).process(WindowSplit()))
    out, odds = CollectSink(), CollectSink()
    main.sink_to(out)
    main.get_side_output(ODD).process(StampOf()).sink_to(odds)
    env.execute("window yield tag, value")
    assert sorted(out.results) == [(0, 2), (0, 2), (1, 2), (1, 2)]
    # side output records of a window carry the window's max timestamp, as its main output does
    assert sorted(odds.results) == [(1, 3999), (3, 3999), (5, 7999), (7, 7999)]


RULES = MapStateDescriptor("rules", Types.STRING(), Types.INT())


class BroadcastSplit(BroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("limit", value)
        yield ODD, -value

    def process_element(self, value, ctx):
        if value >= ctx.get_broadcast_state(RULES).get("limit"):
            yield ODD, value
        else:
            yield value


class KeyedBroadcastSplit(KeyedBroadcastProcessFunction):
    def process_broadcast_element(self, value, ctx):
        ctx.get_broadcast_state(RULES).put("limit", value)

    def process_element(self, value, ctx):
        if value >= ctx.get_broadcast_state(RULES).get("limit"):
            yield ODD, value
        yield value, ctx.timestamp()


def test_broadcast_process_functions(make_env):
    env = make_env(parallelism=2)
    limit = env.from_collection([5], Types.INT()).broadcast(RULES)
    plain = _stamped(env, 8).connect(limit).process(BroadcastSplit(), Types.INT())
    keyed = _stamped(env, 8).key_by(lambda v: v % 2).connect(limit).process(KeyedBroadcastSplit())
    out, side, kout, kside = CollectSink(), CollectSink(), CollectSink(), CollectSink()
    plain.sink_to(out)
    plain.get_side_output(ODD).sink_to(side)
    keyed.sink_to(kout)
    keyed.get_side_output(ODD).process(StampOf()).sink_to(kside)
    env.execute("broadcast yield tag, value")
    assert sorted(out.results) == [0, 1, 2, 3, 4]
    assert sorted(side.results) == [-5, -5, 5, 6, 7]  # the broadcast element reaches both instances
    assert sorted(kout.results) == [(v, v * 1000) for v in range(8)]  # each output keeps its record's timestamp
    assert sorted(kside.results) == [(v, v * 1000) for v in (5, 6, 7)]
