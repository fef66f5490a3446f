"""Metrics in one shape on both runtimes (flowpoint/metrics): per operator and parallel instance,
records in and out add up to what the job processed, the user's metrics registered through
``get_metrics_group()`` appear under their group path, and ``get_metrics()`` holds both."""

from __future__ import annotations

import time

import pytest

from flowpoint import DataGeneratorSource, KeyedProcessFunction, Types, ValueStateDescriptor
from flowpoint.connectors.sinks import CollectSink
from flowpoint.errors import ConfigurationError
from flowpoint.metrics import MetricGroup
from flowpoint.metrics.report import ChainMeter

EVENTS = 6_000
KEYS = 10


class Counted(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        group = runtime_context.get_metrics_group().add_group("mine")
        self.seen = group.counter("seen")
        self.events = group.meter("events")
        self.values = group.distribution("values")
        group.gauge("answer", lambda: 42)

    def process_element(self, value, ctx):
        self.seen.inc()
        self.events.mark_event()
        self.values.update(value % 7)
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        if value % 3:  # two records in three go on
            yield value % KEYS, n


def job(env):
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(lambda i: i, count=EVENTS, rate_limit_per_second=20_000), source_name="numbers").uid("numbers")
        .key_by(lambda v: v % KEYS).process(Counted()).uid("counted").name("counted")
        .sink_to(sink).uid("out").name("out")
    )
    return sink


@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_records_in_and_out_add_up_and_user_metrics_appear(make_env, runtime):
    env = make_env(parallelism=2, max_records=500, **{"execution.runtime": runtime, "execution.buffer-timeout": 5})
    sink = job(env)
    client = env.execute_async(f"metrics on {runtime}")
    result = client.wait(180)
    forwarded = sum(1 for i in range(EVENTS) if i % 3)
    assert len(sink.results) == forwarded
    m = result.get_metrics()
    assert m["numbers.numRecordsOut"] == EVENTS
    assert m["counted.numRecordsIn"] == EVENTS
    assert m["counted.numRecordsOut"] == forwarded
    assert m["out.numRecordsIn"] == forwarded
    assert m["counted.mine.seen"] == EVENTS
    assert m["counted.mine.events"] == EVENTS
    assert m["numRestarts"] == 0
    by_name = {om.info.name: om for om in client.metric_store().operator_metrics()}
    counted = by_name["counted"]
    assert [s.subtask for s in counted.subtasks] == [0, 1]
    assert sum(s.counters["numRecordsIn"] for s in counted.subtasks) == EVENTS
    assert all(s.counters["numRecordsIn"] > 0 for s in counted.subtasks)  # ten keys over two instances
    assert counted.user_kinds == {"mine.seen": "counter", "mine.events": "meter", "mine.values": "distribution", "mine.answer": "gauge"}
    assert all(s.gauges["mine.answer"] == 42 for s in counted.subtasks)
    assert sum(s.distributions["mine.values"][0] for s in counted.subtasks) == EVENTS
    assert sum(s.distributions["mine.values"][1] for s in counted.subtasks) == sum(i % 7 for i in range(EVENTS))
    assert {s.distributions["mine.values"][2] for s in counted.subtasks} == {0}
    assert {s.distributions["mine.values"][3] for s in counted.subtasks} == {6}
    assert all(s.busy_ms_per_s >= 0 for s in counted.subtasks)
    # the processes that ran the tasks, with their memory, on both runtimes
    driver, *workers = client.metric_store().workers()
    assert driver["status"]["Status.Python.Memory.RSS"] > 0
    assert workers and all(w["status"]["Status.Python.Memory.RSS"] > 0 for w in workers)
    assert {t for w in workers for t in w["subtasks"]} >= {(1, 0), (1, 1)}


@pytest.mark.slow
def test_a_running_continuous_job_reports_while_it_runs(make_env):
    """The continuous runtime's tasks report every second: the counts grow while the job runs
    and rates are positive, long before the job ends."""
    env = make_env(parallelism=2, **{"execution.runtime": "continuous", "execution.buffer-timeout": 5})
    (
        env.from_source(DataGeneratorSource(lambda i: i, count=40_000, rate_limit_per_second=4_000), source_name="numbers").uid("numbers")
        .key_by(lambda v: v % KEYS).process(Counted()).uid("counted").name("counted")
        .sink_to(CollectSink()).uid("out").name("out")
    )
    client = env.execute_async("reports while running")
    try:
        deadline = time.monotonic() + 120
        seen = []
        while time.monotonic() < deadline and len(seen) < 3:
            counted = {om.info.name: om for om in client.metric_store().operator_metrics()}["counted"]
            n = counted.total("numRecordsIn")
            if n and (not seen or n > seen[-1]):
                seen.append(n)
                rate = counted.rate("numRecordsInPerSecond")
            time.sleep(0.3)
        assert len(seen) >= 3, f"the counts did not grow while the job ran: {seen}"
        assert seen[-1] < 40_000
        assert rate > 0
    finally:
        client.cancel()
        client.wait_until_done(60)


def test_user_metric_names_are_checked_and_kinds_do_not_clash():
    group = MetricGroup(owner="op")
    c = group.add_group("a").counter("n")
    assert group.add_group("a").counter("n") is c  # the same metric, as Flink returns it
    with pytest.raises(ConfigurationError, match="already registered as a Counter"):
        group.add_group("a").meter("n")
    with pytest.raises(ConfigurationError, match="not valid"):
        group.counter("has space")
    with pytest.raises(ConfigurationError, match="needs a callable"):
        group.gauge("g", 3)
    assert group.add_group("key", "value").get_metric_identifier("m") == "key.value.m"


def test_a_gauge_that_raises_is_skipped_not_fatal():
    class Op:
        class spec:
            uid = "u"

        num_in = num_out = 0
        totals: dict = {}
        watermark = -(2**63)

    registry: dict = {}
    group = MetricGroup(registry, owner="op")
    group.gauge("bad", lambda: 1 / 0)
    group.gauge("good", lambda: 7)
    report = ChainMeter({1: Op()}, {"u": registry}).report(0, 0)
    assert report.gauges == {("u", "good"): 7.0}
