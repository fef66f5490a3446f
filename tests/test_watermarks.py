"""Timestamps and watermarks through a job: generators per split, granularity, channels
across exchanges, idleness, sources that emit their own watermarks, side outputs."""

from __future__ import annotations

import pytest

from flowpoint import (
    CollectSink,
    Duration,
    OutputTag,
    ProcessFunction,
    Watermark,
    WatermarkGenerator,
    WatermarkStrategy,
)
from flowpoint.api.time import MAX_WATERMARK, MIN_WATERMARK
from flowpoint.connectors.source import EmittingSourceReader, Source, SourceSplit, SplitPlan
from flowpoint.errors import ConfigurationError, JobExecutionError
from flowpoint.tasks.event_time import InputWatermarks


class SeeWatermark(ProcessFunction):
    """Emits (value, its timestamp, the watermark the operator had when it saw the value)."""

    def process_element(self, value, ctx):
        yield value, ctx.timestamp(), ctx.timer_service().current_watermark()


class EveryRecord(WatermarkGenerator):
    """Punctuated: after each record, the watermark is its timestamp - 1."""

    def on_event(self, event, event_timestamp, output):
        output.emit_watermark(Watermark(event_timestamp - 1))

    def on_periodic_emit(self, output):
        pass


def _run(env, stream, fn=None, parallelism=None):
    sink = CollectSink()
    out = stream.process(fn or SeeWatermark())
    if parallelism:
        out.set_parallelism(parallelism)
    out.sink_to(sink)
    env.execute("watermarks")
    return sink.results


def test_punctuated_watermarks_apply_record_by_record_across_a_shuffle(make_env):
    env = make_env(parallelism=2, max_records=1000)
    ts = [10, 30, 20, 50, 40, 60, 15, 70]
    stream = env.from_collection(ts).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_generator(lambda ctx: EveryRecord()).with_timestamp_assigner(lambda v, _: v)
    ).set_parallelism(1)  # chained to the (single-split) source: one generator for the split
    rows = _run(env, stream.rebalance(), parallelism=2)  # records alternate between 2 receivers
    seen = {v: wm for v, _, wm in rows}
    assert sorted(seen) == sorted(ts)
    for i, v in enumerate(ts):
        before = max(ts[:i], default=None)
        # each record sees exactly the watermark its predecessors in the split produced
        assert seen[v] == (MIN_WATERMARK if before is None else before - 1), (v, seen[v])
    assert all(t == v for v, t, _ in rows)  # the timestamp travels with the record


def test_after_a_shuffle_each_instance_has_its_own_generator(make_env):
    """Seed 000's pipeline: source (p=1) -> assigner (p=2): Flink runs one generator per
    assigner instance and downstream takes the minimum over the instances."""
    env = make_env(parallelism=2, max_records=1000)
    ts = [10, 30, 20, 50, 40, 60, 15, 70]
    stream = env.from_collection(ts).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_generator(lambda ctx: EveryRecord()).with_timestamp_assigner(lambda v, _: v)
    )
    rows = _run(env, stream, parallelism=1)
    assert sorted(v for v, _, _ in rows) == sorted(ts)
    # the source's batch is cut in two: instance 0 gets 10 30 20 50, instance 1 gets 40 60 15 70.
    # Downstream reads instance 0's records first, while instance 1 is still at MIN; when it
    # reads instance 1's, instance 0 is at +inf (its input ended), so they see instance 1's own
    seen = {v: wm for v, _, wm in rows}
    assert seen == {10: MIN_WATERMARK, 30: MIN_WATERMARK, 20: MIN_WATERMARK, 50: MIN_WATERMARK,
                    40: MIN_WATERMARK, 60: 39, 15: 59, 70: 59}


def test_periodic_bounded_out_of_orderness_moves_per_batch(make_env):
    env = make_env(parallelism=1, max_records=4)  # one batch of 4 records per epoch
    ts = [1000, 5000, 3000, 2000, 9000, 8000, 7000, 12000, 11000]
    stream = env.from_collection(ts).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(1000)).with_timestamp_assigner(lambda v, _: v)
    )
    rows = _run(env, stream)
    seen = [wm for _, _, wm in rows]
    # records of a batch see the watermark of the batches before: max ts - bound - 1
    assert seen == [MIN_WATERMARK] * 4 + [3999] * 4 + [10999]


