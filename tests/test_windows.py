"""The keyed window operator through the harness (no Spark): window functions, triggers,
evictors, lateness, sessions, cleanup, window_all, restore and errors, on both backends."""

from __future__ import annotations

import pytest

from flowpoint import AggregateFunction, ReduceFunction, ValueStateDescriptor
from flowpoint.api.aggregates import Aggregates
from flowpoint.api.functions import (
    AllWindowFunction,
    OutputTag,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    WindowFunction,
)
from flowpoint.api.state import ListStateDescriptor
from flowpoint.api.time import MAX_WATERMARK, Time
from flowpoint.api.watermarks import Watermark
from flowpoint.api.windowed_stream import count_window, count_window_all, window, window_all
from flowpoint.api.windows import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountEvictor,
    CountTrigger,
    EventTimeSessionWindows,
    GlobalWindows,
    ProcessingTimeSessionWindows,
    PurgingTrigger,
    SlidingEventTimeWindows,
    TimeEvictor,
    TimeWindow,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
)
from flowpoint.errors import ConfigurationError, StateAccessError, UserFunctionError
from flowpoint.state.keygroups import assign_to_key_group
from flowpoint.tasks.window_operator import CONTENTS_STATE, MERGING_SET_STATE
from flowpoint.testing import KeyedOperatorHarness, Record


@pytest.fixture(params=["hashmap", "rocksdb"])
def backend_kind(request):
    return request.param


@pytest.fixture
def harness(backend_kind):
    """``harness(pipeline)`` on the test's backend; ``harness.restore(snapshot, pipeline, ...)``."""
    opened: list[KeyedOperatorHarness] = []

    def make(pipeline, **kwargs):
        kwargs.setdefault("backend", backend_kind)
        h = KeyedOperatorHarness(pipeline, **kwargs)
        opened.append(h)
        return h

    def restore(snapshot, pipeline, **kwargs):
        kwargs.setdefault("backend", backend_kind)
        h = KeyedOperatorHarness.restore(snapshot, pipeline, **kwargs)
        opened.append(h)
        return h

    make.restore = restore  # type: ignore[attr-defined]
    yield make
    for h in opened:
        h.close()


def by_key(assigner):
    return lambda s: window(s.key_by(lambda x: x[0]), assigner)


def add(a, b):
    return (a[0], a[1] + b[1])


TUMBLING_10S = TumblingEventTimeWindows.of(Time.seconds(10))


def feed(h, *records):
    for value, ts in records:
        h.process_element(value, timestamp=ts)


# -- window functions ----------------------------------------------------------------------------


def test_tumbling_reduce_fires_when_the_watermark_passes_the_window(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).reduce(add))
    feed(h, (("a", 1), 1_000), (("b", 2), 2_000), (("a", 3), 9_999), (("a", 4), 10_000))
    h.process_watermark(9_998)
    assert h.extract_output_values() == []
    h.process_watermark(9_999)
    assert h.get_output() == [Watermark(9_998), Record(("a", 4), 9_999), Record(("b", 2), 9_999), Watermark(9_999)]
    h.process_watermark(MAX_WATERMARK)
    assert h.get_output()[-2:] == [Record(("a", 4), 19_999), Watermark(MAX_WATERMARK)]
    assert h.num_state_entries() == 0


def test_incremental_functions_keep_one_accumulator_per_window(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).reduce(add))
    feed(h, *[(("a", i), i) for i in range(100)])
    assert h.state_entries()[CONTENTS_STATE] == {"a": {(0, 10_000): ("a", 4950)}}

    p = harness(lambda s: by_key(TUMBLING_10S)(s).process(Describe()))
    feed(p, (("a", 1), 1), (("a", 2), 2))
    assert p.state_entries()[CONTENTS_STATE] == {"a": {(0, 10_000): [("a", 1), ("a", 2)]}}


class Average(AggregateFunction):
    def create_accumulator(self):
        return (0, 0)

    def add(self, value, accumulator):
        return (accumulator[0] + value[1], accumulator[1] + 1)

    def get_result(self, accumulator):
        return accumulator[0] / accumulator[1]

    def merge(self, a, b):
        return (a[0] + b[0], a[1] + b[1])


