"""The event-time reference model (``tests/event_time_reference.py``) checked against hand
computations and against offline group-bys. No Spark: these run in well under a second."""

from __future__ import annotations

from collections import Counter
from datetime import datetime, timezone

from event_time_reference import (
    MAX_WATERMARK,
    BoundedOutOfOrderness,
    Punctuated,
    Session,
    Sliding,
    Tumbling,
    count,
    elements_in_order,
    reduce_with,
    simulate,
    window_start,
)
from hypothesis import given, settings
from hypothesis import strategies as st


def ms(iso: str) -> int:
    return int(datetime.fromisoformat(iso).replace(tzinfo=timezone.utc).timestamp() * 1000)


def key0(r):
    return r[0]


def ts1(r):
    return r[1]


def wm_before(record, ts):
    """Punctuated: after each record, the watermark is its timestamp - 1."""
    return ts - 1


def run(records, assigner, **kw):
    """One split, key 'k', records are timestamps."""
    kw.setdefault("watermarks", lambda: Punctuated(wm_before))
    return simulate([[("k", t) for t in records]], ts1, key0, assigner, **kw)


def times(elements):
    return tuple(sorted(t for _, t in elements))


def windows(result):
    return Counter({(s, e, r): n for (_, s, e, r), n in result.windows.items()})


def late(result):
    return sorted(t for (_, t) in result.late.elements())


# -- window assignment -----------------------------------------------------------------------


def test_seed_alignment_example():
    """Seed 000: tumbling windows are aligned to the epoch; with 10 s windows
    2017-07-03T20:19:35Z goes into [20:19:30, 20:19:40) and 20:22:30 into [20:22:30, 20:22:40)."""
    ten_s = Tumbling(10_000)
    assert ten_s.assign(ms("2017-07-03T20:19:35")) == [(ms("2017-07-03T20:19:30"), ms("2017-07-03T20:19:40"))]
    assert ten_s.assign(ms("2017-07-03T20:22:30")) == [(ms("2017-07-03T20:22:30"), ms("2017-07-03T20:22:40"))]
    assert ms("2017-07-03T20:19:35") == 1499113175000


def test_tumbling_offset_and_negative_timestamps():
    assert Tumbling(10, offset=3).assign(12) == [(3, 13)]
    assert Tumbling(10, offset=3).assign(13) == [(13, 23)]
    assert Tumbling(10, offset=3).assign(2) == [(-7, 3)]
    # Flink's getWindowStartWithOffset handles negative remainders: start <= ts < end
    assert Tumbling(10).assign(-15) == [(-20, -10)]
    assert Tumbling(10).assign(-10) == [(-10, 0)]
    assert window_start(-1, 0, 10) == -10


def test_sliding_assignment():
    assert sorted(Sliding(10, 5).assign(7)) == [(0, 10), (5, 15)]
    assert sorted(Sliding(10, 5).assign(10)) == [(5, 15), (10, 20)]
    assert sorted(Sliding(10, 3).assign(9)) == [(0, 10), (3, 13), (6, 16), (9, 19)]
    assert Sliding(10, 10).assign(7) == Tumbling(10).assign(7)


# -- Flink's lateness rule -------------------------------------------------------------------


def test_lateness_record_by_record():
    """Tumbling 10, no allowed lateness, watermark = ts - 1 after each record.
    1, 5 -> [0,10); 12 (wm 4) -> [10,20), wm 11 fires [0,10) with 2; 9 is late (9 <= 11);
    10, 19 -> [10,20), wm 18; 20 (wm 18) -> [20,30), wm 19 fires [10,20) with 3; 3 is late."""
    r = run([1, 5, 12, 9, 10, 19, 20, 3], Tumbling(10))
    assert windows(r) == Counter({(0, 10, 2): 1, (10, 20, 3): 1, (20, 30, 1): 1})
    assert late(r) == [3, 9]


def test_late_exactly_at_max_timestamp():
    """An element is late when max_timestamp + allowed_lateness <= watermark: a watermark of 9
    closes [0,10) (max_timestamp 9), a watermark of 8 does not."""
    r = run([10, 5], Tumbling(10))  # 5 arrives with watermark 9
    assert late(r) == [5]
    assert windows(r) == Counter({(10, 20, 1): 1})
    r = run([9, 5], Tumbling(10))  # 5 arrives with watermark 8
    assert late(r) == []
    assert windows(r) == Counter({(0, 10, 2): 1})


