"""The internal timer service and KeyedProcessFunction timers, through the harness (no Spark).

Every test that touches state runs on both backends."""

from __future__ import annotations

import pytest

from flowpoint import KeyedProcessFunction, ValueStateDescriptor
from flowpoint.api.functions import OutputTag
from flowpoint.api.time import MAX_WATERMARK, MIN_WATERMARK, TimeDomain
from flowpoint.api.watermarks import Watermark
from flowpoint.errors import UserFunctionError
from flowpoint.state.heap import HeapKeyedStateBackend
from flowpoint.state.keygroups import assign_to_key_group
from flowpoint.state.rocksdb import RocksDBKeyedStateBackend
from flowpoint.tasks.timers import EVENT_TIMERS_STATE, InternalTimerService
from flowpoint.testing import KeyedOperatorHarness, Record

BACKENDS = ["hashmap", "rocksdb"]


@pytest.fixture(params=BACKENDS)
def backend_kind(request):
    return request.param


# -- the timer service on its own -------------------------------------------------------------------


class Clock:
    watermark = MIN_WATERMARK
    processing_time = 0


@pytest.fixture
def backend(backend_kind, tmp_path):
    if backend_kind == "hashmap":
        yield HeapKeyedStateBackend("op")
        return
    b = RocksDBKeyedStateBackend("op", str(tmp_path / "db"), 128)
    b.open()
    yield b
    b.close()


def service(backend, fired):
    def on_event(key, ns, ts):
        assert backend.current_key == key
        fired.append(("event", key, ns, ts))

    def on_processing(key, ns, ts):
        fired.append(("processing", key, ns, ts))

    s = InternalTimerService(backend, Clock(), on_event, on_processing)
    s.open()
    return s


def register(backend, s, key, ns, ts, processing=False):
    backend.current_key = key
    if processing:
        s.register_processing_time_timer(ns, ts)
    else:
        s.register_event_time_timer(ns, ts)
    backend.current_key = None


def test_timers_fire_in_timestamp_order_with_a_deterministic_tie_order(backend):
    fired: list = []
    s = service(backend, fired)
    for key, ns, ts in [("b", None, 20), ("a", None, 20), ("c", None, 5), ("a", None, 20), ("a", (0, 1), 20), (7, None, 30)]:
        register(backend, s, key, ns, ts)
    assert s.num_event_time_timers() == 5  # ("a", None, 20) once
    s.advance_watermark(19)
    assert fired == [("event", "c", None, 5)]
    s.advance_watermark(MAX_WATERMARK)
    # ties: by the key's canonical bytes ("a" < "b"), then the namespace's ("(" < "n" for None)
    assert fired[1:] == [("event", "a", (0, 1), 20), ("event", "a", None, 20), ("event", "b", None, 20), ("event", 7, None, 30)]
    assert s.num_event_time_timers() == 0 and backend.num_keys() == 0

    # the same timers registered in another order fire in the same order
    fired2: list = []
    s2 = service(backend, fired2)
    for key, ns, ts in [(7, None, 30), ("a", (0, 1), 20), ("a", None, 20), ("c", None, 5), ("b", None, 20)]:
        register(backend, s2, key, ns, ts)
    s2.advance_watermark(MAX_WATERMARK)
    assert fired2 == fired


def test_deleted_timers_do_not_fire(backend):
    fired: list = []
    s = service(backend, fired)
    for i in range(200):
        register(backend, s, i % 7, None, i)
    for i in range(200):
        if i % 5 != 1:  # deleting most timers also compacts the queue
            backend.current_key = i % 7
            s.delete_event_time_timer(None, i)
            s.delete_event_time_timer(None, 10_000)  # unknown: ignored
    backend.current_key = "k"
    s.register_event_time_timer(None, 2)  # deleted, then registered again
    backend.current_key = None
    assert s.num_event_time_timers() == 41
    assert len(s.event.heap) < 200
    s.advance_watermark(MAX_WATERMARK)
    assert [f[3] for f in fired] == [1, 2, *range(6, 200, 5)]


def test_timers_registered_while_firing_fire_in_the_same_advance_when_due(backend):
    fired: list = []

    def on_event(key, ns, ts):
        fired.append(ts)
        if ts < 40:
            s.register_event_time_timer(ns, ts + 10)  # due at 50: fires now, up to 40

    s = InternalTimerService(backend, Clock(), on_event, lambda *a: None)
    s.open()
    register(backend, s, "k", None, 10)
    s.advance_watermark(30)
    assert fired == [10, 20, 30]
    assert s.num_event_time_timers() == 1
    s.advance_watermark(100)
    assert fired == [10, 20, 30, 40]