def test_aggregate_and_builtin_aggregations(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).aggregate(Average()))
    feed(h, (("a", 1), 1), (("a", 4), 2), (("b", 10), 3))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [2.5, 10.0]

    for method, expected in [("sum", [("a", 5), ("b", 10)]), ("min", [("a", 1), ("b", 10)]), ("max", [("a", 4), ("b", 10)]), ("avg", [2.5, 10.0])]:
        h = harness(lambda s, m=method: getattr(by_key(TUMBLING_10S)(s), m)(1))
        feed(h, (("a", 1), 1), (("a", 4), 2), (("b", 10), 3))
        h.process_watermark(MAX_WATERMARK)
        assert h.extract_output_values() == expected, method
    h = harness(lambda s: by_key(TUMBLING_10S)(s).count())
    feed(h, (("a", 1), 1), (("a", 4), 2), (("b", 10), 3))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [2, 1]


class Describe(ProcessWindowFunction):
    def process(self, key, context, elements):
        w = context.window()
        yield (key, w.start, w.end, [e[1] for e in elements], context.current_watermark())


def test_process_window_function_sees_all_elements_and_the_context(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).process(Describe()))
    feed(h, (("a", 1), 1_000), (("a", 2), 5_000), (("a", 3), 12_000))
    h.process_watermark(10_000)
    h.process_watermark(20_000)
    assert h.extract_output_records() == [
        Record(("a", 0, 10_000, [1, 2], 10_000), 9_999),
        Record(("a", 10_000, 20_000, [3], 20_000), 19_999),
    ]


class Sizes(WindowFunction):
    def apply(self, key, window, inputs):
        yield (key, window.max_timestamp(), len(list(inputs)))


class CollectingSizes(WindowFunction):
    def apply(self, key, window, inputs, out):  # Flink's form with a collector
        out.collect((key, window.max_timestamp(), len(list(inputs))))


@pytest.mark.parametrize("function", [Sizes(), CollectingSizes(), lambda key, window, inputs: [(key, window.max_timestamp(), len(inputs))]])
def test_apply_in_every_form(harness, function):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).apply(function))
    feed(h, (("a", 1), 1), (("a", 2), 2), (("b", 2), 2))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 9_999, 2), ("b", 9_999, 1)]


class WithWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        [only] = elements
        yield (key, context.window().start, only)


def test_incremental_function_with_a_window_function(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).reduce(add, WithWindow()))
    feed(h, (("a", 1), 1), (("a", 2), 10_001), (("a", 3), 10_002))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 0, ("a", 1)), ("a", 10_000, ("a", 5))]

    h = harness(lambda s: by_key(TUMBLING_10S)(s).aggregate(Aggregates.count(), CollectingSizes()))
    feed(h, (("a", 1), 1), (("a", 2), 2))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 9_999, 1)]  # the window function sees the one result

    h = harness(lambda s: by_key(TUMBLING_10S)(s).aggregate(Average(), lambda key, w, inputs: [(key, inputs[0])]))
    feed(h, (("a", 1), 1), (("a", 2), 2))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 1.5)]


def test_sliding_windows_fire_each_window_in_timestamp_order(harness):
    h = harness(lambda s: by_key(SlidingEventTimeWindows.of(10, 5))(s).apply(Sizes()))
    feed(h, (("a", 1), 7), (("a", 1), 12), (("b", 1), 3))
    h.process_watermark(MAX_WATERMARK)
    # windows [0,10) [5,15) [10,20) for a; [-5,5) [0,10) for b; by end time, then key
    assert h.extract_output_values() == [("b", 4, 1), ("a", 9, 1), ("b", 9, 1), ("a", 14, 2), ("a", 19, 1)]


# -- lateness -----------------------------------------------------------------------------------


LATE = OutputTag("late")