def test_late_firing_within_allowed_lateness():
    """Allowed lateness 6: 2 -> [0,10); 15 (wm 1) -> [10,20), wm 14 fires [0,10) with 1;
    7 arrives at wm 14: 9 + 6 = 15 > 14, so it is taken and fires [0,10) again with 2;
    17 -> [10,20), wm 16 reaches the cleanup time 15 of [0,10); 8 is late (15 <= 16)."""
    r = run([2, 15, 7, 17, 8], Tumbling(10), allowed_lateness=6)
    assert windows(r) == Counter({(0, 10, 1): 1, (0, 10, 2): 1, (10, 20, 2): 1})
    assert late(r) == [8]
    # lateness 5: 9 + 5 = 14 <= 14, the same 7 is late
    r = run([2, 15, 7, 17, 8], Tumbling(10), allowed_lateness=5)
    assert windows(r) == Counter({(0, 10, 1): 1, (10, 20, 2): 1})
    assert late(r) == [7, 8]


def test_every_late_firing_carries_all_contents():
    """Three late-but-allowed elements fire the window three more times, each with everything."""
    r = run([1, 30, 2, 3, 4], Tumbling(10), allowed_lateness=100, window_fn=times)
    assert windows(r) == Counter(
        {(0, 10, (1,)): 1, (0, 10, (1, 2)): 1, (0, 10, (1, 2, 3)): 1, (0, 10, (1, 2, 3, 4)): 1, (30, 40, (30,)): 1}
    )


def test_sliding_window_partly_late():
    """12 (wm -> 11), then 7: its window [0,10) is late but [5,15) is not, so 7 is taken by
    [5,15) and is not a late record; [0,10) never exists."""
    r = run([12, 7], Sliding(10, 5))
    assert windows(r) == Counter({(5, 15, 2): 1, (10, 20, 1): 1})
    assert late(r) == []


# -- sessions --------------------------------------------------------------------------------


def test_session_merging():
    """Gap 5: 1 -> [1,6), 3 -> [1,8), 10 -> [10,15), then 6 -> [6,11) bridges both: [1,15)."""
    no_wm = {"watermarks": lambda: BoundedOutOfOrderness(1000)}
    r = run([1, 3, 10, 6], Session(5), window_fn=times, **no_wm)
    assert windows(r) == Counter({(1, 15, (1, 3, 6, 10)): 1})
    # windows that only touch merge too (TimeWindow.intersects): [0,5) and [5,10)
    assert windows(run([0, 5], Session(5), **no_wm)) == Counter({(0, 10, 2): 1})
    assert windows(run([0, 6], Session(5), **no_wm)) == Counter({(0, 5, 1): 1, (6, 11, 1): 1})


def test_session_lateness_is_decided_after_merging():
    """Gap 10: 10 -> [10,20), 12 -> [10,22) (wm 11). Then 1 alone would be [1,11), late at
    watermark 11, but it merges into [1,22), which is not late: Flink keeps it."""
    r = run([10, 12, 1], Session(10))
    assert windows(r) == Counter({(1, 22, 3): 1})
    assert late(r) == []
    # far enough back it touches nothing and is late: [0,5) ... wm 11
    r = run([10, 12, 0], Session(5))
    assert windows(r) == Counter({(10, 17, 2): 1})
    assert late(r) == [0]


def test_session_late_merge_fires_again():
    """Gap 5, allowed lateness 30: 0 -> [0,5); 30 (wm -1) fires [0,5) at wm 29; 2 -> [2,7)
    merges into [0,7): max_timestamp 6 <= 29, so it fires again with 2 elements at once.
    With allowed lateness 20, [0,5) was dropped at 4 + 20 <= 29 and [2,7) alone is late."""
    r = run([0, 30, 2], Session(5), allowed_lateness=30)
    assert windows(r) == Counter({(0, 5, 1): 1, (0, 7, 2): 1, (30, 35, 1): 1})
    r = run([0, 30, 2], Session(5), allowed_lateness=20)
    assert windows(r) == Counter({(0, 5, 1): 1, (30, 35, 1): 1})
    assert late(r) == [2]


