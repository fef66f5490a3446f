"""State time-to-live on both backends: what a function sees, and what snapshots keep.

Time is the operator's processing time (the harness sets it as the epoch would); a value
written at ``t`` with a TTL of 1,000 ms has expired from ``t + 1000`` on.
"""

from __future__ import annotations

import pytest

from flowpoint import (
    AggregateFunction,
    AggregatingStateDescriptor,
    CollectSink,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    StateTtlConfig,
    Time,
    ValueStateDescriptor,
)
from flowpoint.errors import ConfigurationError
from flowpoint.testing import KeyedOperatorHarness

BACKENDS = ["hashmap", "rocksdb"]


def ttl(**options) -> StateTtlConfig:
    b = StateTtlConfig.new_builder(Time.milliseconds(options.pop("ms", 1000)))
    for name, arg in options.items():
        getattr(b, name)(*([] if arg is True else arg))
    return b.build()


class Sum(AggregateFunction):
    def create_accumulator(self):
        return 0

    def add(self, value, accumulator):
        return accumulator + value

    def get_result(self, accumulator):
        return accumulator

    def merge(self, a, b):
        return a + b


class Probe(KeyedProcessFunction):
    """("put", k, v) writes every state; ("get", k) emits what each state shows."""

    def __init__(self, config):
        self.config = config

    def open(self, ctx):
        descriptors = [ValueStateDescriptor("v"), ListStateDescriptor("l"), MapStateDescriptor("m"),
                       ReducingStateDescriptor("r", lambda a, b: a + b), AggregatingStateDescriptor("a", Sum())]
        for d in descriptors:
            d.enable_time_to_live(self.config)
        self.v = ctx.get_state(descriptors[0])
        self.l = ctx.get_list_state(descriptors[1])
        self.m = ctx.get_map_state(descriptors[2])
        self.r = ctx.get_reducing_state(descriptors[3])
        self.a = ctx.get_aggregating_state(descriptors[4])

    def process_element(self, value, ctx):
        if value[0] == "put":
            self.v.update(value[2])
            self.l.add(value[2])
            self.m.put(value[2], value[2] * 10)
            self.r.add(value[2])
            self.a.add(value[2])
        else:
            yield (self.v.value(), list(self.l.get()), sorted(self.m.items()), self.r.get(), self.a.get(), self.m.contains(1))


def harness(config, backend):
    return KeyedOperatorHarness(lambda s: s.key_by(lambda x: x[1]).process(Probe(config)), backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_values_expire_a_ttl_after_their_last_write(backend):
    with harness(ttl(), backend) as h:
        h.set_processing_time(10_000)
        h.process_element(("put", "k", 1))
        h.set_processing_time(10_500)
        h.process_element(("put", "k", 2))
        h.set_processing_time(10_999)
        h.process_element(("get", "k"))
        assert h.extract_output_values() == [(2, [1, 2], [(1, 10), (2, 20)], 3, 3, True)]
        h.clear_output()
        h.set_processing_time(11_000)  # the first write expired, the second not yet
        h.process_element(("get", "k"))
        # the reducing and aggregating accumulators were last written at 10,500
        assert h.extract_output_values() == [(2, [2], [(2, 20)], 3, 3, False)]
        h.clear_output()
        h.set_processing_time(11_500)
        h.process_element(("get", "k"))
        assert h.extract_output_values() == [(None, [], [], None, None, False)]
        assert h.num_state_entries() == 0  # reading removed every expired value


@pytest.mark.parametrize("backend", BACKENDS)
def test_on_read_and_write_extends_the_ttl_on_every_read(backend):
    with harness(ttl(update_ttl_on_read_and_write=True), backend) as h:
        h.set_processing_time(0)
        h.process_element(("put", "k", 1))
        for t in (900, 1800, 2700):
            h.set_processing_time(t)
            h.process_element(("get", "k"))
        assert h.extract_output_values()[-1] == (1, [1], [(1, 10)], 1, 1, True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_return_expired_if_not_cleaned_up_returns_it_once(backend):
    with harness(ttl(return_expired_if_not_cleaned_up=True, disable_cleanup_in_background=True), backend) as h:
        h.set_processing_time(0)
        h.process_element(("put", "k", 1))
        h.set_processing_time(5_000)
        h.process_element(("get", "k"))
        h.process_element(("get", "k"))
        first, second = h.extract_output_values()
        assert first[0] == 1 and first[3] == 1 and first[4] == 1
        assert second == (None, [], [], None, None, False)


@pytest.mark.parametrize("backend", BACKENDS)
def test_expired_values_of_keys_never_touched_again_are_gone_from_snapshots(backend):
    with harness(ttl(), backend) as h:
        h.set_processing_time(0)
        h.process_element(("put", "old", 1))
        h.set_processing_time(600)
        h.process_element(("put", "new", 2))
        first = h.snapshot()  # the background pass at 600: nothing has expired
        assert {k for table in first.tables.values() for k in table} == {"old", "new"}
        h.set_processing_time(1_200)
        h.process_element(("put", "newer", 3))
        kept = h.snapshot()  # only a TTL after the last pass: the pass does not run yet
        assert "old" in kept.tables["v"]
        h.set_processing_time(1_700)
        h.process_element(("put", "newest", 4))
        cleaned = h.snapshot()  # a TTL after the last pass: "old" and "new" expired and are gone
        assert {k for table in cleaned.tables.values() for k in table} == {"newer", "newest"}


@pytest.mark.parametrize("backend", BACKENDS)
def test_cleanup_full_snapshot_cleans_every_snapshot(backend):
    with harness(ttl(cleanup_full_snapshot=True), backend) as h:
        h.set_processing_time(0)
        h.process_element(("put", "old", 1))
        h.snapshot()
        h.set_processing_time(1_000)
        h.process_element(("put", "new", 2))
        assert "old" not in h.snapshot().tables["v"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_background_cleanup_expired_values_stay_but_are_never_returned(backend):
    with harness(ttl(disable_cleanup_in_background=True), backend) as h:
        h.set_processing_time(0)
        h.process_element(("put", "old", 1))
        h.set_processing_time(5_000)
        assert "old" in h.snapshot().tables["v"]
        h.process_element(("get", "old"))
        assert h.extract_output_values() == [(None, [], [], None, None, False)]


def test_a_ttl_must_be_a_positive_duration_and_a_config():
    with pytest.raises(ConfigurationError, match="positive"):
        StateTtlConfig.new_builder(Time.milliseconds(0)).build()
    with pytest.raises(ConfigurationError, match="StateTtlConfig"):
        ValueStateDescriptor("v").enable_time_to_live(1000)


class CountWithTtl(KeyedProcessFunction):
    def open(self, ctx):
        d = ValueStateDescriptor("count")
        d.enable_time_to_live(StateTtlConfig.new_builder(Time.hours(1)).build())
        self.count = ctx.get_state(d)

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield value % 7, n


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_ttl_state_in_a_job_across_epochs_and_checkpoints(make_env, tmp_path, backend):
    env = make_env(parallelism=2, max_records=300, state_backend_type=backend, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    sink = CollectSink()
    env.from_sequence(0, 1_399).key_by(lambda x: x % 7).process(CountWithTtl()).uid("count").sink_to(sink)
    env.execute()
    finals = {}
    for key, n in sink.results:
        finals[key] = max(finals.get(key, 0), n)
    assert finals == {k: 200 for k in range(7)}