def test_allowed_lateness_fires_again_then_drops_and_counts(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).allowed_lateness(Time.seconds(5)).process(Describe()))
    feed(h, (("a", 1), 1_000))
    h.process_watermark(10_000)
    assert [r.value[3] for r in h.extract_output_records()] == [[1]]
    h.process_element(("a", 2), timestamp=2_000)  # late, within the lateness: fires again at once
    assert [r.value[3] for r in h.extract_output_records()] == [[1], [1, 2]]
    assert h.num_state_entries() > 0
    h.process_watermark(14_999)  # cleanup at max_timestamp + lateness = 14_999
    assert h.num_state_entries() == 0
    h.process_element(("a", 3), timestamp=3_000)  # the window is gone: dropped and counted
    h.process_element(("a", 4), timestamp=9_999)  # 9_999 + 5_000 <= watermark: late as well
    assert h.get_metric("numLateRecordsDropped") == 2
    assert len(h.extract_output_records()) == 2
    h.process_element(("a", 5), timestamp=15_000)  # on time for [10 s, 20 s)
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_records()[-1] == Record(("a", 10_000, 20_000, [5], MAX_WATERMARK), 19_999)


def test_late_data_side_output(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).side_output_late_data(LATE).reduce(add))
    feed(h, (("a", 1), 1_000))
    h.process_watermark(12_000)
    feed(h, (("a", 2), 500), (("b", 3), 11_000), (("b", 4), 9_000))
    assert h.get_side_output(LATE) == [Record(("a", 2), 500), Record(("b", 4), 9_000)]
    assert h.get_metric("numLateRecordsDropped") == 0
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 1), ("b", 3)]


def test_an_element_late_for_some_windows_goes_to_the_others(harness):
    h = harness(lambda s: by_key(SlidingEventTimeWindows.of(10, 5))(s).side_output_late_data(LATE).apply(Sizes()))
    h.process_watermark(9)
    h.process_element(("a", 1), timestamp=8)  # [0,10) is late, [5,15) is not
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 14, 1)]
    assert h.get_side_output(LATE) == []


class PerWindowCount(ProcessWindowFunction):
    """Counts firings per window (window_state) and per key (global_state)."""

    desc = ValueStateDescriptor("firings")

    def process(self, key, context, elements):
        w = context.window_state().get_state(self.desc)
        g = context.global_state().get_state(ValueStateDescriptor("all-firings"))
        w.update((w.value() or 0) + 1)
        g.update((g.value() or 0) + 1)
        yield (key, context.window().start, w.value(), g.value())

    def clear(self, context):
        context.window_state().get_state(self.desc).clear()


def test_window_state_and_global_state(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).allowed_lateness(10_000).process(PerWindowCount()))
    feed(h, (("a", 1), 1), (("a", 1), 10_001))
    h.process_watermark(10_000)
    h.process_element(("a", 2), timestamp=2)  # late firing of [0, 10 s)
    h.process_watermark(20_000)
    assert h.extract_output_values() == [("a", 0, 1, 1), ("a", 0, 2, 2), ("a", 10_000, 1, 3)]
    h.process_watermark(MAX_WATERMARK)
    assert h.state_entries() == {"all-firings": {"a": 3}}  # clear() removed the per-window state


# -- processing time, count windows, global windows -------------------------------------------------


def test_processing_time_windows(harness):
    h = harness(lambda s: by_key(TumblingProcessingTimeWindows.of(1_000))(s).reduce(add))
    h.set_processing_time(1_500)
    feed(h, (("a", 1), None), (("a", 2), 5))  # element timestamps play no part
    h.set_processing_time(2_100)
    h.process_element(("a", 10))
    h.set_processing_time(1_999 + 1)  # never backwards
    assert h.get_output() == [Record(("a", 3), 1_999)]
    h.process_watermark(MAX_WATERMARK)  # the watermark does not fire processing-time windows
    assert h.extract_output_values() == [("a", 3)]
    h.set_processing_time(3_000)
    assert h.extract_output_records()[-1] == Record(("a", 10), 2_999)
    assert h.num_state_entries() == 0


def test_processing_time_sessions(harness):
    h = harness(lambda s: by_key(ProcessingTimeSessionWindows.with_gap(100))(s).reduce(add))
    for now in (0, 50, 120):
        h.set_processing_time(now)
        h.process_element(("a", 1))
    h.set_processing_time(218)  # the sessions merged into [0, 220)
    assert h.extract_output_values() == []
    h.set_processing_time(219)
    assert h.get_output() == [Record(("a", 3), 219)]
    assert h.num_state_entries() == 0