def test_the_watermark_is_the_minimum_over_splits_and_ends_at_infinity(make_env):
    env = make_env(parallelism=2, max_records=40)
    stream = env.from_sequence(0, 99).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: v * 10)
    )
    rows = _run(env, stream.rebalance(), parallelism=1)
    assert sorted(v for v, _, _ in rows) == list(range(100))
    # split 0 holds 0..49 and split 1 50..99: the combined watermark never passes the slower
    # split, so no record ever sees a watermark at or above its own timestamp
    for v, t, wm in rows:
        assert wm < t, (v, t, wm)
    assert max(wm for _, _, wm in rows) > 0  # and it did advance


def test_timestamps_survive_map_filter_and_flat_map(make_env):
    env = make_env(parallelism=1)
    stream = env.from_collection([1, 2, 3, 4]).assign_timestamps_and_watermarks(
        WatermarkStrategy.no_watermarks().with_timestamp_assigner(lambda v, _: v * 100)
    )
    stream = stream.map(lambda v: v * 2).filter(lambda v: v != 4).flat_map(lambda v: [v, v + 1])
    rows = _run(env, stream)
    assert [(v, t) for v, t, _ in rows] == [(2, 100), (3, 100), (6, 300), (7, 300), (8, 400), (9, 400)]
    assert {wm for _, _, wm in rows} == {MIN_WATERMARK}  # no_watermarks: none before the end


def test_an_assigner_that_returns_no_int_names_the_operator(make_env):
    env = make_env(parallelism=1)
    stream = env.from_collection(["a"]).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: "soon")
    )
    with pytest.raises((ConfigurationError, JobExecutionError), match="Timestamps/Watermarks.*epoch milliseconds"):
        _run(env, stream)


class TwoSplitEvents(Source):
    """Two splits of (ts, name) events; the reader emits timestamps and watermarks itself."""

    def __init__(self, splits):
        self.data = splits

    def is_bounded(self):
        return True

    def create_splits(self, parallelism):
        return [SourceSplit(f"s{i}", i, 0) for i in range(len(self.data))]

    def plan(self, split, position, budget, elapsed_s):
        end = min(len(self.data[split.payload]), position + budget)
        return SplitPlan(end, end - position, end >= len(self.data[split.payload]))

    def read_spec(self, split, start, end):
        return self.data[split.payload][start:end]

    def create_reader(self):
        return SeedStyleReader()


class SeedStyleReader(EmittingSourceReader):
    """Seed 000's StringLineEventSourceWithTsAndWaterMark: collect_with_timestamp + emit_watermark."""

    def run(self, split, spec, ctx):
        for ts, name in spec:
            ctx.collect_with_timestamp(name, ts)
            ctx.emit_watermark(Watermark(ts - 5))


def test_a_source_can_emit_timestamps_and_watermarks_itself(make_env):
    env = make_env(parallelism=1, max_records=100)
    source = TwoSplitEvents([[(100, "a"), (200, "b"), (150, "c")], [(1000, "x"), (1100, "y")]])
    rows = _run(env, env.from_source(source, source_name="events").rebalance(), parallelism=1)
    seen = {name: (t, wm) for name, t, wm in rows}
    assert {n: t for n, (t, _) in seen.items()} == {"a": 100, "b": 200, "c": 150, "x": 1000, "y": 1100}
    # split 0 is read first while split 1 has no watermark yet: the minimum stays MIN. Split 0
    # then ends (+inf), so x sees split 1's MIN and y split 1's own 995
    assert seen["a"][1] == seen["b"][1] == seen["c"][1] == MIN_WATERMARK
    assert seen["x"][1] == MIN_WATERMARK
    assert seen["y"][1] == 995


def test_side_outputs_of_a_process_function(make_env):
    env = make_env(parallelism=2)
    small = OutputTag("small")

    class Split(ProcessFunction):
        def process_element(self, value, ctx):
            if value < 5:
                ctx.output(small, value)
            else:
                yield value

    main_sink, side_sink = CollectSink(), CollectSink()
    big = env.from_collection(list(range(10))).process(Split())
    big.sink_to(main_sink)
    big.get_side_output(small).map(lambda v: -v).sink_to(side_sink)
    env.execute("side outputs")
    assert sorted(main_sink.results) == [5, 6, 7, 8, 9]
    assert sorted(side_sink.results) == [-4, -3, -2, -1, 0]


