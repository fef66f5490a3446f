"""Windows, assigners, evictors, built-in aggregates and the WindowedStream API: pure Python,
no operator and no Spark (tests/test_windows.py runs them in the window operator)."""

from __future__ import annotations

import pickle
from datetime import datetime, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from flowpoint import CollectSink, Row, StreamExecutionEnvironment, Types, ValueStateDescriptor
from flowpoint.api.aggregates import Aggregates
from flowpoint.api.functions import OutputTag, ProcessWindowFunction
from flowpoint.api.time import MAX_WATERMARK, Duration, Time
from flowpoint.api.windowed_stream import count_window, count_window_all, window, window_all
from flowpoint.api.windows import (
    ContinuousEventTimeTrigger,
    CountEvictor,
    CountTrigger,
    DeltaEvictor,
    EventTimeSessionWindows,
    EventTimeTrigger,
    GlobalWindow,
    GlobalWindows,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeEvictor,
    TimestampedValue,
    TimeWindow,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from flowpoint.errors import ConfigurationError, JobGraphError


class Clock:
    """An assigner context at a fixed processing time."""

    def __init__(self, now: int):
        self.now = now

    def get_current_processing_time(self) -> int:
        return self.now


def ms(text: str) -> int:
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


# -- TimeWindow and GlobalWindow -------------------------------------------------------------------


def test_time_window_basics():
    w = TimeWindow(0, 10)
    assert w.max_timestamp() == 9
    assert (w.get_start(), w.get_end()) == (0, 10)
    assert w == TimeWindow(0, 10) and hash(w) == hash(TimeWindow(0, 10))
    assert sorted([TimeWindow(5, 15), TimeWindow(0, 10), TimeWindow(0, 5)]) == [TimeWindow(0, 5), TimeWindow(0, 10), TimeWindow(5, 15)]
    assert w.intersects(TimeWindow(10, 20))  # touching windows merge, as in Flink
    assert not w.intersects(TimeWindow(11, 20))
    assert w.cover(TimeWindow(5, 25)) == TimeWindow(0, 25)
    assert w.to_namespace() == (0, 10) and type(w.to_namespace()) is tuple
    with pytest.raises(AttributeError):
        w.start = 3  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(w)) == w


@pytest.mark.parametrize(
    ("ts", "offset", "size", "start"),
    [(35, 0, 10, 30), (30, 0, 10, 30), (-1, 0, 10, -10), (-10, 0, 10, -10), (-11, 0, 10, -20), (0, 3, 10, -7), (2, -3, 10, -3)],
)
def test_window_start_with_offset(ts, offset, size, start):
    assert TimeWindow.get_window_start_with_offset(ts, offset, size) == start


def test_global_window_is_one_window_that_never_ends():
    assert GlobalWindow.get() is GlobalWindow() is pickle.loads(pickle.dumps(GlobalWindow.get()))
    assert GlobalWindow.get().max_timestamp() == MAX_WATERMARK
    a = GlobalWindows.create()
    assert a.assign_windows("x", None, Clock(0)) == [GlobalWindow.get()]
    assert isinstance(a.get_default_trigger(), NeverTrigger)
    assert not a.is_event_time()
    assert a.window_from_namespace(GlobalWindow.get().to_namespace()) is GlobalWindow.get()


# -- tumbling and sliding --------------------------------------------------------------------------


def test_tumbling_is_aligned_to_the_epoch():
    a = TumblingEventTimeWindows.of(Time.seconds(10))
    [w] = a.assign_windows("click", ms("2024-01-28T20:19:35"), None)
    assert w == TimeWindow(ms("2024-01-28T20:19:30"), ms("2024-01-28T20:19:40"))
    assert a.is_event_time() and isinstance(a.get_default_trigger(), EventTimeTrigger)


def test_tumbling_with_offset_and_negative_timestamps():
    hourly = TumblingEventTimeWindows.of(Duration.of_hours(1), Duration.of_minutes(15))
    assert hourly.assign_windows(None, ms("2024-01-28T10:05:00"), None) == [TimeWindow(ms("2024-01-28T09:15:00"), ms("2024-01-28T10:15:00"))]
    a = TumblingEventTimeWindows.of(10)
    assert a.assign_windows(None, -1, None) == [TimeWindow(-10, 0)]
    assert a.assign_windows(None, -10, None) == [TimeWindow(-10, 0)]
    assert a.assign_windows(None, -11, None) == [TimeWindow(-20, -10)]
    assert TumblingEventTimeWindows.of(10, -3).assign_windows(None, 0, None) == [TimeWindow(-3, 7)]