def test_count_windows_tumbling_and_sliding(harness):
    h = harness(lambda s: count_window(s.key_by(lambda x: x[0]), 3).reduce(add))
    feed(h, *[(("a", i), None) for i in range(1, 8)], (("b", 100), None))
    assert h.get_output() == [Record(("a", 6), MAX_WATERMARK), Record(("a", 15), MAX_WATERMARK)]

    # PyFlink's count sliding windows: the first once there are 3 elements, then every 2, each
    # with the last 3 (no partial window first, as Java Flink's countWindow(3, 2) would fire)
    h = harness(lambda s: count_window(s.key_by(lambda x: x[0]), 3, 2).apply(lambda k, w, xs: [[x[1] for x in xs]]))
    feed(h, *[(("a", i), i) for i in range(1, 9)])
    assert h.extract_output_values() == [[1, 2, 3], [3, 4, 5], [5, 6, 7]]
    h.process_watermark(MAX_WATERMARK)  # a global window is never cleaned up; 8 waits for 9
    # an evicting window keeps the elements with their timestamps; the evictor ran at the last firing
    assert h.state_entries()[CONTENTS_STATE] == {"a": {(): [(("a", 5), 5), (("a", 6), 6), (("a", 7), 7), (("a", 8), 8)]}}

    # a slide longer than the size skips the elements between windows, as PyFlink's does
    h = harness(lambda s: count_window(s.key_by(lambda x: x[0]), 2, 3).apply(lambda k, w, xs: [[x[1] for x in xs]]))
    feed(h, *[(("a", i), i) for i in range(1, 9)])
    assert h.extract_output_values() == [[1, 2], [4, 5], [7, 8]]


def test_global_windows_never_fire_without_a_trigger(harness):
    h = harness(lambda s: window(s.key_by(lambda x: x[0]), GlobalWindows.create()).reduce(add))
    feed(h, (("a", 1), 1), (("a", 2), 2))
    h.process_watermark(MAX_WATERMARK)
    h.set_processing_time(10**15)
    assert h.extract_output_values() == []
    assert h.state_entries()[CONTENTS_STATE] == {"a": {(): ("a", 3)}}


# -- sessions ------------------------------------------------------------------------------------


def test_session_windows_merge(harness):
    h = harness(lambda s: by_key(EventTimeSessionWindows.with_gap(5))(s).process(Describe()))
    feed(h, (("a", 1), 0), (("a", 2), 3), (("a", 3), 20), (("b", 9), 4))
    assert sorted(h.state_entries()[MERGING_SET_STATE]["a"]) == [((0, 8), (0, 5)), ((20, 25), (20, 25))]
    h.process_element(("a", 4), timestamp=12)  # [12, 17) stays apart: 8 < 12
    h.process_element(("a", 5), timestamp=16)  # [16, 21) bridges [12, 17) and [20, 25)
    assert sorted(h.state_entries()[MERGING_SET_STATE]["a"]) == [((0, 8), (0, 5)), ((12, 25), (12, 17))]
    assert h.num_event_time_timers() == 3
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [
        ("a", 0, 8, [1, 2], MAX_WATERMARK),
        ("b", 4, 9, [9], MAX_WATERMARK),
        ("a", 12, 25, [4, 3, 5], MAX_WATERMARK),
    ]
    assert h.num_state_entries() == 0


def test_sessions_with_incremental_aggregation_and_lateness(harness):
    h = harness(lambda s: by_key(EventTimeSessionWindows.with_gap(10))(s).allowed_lateness(100).side_output_late_data(LATE).aggregate(Average()))
    feed(h, (("a", 2), 0), (("a", 4), 30))
    h.process_watermark(50)
    assert h.get_output()[:2] == [Record(2.0, 9), Record(4.0, 39)]
    h.process_element(("a", 9), timestamp=9)  # [9, 19) merges with [0, 10): a late firing within the lateness
    assert h.get_output()[-1] == Record(5.5, 18)
    h.process_watermark(140)
    assert h.num_state_entries() == 0
    h.process_element(("a", 1), timestamp=25)
    assert h.get_side_output(LATE) == [Record(("a", 1), 25)]