# -- several splits, epochs and batches ------------------------------------------------------


def test_several_splits_in_one_epoch():
    """One epoch, batches of 2. Split 0's record sees the start watermarks (MIN); split 0 is
    then fully read (+inf). Split 1's first batch still sees its own MIN; after it, split 1's
    watermark is 35 - 1 = 34, so 5 in its second batch is late and [0,10) has fired."""
    splits = [[("a", 1)], [("a", 30), ("a", 35), ("a", 5), ("a", 40)]]
    r = simulate(splits, ts1, key0, Tumbling(10), batch_size=2)
    assert windows(r) == Counter({(0, 10, 1): 1, (30, 40, 2): 1, (40, 50, 1): 1})
    assert late(r) == [5]
    # in one batch, nothing in split 1 moves the watermark before 5 is read
    r = simulate(splits, ts1, key0, Tumbling(10), batch_size=8192)
    assert late(r) == []
    assert windows(r) == Counter({(0, 10, 2): 1, (30, 40, 2): 1, (40, 50, 1): 1})


def test_epochs_follow_the_coordinator_plan():
    """Budget 2 over 2 splits: one record per split per epoch (bounded out-of-orderness 0).
    e1: s0 10 (MIN), s1 11 (MIN); ends at min(9, 10) = 9.
    e2: s0 20 (9), s1 21 (min(19, 10) = 10); ends at 19: [10,20) fires with 2.
    e3: s0 1 is late (19); s0 done (+inf); s1 22 (min(inf, 20)); ends at 21.
    e4: s1 alone gets the whole budget: 2 is late (21). End of input fires [20,30) with 3."""
    splits = [[("a", 10), ("a", 20), ("a", 1)], [("a", 11), ("a", 21), ("a", 22), ("a", 2)]]
    r = simulate(splits, ts1, key0, Tumbling(10), epoch_max_records=2)
    assert windows(r) == Counter({(10, 20, 2): 1, (20, 30, 3): 1})
    assert late(r) == [1, 2]
    assert [f[4] for f in r.firings] == [19, MAX_WATERMARK]


def test_idle_split_is_left_out_of_the_minimum():
    """Split 1 comes after split 0 in the epoch and holds the watermark at MIN while split 0
    runs (batches of 1), unless it is idle. Idle: 2 arrives at watermark 49 (late, [0,10) has
    fired with 1); split 0 is then done, so 3 in split 1 sees +inf and is late too."""
    splits = [[("a", 1), ("a", 50), ("a", 2)], [("a", 3)]]
    r = simulate(splits, ts1, key0, Tumbling(10), batch_size=1)
    assert late(r) == []
    assert windows(r) == Counter({(0, 10, 3): 1, (50, 60, 1): 1})
    r = simulate(splits, ts1, key0, Tumbling(10), batch_size=1, idle_splits=[1])
    assert late(r) == [2, 3]
    assert windows(r) == Counter({(0, 10, 1): 1, (50, 60, 1): 1})


def test_bounded_out_of_orderness_watermark():
    """max seen - bound - 1, emitted after each batch (batches of one record here): with bound 5
    the record 4 after 10 sees 10 - 5 - 1 = 4 >= max_timestamp 4 of [0,5), so it is late; with
    bound 6 it sees 3 and is on time."""
    r = simulate([[("a", 10), ("a", 4)]], ts1, key0, Tumbling(5), watermarks=lambda: BoundedOutOfOrderness(5), batch_size=1)
    assert late(r) == [4]
    r = simulate([[("a", 10), ("a", 4)]], ts1, key0, Tumbling(5), watermarks=lambda: BoundedOutOfOrderness(6), batch_size=1)
    assert late(r) == [] and windows(r) == Counter({(0, 5, 1): 1, (10, 15, 1): 1})


def test_window_functions_and_keys():
    records = [("x", 1, 5), ("y", 2, 7), ("x", 3, 1), ("x", 12, 2)]
    r = simulate([records], ts1, key0, Tumbling(10), window_fn=reduce_with(lambda a, b: (a[0], a[1], a[2] * b[2])))
    assert set(r.windows) == {("x", 0, 10, ("x", 1, 5)), ("y", 0, 10, ("y", 2, 7)), ("x", 10, 20, ("x", 12, 2))}
    r = simulate([records], ts1, key0, Tumbling(10), window_fn=elements_in_order)
    assert ("x", 0, 10, (("x", 1, 5), ("x", 3, 1))) in r.windows