@pytest.mark.parametrize(
    "make",
    [
        lambda: TumblingEventTimeWindows.of(0),
        lambda: TumblingEventTimeWindows.of(10, 10),
        lambda: TumblingEventTimeWindows.of(10, -10),
        lambda: SlidingEventTimeWindows.of(10, 0),
        lambda: SlidingEventTimeWindows.of(10, 5, 5),
        lambda: SlidingEventTimeWindows.of(-1, 5),
        lambda: TumblingEventTimeWindows.of(1.5),
        lambda: EventTimeSessionWindows.with_gap(0),
    ],
)
def test_invalid_assigner_parameters(make):
    with pytest.raises(ConfigurationError):
        make()


def test_sliding_windows_overlap():
    a = SlidingEventTimeWindows.of(Time.seconds(10), Time.seconds(5))
    assert a.assign_windows(None, 12_000, None) == [TimeWindow(10_000, 20_000), TimeWindow(5_000, 15_000)]
    assert a.assign_windows(None, -3, None) == [TimeWindow(-5_000, 5_000), TimeWindow(-10_000, 0)]
    uneven = SlidingEventTimeWindows.of(10, 3)
    assert uneven.assign_windows(None, 12, None) == [TimeWindow(12, 22), TimeWindow(9, 19), TimeWindow(6, 16), TimeWindow(3, 13)]