def test_dynamic_gap_sessions_and_merging_trigger_state(harness):
    assigner = EventTimeSessionWindows.with_dynamic_gap(lambda e: e[1])
    h = harness(lambda s: by_key(assigner)(s).trigger(CountTrigger.of(3)).apply(lambda k, w, xs: [(w.start, w.end, len(xs))]))
    feed(h, (("a", 10), 0), (("a", 2), 50))
    assert h.extract_output_values() == []
    h.process_element(("a", 45), timestamp=5)  # [5, 50) joins [0, 10) and [50, 52): counts 1 + 1 + 1 = 3 fire
    assert h.extract_output_values() == [(0, 52, 3)]


def test_sessions_merge_reduced_values_and_evicting_contents(harness):
    h = harness(lambda s: by_key(EventTimeSessionWindows.with_gap(10))(s).reduce(add))
    feed(h, (("a", 1), 0), (("a", 2), 30), (("a", 4), 15))  # [15, 25) merges nothing yet
    h.process_element(("a", 8), timestamp=8)  # [8, 18) bridges [0, 10) and [15, 25)
    assert h.state_entries()[CONTENTS_STATE] == {"a": {(0, 10): ("a", 13), (30, 40): ("a", 2)}}
    h.process_watermark(MAX_WATERMARK)
    assert h.get_output()[:2] == [Record(("a", 13), 24), Record(("a", 2), 39)]

    h = harness(lambda s: by_key(EventTimeSessionWindows.with_gap(10))(s).evictor(CountEvictor.of(2)).process(Describe()))
    feed(h, (("a", 1), 0), (("a", 2), 15), (("a", 3), 5), (("a", 4), 14))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 0, 25, [3, 4], MAX_WATERMARK)]


def test_processing_time_windows_are_cleaned_at_their_end_whatever_the_lateness(harness):
    h = harness(lambda s: by_key(TumblingProcessingTimeWindows.of(100))(s).allowed_lateness(10_000).reduce(add))
    h.process_element(("a", 1))
    h.set_processing_time(99)
    assert h.extract_output_values() == [("a", 1)]
    assert h.num_state_entries() == 0


def test_merging_windows_refuse_per_window_state(harness):
    h = harness(lambda s: by_key(EventTimeSessionWindows.with_gap(5))(s).process(PerWindowCount()))
    h.process_element(("a", 1), timestamp=1)
    with pytest.raises(StateAccessError, match="per-window state is not available with merging"):
        h.process_watermark(MAX_WATERMARK)


# -- triggers -----------------------------------------------------------------------------------------


def test_count_trigger_fires_without_purging_and_purging_trigger_purges(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).trigger(CountTrigger.of(2)).reduce(add))
    feed(h, *[(("a", i), i) for i in range(1, 6)])
    assert h.extract_output_values() == [("a", 3), ("a", 10)]
    h.process_watermark(MAX_WATERMARK)  # only the count fires: the cleanup timer removes the rest
    assert h.extract_output_values() == [("a", 3), ("a", 10)]
    assert h.num_state_entries() == 0

    h = harness(lambda s: by_key(TUMBLING_10S)(s).trigger(PurgingTrigger.of(CountTrigger.of(2))).reduce(add))
    feed(h, *[(("a", i), i) for i in range(1, 6)])
    assert h.extract_output_values() == [("a", 3), ("a", 7)]


def test_continuous_event_time_trigger(harness):
    trigger = ContinuousEventTimeTrigger.of(Time.seconds(3))
    h = harness(lambda s: by_key(TUMBLING_10S)(s).trigger(trigger).reduce(add))
    feed(h, (("a", 1), 1_000), (("a", 2), 4_500))
    h.process_watermark(2_999)
    h.process_watermark(3_000)  # first fire at 0 + 3 s
    h.process_element(("a", 4), timestamp=7_000)
    h.process_watermark(6_000)
    h.process_watermark(9_999)  # 9 s, then the window's end
    assert h.extract_output_values() == [("a", 3), ("a", 7), ("a", 7), ("a", 7)]
    assert {r.timestamp for r in h.extract_output_records()} == {9_999}
    h.process_watermark(MAX_WATERMARK)
    assert h.num_state_entries() == 0