# -- against offline computations ------------------------------------------------------------

events = st.lists(st.tuples(st.sampled_from("abc"), st.integers(0, 200)), max_size=60)


@settings(max_examples=150, deadline=None)
@given(events, st.integers(1, 30), st.integers(1, 4))
def test_no_lateness_means_plain_group_by(records, size, slide_div):
    """With a watermark that never passes a record, every window fires once, at the end, with
    exactly the elements a plain group-by assigns to it."""
    slide = max(1, size // slide_div)
    for assigner in (Tumbling(size), Sliding(size, slide)):
        r = simulate([records], ts1, key0, assigner, watermarks=lambda: BoundedOutOfOrderness(10_000))
        step = assigner.slide if isinstance(assigner, Sliding) else size
        expected = Counter()
        for k, t in records:
            for start in range(t - size + 1, t + 1):
                if start % step == 0:
                    expected[(k, start, start + size)] += 1
        assert Counter({(k, s, e): n for (k, s, e, n) in r.windows}) == expected
        assert all(v == 1 for v in r.windows.values())
        assert not r.late


@settings(max_examples=150, deadline=None)
@given(events, st.integers(1, 20))
def test_sessions_match_sort_and_split(records, gap):
    """Offline sessions: sort a key's timestamps and start a new session where the next
    timestamp is beyond the current session's end (touching continues it)."""
    r = simulate([records], ts1, key0, Session(gap), watermarks=lambda: BoundedOutOfOrderness(10_000))
    expected = Counter()
    for k in {k for k, _ in records}:
        times = sorted(t for kk, t in records if kk == k)
        start, end, n = times[0], times[0] + gap, 0
        for t in times:
            if t > end:
                expected[(k, start, end, n)] += 1
                start, n = t, 0
            end, n = max(end, t + gap), n + 1
        expected[(k, start, end, n)] += 1
    assert r.windows == expected


@settings(max_examples=150, deadline=None)
@given(events, st.integers(1, 30), st.integers(0, 40))
def test_single_split_punctuated_offline_rule(records, size, lateness):
    """One split, watermark = max(ts seen) - 1 record by record: an element is late exactly
    when its window's end - 1 + lateness <= the watermark left by the records before it; each
    window fires once when the watermark passes it plus once per element taken after that."""
    r = simulate([records], ts1, key0, Tumbling(size), watermarks=lambda: Punctuated(wm_before), allowed_lateness=lateness)
    wm, expected_late, taken = -(1 << 63), Counter(), Counter()
    on_time, late_firings = set(), Counter()
    for rec in records:
        k, t = rec
        start = t - t % size
        if start + size - 1 + lateness <= wm:
            expected_late[rec] += 1
        else:
            taken[(k, start)] += 1
            if start + size - 1 <= wm:
                late_firings[(k, start)] += 1  # fires at once
            else:
                on_time.add((k, start))  # fires once when the watermark passes it
        wm = max(wm, t - 1)
    assert r.late == expected_late
    fired = Counter()
    for (k, s, _, _), n in r.windows.items():
        fired[(k, s)] += n
    assert fired == Counter({w: (w in on_time) + late_firings[w] for w in taken})
    # the last firing of each window counts everything it ever took
    last = {}
    for k, s, _, n, _ in r.firings:
        last[(k, s)] = n
    assert last == dict(taken)


def test_count_helper():
    assert count([1, 2, 3]) == 3


def test_silent_unbounded_split():
    """A split that never produces (None): it holds the watermark at MIN, so nothing fires and
    there is no end of input; once idle, the finished splits' +inf fires everything."""
    splits = [[("a", 1), ("a", 150)], None]
    assert not run_windows(splits)
    assert run_windows(splits, idle_splits=[1]) == Counter({(0, 10, 1): 1, (150, 160, 1): 1})


def run_windows(splits, **kw):
    return windows(simulate(splits, ts1, key0, Tumbling(10), **kw))