@given(
    ts=st.integers(-(10**12), 10**12),
    size=st.integers(1, 10_000),
    slide_div=st.integers(1, 10),
    offset_frac=st.floats(0, 0.999),
)
def test_sliding_assigns_exactly_the_aligned_windows_containing_the_timestamp(ts, size, slide_div, offset_frac):
    slide = max(1, size // slide_div)
    offset = int(slide * offset_frac)
    windows = SlidingEventTimeWindows.of(size, slide, offset).assign_windows(None, ts, None)
    assert all(w.start <= ts < w.end and w.end - w.start == size and (w.start - offset) % slide == 0 for w in windows)
    expected = [s for s in range(ts - size + 1 - slide, ts + slide) if (s - offset) % slide == 0 and s <= ts < s + size]
    assert sorted(w.start for w in windows) == expected


def test_processing_time_assigners_use_the_operator_clock():
    clock = Clock(25_500)
    assert TumblingProcessingTimeWindows.of(10_000).assign_windows("x", 1, clock) == [TimeWindow(20_000, 30_000)]
    assert SlidingProcessingTimeWindows.of(10_000, 5_000).assign_windows("x", None, clock) == [TimeWindow(25_000, 35_000), TimeWindow(20_000, 30_000)]
    assert ProcessingTimeSessionWindows.with_gap(100).assign_windows("x", None, clock) == [TimeWindow(25_500, 25_600)]
    for a in (TumblingProcessingTimeWindows.of(1), SlidingProcessingTimeWindows.of(2, 1), ProcessingTimeSessionWindows.with_gap(1)):
        assert not a.is_event_time() and isinstance(a.get_default_trigger(), ProcessingTimeTrigger)
    assert not isinstance(TumblingProcessingTimeWindows.of(1), TumblingEventTimeWindows)


def test_event_time_assigner_needs_a_timestamp():
    with pytest.raises(ConfigurationError, match="without a timestamp"):
        TumblingEventTimeWindows.of(10).assign_windows("x", None, None)


# -- sessions ----------------------------------------------------------------------------------


def merges_of(assigner, windows):
    out = []
    assigner.merge_windows(windows, lambda members, result: out.append((sorted(members), result)))
    return out


def test_session_windows_and_merging():
    a = EventTimeSessionWindows.with_gap(Time.milliseconds(5))
    assert a.assign_windows("x", 3, None) == [TimeWindow(3, 8)]
    assert a.is_merging() and a.is_event_time()
    windows = [TimeWindow(10, 15), TimeWindow(0, 5), TimeWindow(3, 8), TimeWindow(20, 25), TimeWindow(15, 18)]
    assert merges_of(a, windows) == [
        ([TimeWindow(0, 5), TimeWindow(3, 8)], TimeWindow(0, 8)),
        ([TimeWindow(10, 15), TimeWindow(15, 18)], TimeWindow(10, 18)),
    ]
    assert merges_of(a, [TimeWindow(0, 5), TimeWindow(6, 9)]) == []


def test_dynamic_session_gap():
    a = EventTimeSessionWindows.with_dynamic_gap(lambda e: e[1])
    assert a.assign_windows(("a", 7), 100, None) == [TimeWindow(100, 107)]

    class Extractor:
        def extract(self, element):
            return Duration.of_seconds(element)

    assert EventTimeSessionWindows.with_dynamic_gap(Extractor()).assign_windows(2, 0, None) == [TimeWindow(0, 2000)]
    with pytest.raises(ConfigurationError, match="must be positive"):
        a.assign_windows(("a", 0), 100, None)
    with pytest.raises(ConfigurationError):
        EventTimeSessionWindows.with_dynamic_gap(42)


# -- triggers and evictors as values ---------------------------------------------------------------


def test_trigger_results():
    assert [(r.is_fire(), r.is_purge()) for r in TriggerResult] == [(False, False), (True, False), (False, True), (True, True)]
    assert PurgingTrigger.of(CountTrigger.of(3)).can_merge()
    assert repr(PurgingTrigger.of(CountTrigger.of(3))) == "PurgingTrigger(CountTrigger(3))"
    assert ContinuousEventTimeTrigger.of(Time.seconds(1)).interval == 1000
    with pytest.raises(ConfigurationError):
        CountTrigger.of(0)
    with pytest.raises(ConfigurationError):
        PurgingTrigger.of("fire")


def tv(*pairs):
    return [TimestampedValue(v, t) for v, t in pairs]


def test_count_evictor_keeps_the_last_elements():
    e = CountEvictor.of(2)
    elements = tv(("a", 1), ("b", 2), ("c", 3))
    e.evict_after(elements, 3, None, None)
    assert len(elements) == 3  # evicts before the function unless do_evict_after
    e.evict_before(elements, 3, None, None)
    assert [x.value for x in elements] == ["b", "c"]
    after = CountEvictor.of(1, do_evict_after=True)
    elements = tv(("a", 1), ("b", 2))
    after.evict_before(elements, 2, None, None)
    after.evict_after(elements, 2, None, None)
    assert [x.value for x in elements] == ["b"]


def test_time_evictor_keeps_elements_near_the_newest():
    e = TimeEvictor.of(Time.milliseconds(10))
    elements = tv(("a", 1), ("b", 16), ("c", 15), ("d", 25))
    e.evict_before(elements, 4, None, None)
    assert [x.value for x in elements] == ["b", "d"]  # cutoff 25 - 10 = 15: timestamps <= 15 go
    untimed = tv(("a", None), ("b", None))
    e.evict_before(untimed, 2, None, None)
    assert len(untimed) == 2


def test_delta_evictor_compares_with_the_last_element():
    e = DeltaEvictor.of(5, lambda old, new: abs(new - old))
    elements = tv((1, None), (8, None), (4, None), (6, None))
    e.evict_before(elements, 4, None, None)
    assert [x.value for x in elements] == [8, 4, 6]


# -- built-in aggregates --------------------------------------------------------------------------


def run(agg, values):
    acc = agg.create_accumulator()
    for v in values:
        acc = agg.add(v, acc)
    return acc


def test_builtin_aggregates_follow_flink_field_semantics():
    rows = [Row(user="a", amount=3, n=1), Row(user="a", amount=1, n=2), Row(user="a", amount=5, n=3)]
    assert Aggregates.sum("amount").get_result(run(Aggregates.sum("amount"), rows)) == Row(user="a", amount=9, n=1)
    assert Aggregates.min("amount").get_result(run(Aggregates.min("amount"), rows)) == Row(user="a", amount=1, n=1)
    assert Aggregates.max(1).get_result(run(Aggregates.max(1), rows)) == Row(user="a", amount=5, n=1)
    assert Aggregates.count().get_result(run(Aggregates.count(), rows)) == 3
    assert Aggregates.avg("amount").get_result(run(Aggregates.avg("amount"), rows)) == 3.0
    assert Aggregates.sum().get_result(run(Aggregates.sum(), [1, 2, 3])) == 6  # a scalar is its own field 0
    assert Aggregates.sum(1).get_result(run(Aggregates.sum(1), [("x", 1), ("y", 2)])) == ("x", 3)
    assert Aggregates.sum("v").get_result(run(Aggregates.sum("v"), [{"v": 1, "k": 0}, {"v": 4, "k": 9}])) == {"v": 5, "k": 0}


def test_builtin_aggregates_merge_and_identify_themselves():
    s = Aggregates.sum(1)
    assert s.builtin == ("sum", 1) and Aggregates.count().builtin == ("count", None) and Aggregates.avg("x").builtin == ("avg", "x")
    a, b = run(s, [("x", 1), ("y", 2)]), run(s, [("z", 10)])
    assert s.get_result(s.merge(a, b)) == ("x", 13)
    assert s.get_result(s.merge(s.create_accumulator(), b)) == ("z", 10)
    avg = Aggregates.avg()
    assert avg.get_result(avg.merge(run(avg, [1, 2]), run(avg, [6]))) == 3.0
    assert avg.get_result(avg.create_accumulator()) is None
    assert Aggregates.count().merge(2, 3) == 5
    assert pickle.loads(pickle.dumps(s)) == s
    with pytest.raises(ConfigurationError):
        Aggregates.sum(1.5)  # type: ignore[arg-type]


# -- the WindowedStream API -----------------------------------------------------------------------


@pytest.fixture
def keyed():
    env = StreamExecutionEnvironment({"parallelism.default": 2})
    return env.from_collection([("a", 1)]).key_by(lambda x: x[0])


def test_windowed_stream_records_one_window_transformation(keyed):
    tag = OutputTag("late")
    ws = window(keyed, TumblingEventTimeWindows.of(Time.seconds(10))).allowed_lateness(Time.seconds(2)).side_output_late_data(tag)
    out = ws.reduce(lambda a, b: (a[0], a[1] + b[1]))
    t = out._t
    assert t.kind == "window" and t.inputs[0].kind == "key_by"
    assert t.name == "Window(TumblingEventTimeWindows(10000), EventTimeTrigger, reduce)"
    o = t.options
    assert o["allowed_lateness_ms"] == 2000 and o["late_tag_id"] == "late"
    assert isinstance(o["trigger"], EventTimeTrigger) and o["evictor"] is None
    assert (o["function_kind"], o["incremental_kind"], o["window_function_kind"]) == ("reduce", "reduce", None)
    assert t.function is o["incremental_function"]


def test_windowed_stream_function_kinds(keyed):
    class Pwf(ProcessWindowFunction):
        def process(self, key, context, elements):
            yield key

    def kind(ds):
        return ds._t.options["function_kind"]

    ws = lambda: window(keyed, TumblingEventTimeWindows.of(10))  # noqa: E731
    assert kind(ws().process(Pwf())) == "process"
    assert kind(ws().apply(lambda k, w, xs: [len(xs)])) == "apply"
    assert kind(ws().reduce(lambda a, b: a, Pwf())) == "reduce+process"
    assert kind(ws().aggregate(Aggregates.count(), lambda k, w, xs: xs)) == "aggregate+apply"
    pwf = Pwf()
    assert ws().aggregate(Aggregates.count(), pwf)._t.function is pwf
    summed = ws().sum(1)._t
    assert summed.name.endswith("sum(1))") and summed.options["incremental_function"].builtin == ("sum", 1)


def test_window_all_is_a_constant_key_window_with_parallelism_one(keyed):
    env = StreamExecutionEnvironment({"parallelism.default": 4})
    t = window_all(env.from_collection([1, 2]), TumblingEventTimeWindows.of(10)).sum()._t
    assert t.parallelism == 1 and t.max_parallelism == 1 and t.name.startswith("AllWindow(")
    assert t.inputs[0].key_selector.get_key("anything") == 0


def test_count_windows(keyed):
    o = count_window(keyed, 3)._build("aggregate", Aggregates.count(), None, None)._t.options
    assert isinstance(o["assigner"], GlobalWindows) and repr(o["trigger"]) == "PurgingTrigger(CountTrigger(3))" and o["evictor"] is None
    o = count_window(keyed, 3, 1).reduce(lambda a, b: a)._t.options
    assert repr(o["trigger"]) == "SlidingCountTrigger(3, 1)" and repr(o["evictor"]) == "CountEvictor(3)"
    env = StreamExecutionEnvironment({"parallelism.default": 4})
    assert count_window_all(env.from_collection([1]), 2).sum()._t.parallelism == 1
    with pytest.raises(ConfigurationError, match="positive int size"):
        count_window(keyed, 0)


def test_windowed_stream_validation_names_the_operator(keyed):
    ws = window(keyed, TumblingEventTimeWindows.of(10))
    with pytest.raises(ConfigurationError, match=r"allowed lateness of Window\(TumblingEventTimeWindows\(10\).*negative"):
        ws.allowed_lateness(-1)
    with pytest.raises(JobGraphError, match=r"reduce\(\) of Window\(TumblingEventTimeWindows\(10\), EventTimeTrigger\) needs a ReduceFunction"):
        ws.reduce(42)
    with pytest.raises(JobGraphError, match="needs an AggregateFunction"):
        ws.aggregate(lambda a, b: a)
    with pytest.raises(JobGraphError, match="needs a ProcessWindowFunction"):
        ws.process(lambda k, c, e: e)
    with pytest.raises(JobGraphError, match="needs a Trigger"):
        ws.trigger("soon")
    with pytest.raises(JobGraphError, match="needs an OutputTag"):
        ws.side_output_late_data("late")
    with pytest.raises(JobGraphError, match="needs a WindowAssigner"):
        window(keyed, "tumbling")
    sessions = window(keyed, EventTimeSessionWindows.with_gap(10))

    class NoMerge(EventTimeTrigger):
        def can_merge(self):
            return False

    with pytest.raises(JobGraphError, match="does not support merging"):
        sessions.trigger(NoMerge())
    sessions.evictor(CountEvictor.of(2))  # an evictor with a merging assigner is fine
    assert window(keyed, TumblingEventTimeWindows.of(10)).allowed_lateness(0)._lateness == 0


@pytest.mark.parametrize(("assigner", "size", "slide"), [
    ("tumbling", 3, None),
    ("sliding", 3, 2),
])
def test_pyflinks_count_assigners_are_count_windows(make_env, assigner, size, slide):
    """``window(CountTumblingWindowAssigner.of(n))`` / ``CountSlidingWindowAssigner.of(n, s)`` give
    what ``count_window(n[, s])`` gives, keyed and over all records."""
    from flowpoint import CollectSink, CountSlidingWindowAssigner, CountTumblingWindowAssigner

    made = CountTumblingWindowAssigner.of(size) if slide is None else CountSlidingWindowAssigner.of(size, slide)
    env = make_env(parallelism=2)
    records = [("k" if i % 3 else "j", i) for i in range(20)]
    sinks = [CollectSink() for _ in range(4)]

    def total(a, b):
        return (a[0], a[1] + b[1])

    src = env.from_collection(records).set_parallelism(1)
    keyed = src.key_by(lambda r: r[0])
    keyed.window(made).reduce(total).sink_to(sinks[0])
    (keyed.count_window(size) if slide is None else keyed.count_window(size, slide)).reduce(total).sink_to(sinks[1])
    src.window_all(made).reduce(total).sink_to(sinks[2])
    (src.count_window_all(size) if slide is None else src.count_window_all(size, slide)).reduce(total).sink_to(sinks[3])
    env.execute("count assigners")
    assert sinks[0].results and sorted(sinks[0].results) == sorted(sinks[1].results)
    assert sinks[2].results and sorted(sinks[2].results) == sorted(sinks[3].results)


class _IdsAndWindowState(ProcessWindowFunction):
    """The window each firing sees, and a per-window counter (window_state())."""

    def process(self, key, context, elements):
        firings = context.window_state().get_state(ValueStateDescriptor("firings", Types.INT()))
        firings.update((firings.value() or 0) + 1)
        yield key, repr(context.window()), [e[1] for e in elements], firings.value()


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_count_windows_are_numbered_per_key_as_pyflinks_and_keep_their_state(make_env, backend):
    """A count window's functions see CountWindow(id=n), the key's n-th firing (PyFlink's ids),
    over RocksDB too; window_state() stays the operator's window's (the GlobalWindow); slide=0 is
    tumbling (PyFlink's default); another trigger shows the GlobalWindow again."""
    env = make_env(parallelism=2)
    env.get_configuration().set("state.backend.type", backend)
    sinks = [CollectSink() for _ in range(3)]
    keyed = env.from_collection([("a", i) for i in range(5)] + [("b", 9), ("b", 8)]).set_parallelism(1).key_by(lambda r: r[0])
    keyed.count_window(2, 0).process(_IdsAndWindowState()).sink_to(sinks[0])
    keyed.count_window(3, 1).process(_IdsAndWindowState()).sink_to(sinks[1])
    keyed.count_window(2).trigger(CountTrigger.of(5)).process(_IdsAndWindowState()).sink_to(sinks[2])
    env.execute("count window ids")
    assert sorted(sinks[0].results) == [
        ("a", "CountWindow(id=0)", [0, 1], 1), ("a", "CountWindow(id=1)", [2, 3], 2), ("b", "CountWindow(id=0)", [9, 8], 1)]
    assert sorted(sinks[1].results) == [
        ("a", "CountWindow(id=0)", [0, 1, 2], 1), ("a", "CountWindow(id=1)", [1, 2, 3], 2), ("a", "CountWindow(id=2)", [2, 3, 4], 3)]
    assert sinks[2].results == [("a", "GlobalWindow", [0, 1, 2, 3, 4], 1)]