def test_continuous_processing_time_trigger(harness):
    trigger = ContinuousProcessingTimeTrigger.of(100)
    h = harness(lambda s: by_key(TumblingProcessingTimeWindows.of(1_000))(s).trigger(trigger).reduce(add))
    h.set_processing_time(50)
    h.process_element(("a", 1))
    h.set_processing_time(100)
    h.process_element(("a", 2))
    h.set_processing_time(250)
    assert h.extract_output_values() == [("a", 1), ("a", 3)]
    h.set_processing_time(999)
    assert h.extract_output_values()[-1] == ("a", 3) and len(h.extract_output_values()) == 10
    assert h.num_state_entries() == 0


class EveryOddElement(Trigger):
    """A user trigger with its own state: fires on the 1st, 3rd, ... element and at the end."""

    desc = ValueStateDescriptor("seen")

    def on_element(self, element, timestamp, window, ctx):
        seen = ctx.get_partitioned_state(self.desc)
        n = (seen.value() or 0) + 1
        seen.update(n)
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.FIRE if n % 2 else TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.FIRE_AND_PURGE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def clear(self, window, ctx):
        ctx.get_partitioned_state(self.desc).clear()
        ctx.delete_event_time_timer(window.max_timestamp())


def test_user_trigger_with_state(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).trigger(EveryOddElement()).reduce(add))
    feed(h, *[(("a", i), i) for i in range(1, 5)], (("b", 7), 1))
    assert h.extract_output_values() == [("a", 1), ("a", 6), ("b", 7)]
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values()[3:] == [("a", 10), ("b", 7)]
    assert h.num_state_entries() == 0


# -- evictors -----------------------------------------------------------------------------------


def test_count_evictor_before_and_after(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).trigger(CountTrigger.of(2)).evictor(CountEvictor.of(3)).process(Describe()))
    feed(h, *[(("a", i), i) for i in range(1, 7)])
    assert [v[3] for v in h.extract_output_values()] == [[1, 2], [2, 3, 4], [4, 5, 6]]

    h = harness(lambda s: by_key(TUMBLING_10S)(s).trigger(CountTrigger.of(2)).evictor(CountEvictor.of(1, do_evict_after=True)).process(Describe()))
    feed(h, *[(("a", i), i) for i in range(1, 6)])
    assert [v[3] for v in h.extract_output_values()] == [[1, 2], [2, 3, 4]]


def test_time_evictor_with_reduce_runs_over_the_evicted_contents(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).evictor(TimeEvictor.of(Time.seconds(2))).reduce(add))
    feed(h, (("a", 1), 1_000), (("a", 10), 5_000), (("a", 100), 6_000))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [("a", 110)]  # 1_000 <= 6_000 - 2_000 is evicted
    assert h.num_state_entries() == 0


def test_count_window_all_and_window_all(harness):
    class Total(ProcessAllWindowFunction):
        def process(self, context, elements):
            yield (context.window().max_timestamp(), sum(elements))

    class Count(AllWindowFunction):
        def apply(self, window, inputs, out):
            out.collect(len(inputs))

    h = harness(lambda s: window_all(s, TUMBLING_10S).process(Total()))
    feed(h, (1, 1), (2, 2), (3, 12_000))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [(9_999, 3), (19_999, 3)]
    h = harness(lambda s: window_all(s, TUMBLING_10S).apply(Count()))
    feed(h, (1, 1), (2, 2))
    h.process_watermark(MAX_WATERMARK)
    assert h.extract_output_values() == [2]
    h = harness(lambda s: count_window_all(s, 2).sum())
    feed(h, (1, None), (2, None), (3, None))
    assert h.extract_output_values() == [3]


# -- restore ------------------------------------------------------------------------------------


def session_pipeline(s):
    return by_key(EventTimeSessionWindows.with_gap(10))(s).allowed_lateness(50).process(Describe())


