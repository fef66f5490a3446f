"""State changes of epoch n become the base of epoch n+1 only once epoch n committed.

A stateful task fails on its first attempt after it already changed state; Spark retries it.
The retry must start again from the committed state: every count stays exact. The failure is
one Spark retries (an I/O error while writing state, StateIOError): a user function's own
exception is not retried by Spark (docs/errors.md), so it would not test the retry.
"""

import os
from collections import Counter

from flowpoint import (
    CollectSink,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from flowpoint.errors import StateIOError


class FailingCounter(KeyedProcessFunction):
    """Counts per key in three kinds of state; the first attempt of subtask 0 fails mid-epoch."""

    def __init__(self, marker_dir: str, fail_after: int):
        self.marker_dir = marker_dir
        self.fail_after = fail_after

    def open(self, ctx):
        self.ctx = ctx
        self.count = ctx.get_state(ValueStateDescriptor("count"))
        self.seen = ctx.get_list_state(ListStateDescriptor("seen"))
        self.by_parity = ctx.get_map_state(MapStateDescriptor("by_parity"))
        self.processed = 0

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.seen.add(value)
        parity = value % 2
        self.by_parity.put(parity, (self.by_parity.get(parity) or 0) + 1)
        self.processed += 1
        if self.processed >= self.fail_after and self.ctx.get_attempt_number() == 0:
            marker = os.path.join(self.marker_dir, f"failed-{self.ctx.get_index_of_this_subtask()}")
            if not os.path.exists(marker):  # once per subtask: both stateful tasks fail once
                open(marker, "w").close()
                msg = "injected I/O failure after changing state"
                raise StateIOError(msg, path=marker)
        yield ctx.get_current_key(), n


def test_failed_first_attempt_leaves_no_trace(make_env, tmp_path):
    values = list(range(3000))
    env = make_env(parallelism=2, max_records=500)
    sink = CollectSink()
    (
        env.from_collection(values)
        .key_by(lambda v: v % 7)
        .process(FailingCounter(str(tmp_path), fail_after=100))  # within one epoch: a partition may reopen its functions in another worker
        .uid("counter")
        .sink_to(sink)
    )
    result = env.execute("retries")

    failures = [f for f in os.listdir(tmp_path) if f.startswith("failed-")]
    assert len(failures) == 2, "the injected failures never happened, so nothing was tested"
    expected = Counter(v % 7 for v in values)
    state = result.get_keyed_state("counter")
    assert state["count"] == dict(expected)
    assert {k: sorted(v) for k, v in state["seen"].items()} == {
        k: [v for v in values if v % 7 == k] for k in expected
    }
    assert state["by_parity"] == {
        k: dict(Counter(v % 2 for v in values if v % 7 == k)) for k in expected
    }
    # every output exactly once: the failed attempt's outputs were never committed
    outputs = sorted(sink.results)
    assert outputs == sorted((k, i) for k, n in expected.items() for i in range(1, n + 1))