def test_event_and_processing_timers_are_separate(backend):
    fired: list = []
    s = service(backend, fired)
    register(backend, s, "k", None, 10)
    register(backend, s, "k", None, 10, processing=True)
    s.advance_processing_time(10)
    assert fired == [("processing", "k", None, 10)]
    s.advance_watermark(10)
    assert fired[-1] == ("event", "k", None, 10)


def test_the_queue_is_rebuilt_from_state(backend):
    fired: list = []
    s = service(backend, fired)
    for key, ts in [("a", 3), ("b", 1), ("c", 2)]:
        register(backend, s, key, (0, 10), ts)
    if isinstance(backend, RocksDBKeyedStateBackend):
        backend.apply(backend.delta())
    backend.commit()
    assert dict(backend.iter_entries(EVENT_TIMERS_STATE)) == {"a": {(3, (0, 10)): True}, "b": {(1, (0, 10)): True}, "c": {(2, (0, 10)): True}}
    fresh = service(backend, fired)  # what open() does after a restart
    assert fresh.num_event_time_timers() == 3
    fresh.advance_watermark(2)
    assert fired == [("event", "b", (0, 10), 1), ("event", "c", (0, 10), 2)]


# -- KeyedProcessFunction through the harness ---------------------------------------------------------


SIDE = OutputTag("side")


class TimeoutFunction(KeyedProcessFunction):
    """Counts per key; an event-time timer 10 ms after each record (deleting the previous one)
    emits the count; "late-ms" records register processing-time timers."""

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))
        self.timer = runtime_context.get_state(ValueStateDescriptor("timer"))

    def process_element(self, value, ctx):
        key, kind = value
        ts = ctx.timer_service()
        if kind == "proc":
            ts.register_processing_time_timer(ts.current_processing_time() + 100)
            return
        self.count.update((self.count.value() or 0) + 1)
        previous = self.timer.value()
        if previous is not None:
            ts.delete_event_time_timer(previous)
        self.timer.update(ctx.timestamp() + 10)
        ts.register_event_time_timer(ctx.timestamp() + 10)
        ctx.output(SIDE, (key, "seen", ts.current_watermark()))
        yield (key, "in", ctx.timestamp())

    def on_timer(self, timestamp, ctx):
        if ctx.time_domain() is TimeDomain.PROCESSING_TIME:
            yield (ctx.get_current_key(), "processing", timestamp, ctx.timestamp())
            return
        yield (ctx.get_current_key(), self.count.value(), ctx.timer_service().current_watermark())
        ctx.output(SIDE, (ctx.get_current_key(), "fired"))
        self.count.clear()
        self.timer.clear()


def timeout_pipeline(s):
    return s.key_by(lambda x: x[0]).process(TimeoutFunction())


@pytest.fixture
def harnesses():
    opened: list[KeyedOperatorHarness] = []

    def make(*args, **kwargs):
        h = KeyedOperatorHarness(*args, **kwargs)
        opened.append(h)
        return h

    def restore(*args, **kwargs):
        h = KeyedOperatorHarness.restore(*args, **kwargs)
        opened.append(h)
        return h

    make.restore = restore  # type: ignore[attr-defined]
    yield make
    for h in opened:
        h.close()


def test_event_time_timers_fire_before_the_watermark_is_forwarded(harnesses, backend_kind):
    h = harnesses(timeout_pipeline, backend=backend_kind)
    h.process_element(("a", "x"), timestamp=100)
    h.process_element(("a", "x"), timestamp=105)  # moves a's timer from 110 to 115
    h.process_element(("b", "x"), timestamp=101)
    assert h.num_event_time_timers() == 2
    h.process_watermark(112)
    h.process_watermark(Watermark(200))
    assert h.get_output() == [
        Record(("a", "in", 100), 100),
        Record(("a", "in", 105), 105),
        Record(("b", "in", 101), 101),
        Record(("b", 1, 112), 111),  # on_timer output carries the timer's timestamp
        Watermark(112),
        Record(("a", 2, 200), 115),
        Watermark(200),
    ]
    assert h.get_side_output(SIDE) == [
        Record(("a", "seen", MIN_WATERMARK), 100),
        Record(("a", "seen", MIN_WATERMARK), 105),
        Record(("b", "seen", MIN_WATERMARK), 101),
        Record(("b", "fired"), 111),
        Record(("a", "fired"), 115),
    ]
    assert h.num_state_entries() == 0


def test_processing_time_timers(harnesses, backend_kind):
    h = harnesses(timeout_pipeline, backend=backend_kind)
    h.set_processing_time(1_000)
    h.process_element(("a", "proc"))
    h.process_element(("b", "proc"))
    assert h.num_processing_time_timers() == 2
    h.set_processing_time(1_099)
    assert h.extract_output_values() == []
    h.set_processing_time(1_100)
    # Flink erases the timestamp of processing-time timer output; ctx.timestamp() is the timer's
    assert h.get_output() == [Record(("a", "processing", 1_100, 1_100), None), Record(("b", "processing", 1_100, 1_100), None)]
    assert h.num_state_entries() == 0