def test_windows_and_timers_survive_a_restore(harness, backend_kind):
    other = "hashmap" if backend_kind == "rocksdb" else "rocksdb"
    h = harness(session_pipeline)
    feed(h, (("a", 1), 0), (("a", 2), 5), (("b", 3), 40), (("c", 4), 100))
    h.process_watermark(30)  # fires a's [0, 15); kept for late firings until 64
    snap = h.snapshot()
    h.clear_output()
    feed(h, (("a", 5), 12), (("b", 6), 45))
    h.process_watermark(MAX_WATERMARK)
    expected = h.get_output()
    for kind in (backend_kind, other):
        r = harness.restore(snap, session_pipeline, backend=kind)
        r.process_watermark(30)
        feed(r, (("a", 5), 12), (("b", 6), 45))
        r.process_watermark(MAX_WATERMARK)
        assert r.get_output() == [Watermark(30), *expected]
        assert r.num_state_entries() == 0


def test_rescaled_restore_keeps_each_keys_windows(harness):
    pipeline = by_key(TUMBLING_10S)
    h = harness(lambda s: pipeline(s).reduce(add))
    keys = [f"k{i}" for i in range(30)]
    feed(h, *[((k, i), i * 500) for i, k in enumerate(keys)])
    snap = h.snapshot()
    h.process_watermark(MAX_WATERMARK)
    expected = sorted(h.extract_output_records())
    parts = [harness.restore(snap, lambda s: pipeline(s).reduce(add), key_groups=g) for g in (range(0, 40), range(40, 128))]
    out = []
    for p, g in zip(parts, (range(0, 40), range(40, 128)), strict=True):
        p.process_watermark(MAX_WATERMARK)
        out += p.extract_output_records()
        assert all(assign_to_key_group(r.value[0], 128) in g for r in p.extract_output_records())
    assert sorted(out) == expected


# -- errors -------------------------------------------------------------------------------------


class Boom(ReduceFunction):
    def reduce(self, a, b):
        msg = "reduce failed"
        raise ZeroDivisionError(msg)


class FailingProcess(ProcessWindowFunction):
    def process(self, key, context, elements):
        msg = "window failed"
        raise RuntimeError(msg)


def test_errors_name_the_operator_the_function_and_the_key(harness):
    h = harness(lambda s: by_key(TUMBLING_10S)(s).reduce(Boom(), WithWindow()).uid("boom"))
    h.process_element(("a", 1), timestamp=1)
    with pytest.raises(
        UserFunctionError,
        match=r"operator 'Window\(TumblingEventTimeWindows\(10000\), EventTimeTrigger, reduce\+process\)' \(uid 'boom', "
        r"function Boom at .*test_windows.py:\d+\) raised ZeroDivisionError: reduce failed while processing \('a', 2\) of key 'a'",
    ):
        h.process_element(("a", 2), timestamp=2)

    h = harness(lambda s: by_key(TUMBLING_10S)(s).process(FailingProcess()).uid("fails"))
    h.process_element(("a", 1), timestamp=1)
    with pytest.raises(UserFunctionError, match=r"uid 'fails', function FailingProcess at .* raised RuntimeError: window failed while firing TimeWindow\(start=0, end=10000\) of key 'a'"):
        h.process_watermark(MAX_WATERMARK)

    h = harness(lambda s: by_key(TUMBLING_10S)(s).reduce(add).uid("no-ts"))
    with pytest.raises(ConfigurationError, match=r"operator '.*' \(uid 'no-ts'\): an event-time window got a record without a timestamp"):
        h.process_element(("a", 1))


def test_list_state_in_window_state_and_trigger_state_names_do_not_clash(harness):
    class Keep(ProcessWindowFunction):
        def process(self, key, context, elements):
            seen = context.window_state().get_list_state(ListStateDescriptor("count"))
            seen.add(len(elements))
            yield seen.get()

        def clear(self, context):
            context.window_state().get_list_state(ListStateDescriptor("count")).clear()

    # CountTrigger keeps its own "count" state in the same window namespace
    h = harness(lambda s: by_key(TUMBLING_10S)(s).trigger(CountTrigger.of(1)).process(Keep()))
    feed(h, (("a", 1), 1), (("a", 2), 2))
    assert h.extract_output_values() == [[1], [1, 2]]
    h.process_watermark(MAX_WATERMARK)
    assert h.num_state_entries() == 0


def test_window_from_namespace_round_trip():
    assert TUMBLING_10S.window_from_namespace(TimeWindow(0, 10).to_namespace()) == TimeWindow(0, 10)