def test_input_watermarks_take_the_minimum_of_active_channels_and_never_go_back():
    w = InputWatermarks({"a": (10, False), "b": (MIN_WATERMARK, False)})
    assert (w.watermark, w.idle) == (MIN_WATERMARK, False)
    assert w.update("b", 20, False) == (10, None)
    assert w.update("a", 5, False) == (None, None)  # a channel never moves back
    assert w.update("a", 30, False) == (20, None)
    assert w.update("b", 20, True) == (30, None)  # an idle channel no longer holds it back
    assert w.update("a", 40, True) == (None, True)  # all idle: idle, watermark kept
    assert w.watermark == 30
    assert w.update("b", 25, False) == (None, False)  # active again below: no step back
    assert w.update("b", MAX_WATERMARK, False)[0] == MAX_WATERMARK  # "a" is idle


def test_an_idle_split_stops_holding_the_watermark_back():
    from types import SimpleNamespace

    from flowpoint.tasks.event_time import TimestampsOp

    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: v).with_idleness(Duration.of_seconds(10))
    spec = SimpleNamespace(options={"watermark_strategy": strategy, "in_source_stage": True}, uid="src", name="Source", input_type=None, function=None)
    op = TimestampsOp(spec)

    class Out:
        num_in = 0  # the operator counts what its outputs receive

        def __init__(self):
            self.events = []

        def process(self, origin, data, ts):
            self.events.append(("data", origin[1], list(data)))

        def process_watermark(self, origin, wm):
            self.events.append(("wm", origin[1], wm))

        def process_watermark_status(self, origin, idle):
            self.events.append(("idle", origin[1], idle))

    out = Out()
    op.outputs = [out]
    op.begin_epoch(0, {})
    op.advance_processing_time(1_000)
    op.process((0, 0, 1), [100, 200])
    op.end_split((0, 0, 1))
    op.end_split((0, 1, 0))  # split 1: no records yet, not idle yet
    assert ("wm", 0, 199) in out.events and not any(e[0] == "idle" for e in out.events)
    saved = op.snapshot_generators()
    op.begin_epoch(0, saved)  # a later epoch: the generator states come back from the driver
    op.advance_processing_time(12_000)
    op.process((0, 0, 2), [300])
    op.end_split((0, 0, 2))
    op.end_split((0, 1, 0))  # 11 s without records: idle
    assert out.events[-1] == ("idle", 1, True)
    assert ("wm", 0, 299) in out.events


def test_columnar_batches_keyed_by_fields_reach_the_owner_of_each_key(make_env):
    """key_by(["channel", "behavior"]) on Arrow batches ships columnar slices, routed by the
    same key groups as the per-record path."""
    from collections import Counter

    from flowpoint import (
        ClickEventGenerator,
        DataGeneratorSource,
        KeyedProcessFunction,
        ValueStateDescriptor,
    )

    class Count(KeyedProcessFunction):
        def open(self, ctx):
            self.n = ctx.get_state(ValueStateDescriptor("n"))

        def process_element(self, value, ctx):
            self.n.update((self.n.value() or 0) + 1)
            yield ctx.get_current_key(), ctx.timestamp()

    gen = ClickEventGenerator(num_users=100)
    env = make_env(parallelism=3, max_records=5000)
    stream = env.from_source(
        DataGeneratorSource(gen, count=12_000),
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner("ts"),
        "clicks",
    )
    sink = CollectSink()
    stream.key_by(["channel", "behavior"]).process(Count()).uid("count").sink_to(sink)
    result = env.execute("columnar keys")
    expected = Counter((gen(i).channel, gen(i).behavior) for i in range(12_000))
    assert result.get_keyed_state("count", "n") == dict(expected)
    assert sorted(t for _, t in sink.results) == sorted(gen(i).ts for i in range(12_000))


class LaggingMax(WatermarkGenerator):
    """A custom periodic generator: remembers the largest timestamp, emits it - 100 when asked."""

    def __init__(self):
        self.top = None

    def on_event(self, event, event_timestamp, output):
        self.top = event_timestamp if self.top is None else max(self.top, event_timestamp)

    def on_periodic_emit(self, output):
        if self.top is not None:
            output.emit_watermark(Watermark(self.top - 100))


def test_a_custom_periodic_generator_keeps_its_fields_between_epochs(make_env):
    env = make_env(parallelism=1, max_records=3)  # one batch of 3 records per epoch
    ts = [1000, 3000, 2000, 2500, 1500, 1200, 9000]
    stream = env.from_collection(ts).assign_timestamps_and_watermarks(
        WatermarkStrategy.for_generator(lambda ctx: LaggingMax()).with_timestamp_assigner(lambda v, _: v)
    )
    seen = [wm for _, _, wm in _run(env, stream)]
    # the generator object lives on between epochs (pickled on the driver): its maximum is kept
    assert seen == [MIN_WATERMARK] * 3 + [2900] * 3 + [2900]