class Chain(KeyedProcessFunction):
    """Each timer registers the next one 10 ms later, up to 50."""

    def process_element(self, value, ctx):
        ctx.timer_service().register_event_time_timer(ctx.timestamp())

    def on_timer(self, timestamp, ctx):
        assert ctx.time_domain() is TimeDomain.EVENT_TIME
        if timestamp < 50:
            ctx.timer_service().register_event_time_timer(timestamp + 10)
        yield timestamp


def test_timers_registered_in_on_timer(harnesses, backend_kind):
    h = harnesses(lambda s: s.key_by(lambda x: x).process(Chain()), backend=backend_kind)
    h.process_element("k", timestamp=10)
    h.process_watermark(30)
    assert h.extract_output_values() == [10, 20, 30]
    h.process_watermark(1_000)
    assert h.extract_output_values() == [10, 20, 30, 40, 50]
    assert h.num_event_time_timers() == 0


@pytest.mark.parametrize(("first", "second"), [("hashmap", "hashmap"), ("rocksdb", "rocksdb"), ("hashmap", "rocksdb"), ("rocksdb", "hashmap")])
def test_pending_timers_and_state_survive_a_restore(harnesses, first, second):
    h = harnesses(timeout_pipeline, backend=first)
    for i, key in enumerate(["a", "b", "c", "d"]):
        h.process_element((key, "x"), timestamp=100 + i)
    h.process_element(("a", "x"), timestamp=150)  # a's timer moves from 110 to 160
    h.process_watermark(105)
    snap = h.snapshot()
    h.clear_output()
    h.process_watermark(MAX_WATERMARK)
    expected = h.get_output()
    assert expected == [
        Record(("b", 1, MAX_WATERMARK), 111),
        Record(("c", 1, MAX_WATERMARK), 112),
        Record(("d", 1, MAX_WATERMARK), 113),
        Record(("a", 2, MAX_WATERMARK), 160),
        Watermark(MAX_WATERMARK),
    ]

    r = harnesses.restore(snap, timeout_pipeline, backend=second)
    assert r.num_event_time_timers() == 4
    r.process_watermark(MAX_WATERMARK)
    assert r.get_output() == expected
    assert r.num_state_entries() == 0


def test_restore_with_rescaling_moves_timers_with_their_keys(harnesses, backend_kind):
    h = harnesses(timeout_pipeline, backend=backend_kind)
    keys = [f"k{i}" for i in range(40)]
    for i, key in enumerate(keys):
        h.process_element((key, "x"), timestamp=i)
    snap = h.snapshot()
    h.process_watermark(MAX_WATERMARK)
    expected = sorted(v for v in h.extract_output_values() if v[1] != "in")

    halves = [range(0, 64), range(64, 128)]
    parts = [harnesses.restore(snap, timeout_pipeline, backend=backend_kind, key_groups=g) for g in halves]
    counts = [p.num_event_time_timers() for p in parts]
    assert sum(counts) == 40 and all(counts)
    for p, g in zip(parts, halves, strict=True):
        p.process_watermark(MAX_WATERMARK)
        assert all(assign_to_key_group(v[0], 128) in g for v in p.extract_output_values())
    assert sorted(v for p in parts for v in p.extract_output_values()) == expected


class Failing(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if value == "bad":
            msg = "no bad values"
            raise ValueError(msg)
        ctx.timer_service().register_event_time_timer(5)

    def on_timer(self, timestamp, ctx):
        msg = "timer broke"
        raise KeyError(msg)


def test_errors_name_the_operator_function_and_key(harnesses):
    h = harnesses(lambda s: s.key_by(lambda x: x.upper()).process(Failing()).uid("failing-op"))
    with pytest.raises(UserFunctionError, match=r"operator 'KeyedProcess' \(uid 'failing-op', function Failing at .*test_timers.py:\d+\) raised ValueError: no bad values while processing 'bad' of key 'BAD'"):
        h.process_element("bad", timestamp=1)
    h.process_element("ok", timestamp=1)
    with pytest.raises(UserFunctionError, match=r"uid 'failing-op'.* raised KeyError: 'timer broke' in on_timer for the event-time timer 5 of key 'OK'"):
        h.process_watermark(10)


def test_a_timer_removed_from_state_behind_the_index_does_not_fire(backend):
    """A delta from an epoch the operator did not run (it fired the timer there) reached the
    state without the operator being reopened: the timer must not fire a second time."""
    fired: list = []
    s = service(backend, fired)
    register(backend, s, "k", None, 10)
    register(backend, s, "j", None, 10)
    backend.current_key = "k"
    s.event.state.remove((10, None))  # what applying the other epoch's delta does
    backend.current_key = None
    s.advance_watermark(10)
    assert fired == [("event", "j", None, 10)]
