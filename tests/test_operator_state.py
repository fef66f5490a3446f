"""Operator state (CheckpointedFunction): list and union list state survive failures and restores,
and are redistributed on rescale as in Flink (even split, union to every instance)."""

from __future__ import annotations

import os
import time

import pytest

from flowpoint import (
    CollectSink,
    DataGeneratorSource,
    ListStateDescriptor,
    MapFunction,
    RestartStrategies,
)
from flowpoint.api.operator_state import SPLIT, UNION, CheckpointedFunction, redistribute
from flowpoint.checkpoint.directory import find_latest
from flowpoint.errors import CheckpointError, JobExecutionError

EVENTS = 1_200


class CountingMap(MapFunction, CheckpointedFunction):
    """Counts the records its instance saw, in memory; the count is operator state. Fails once at
    ``fail_at`` (until ``flag`` exists) to force a restore. On its first record after being
    initialized, reports what it got back: (``"init"``, restored?, list state, union state)."""

    def __init__(self, fail_at: int | None = None, flag: str | None = None):
        self.fail_at, self.flag = fail_at, flag

    def initialize_state(self, context):
        store = context.get_operator_state_store()
        self.counts = store.get_list_state(ListStateDescriptor("counts"))
        self.seen = store.get_union_list_state(ListStateDescriptor("seen-subtasks"))
        self.count = sum(self.counts.get())
        self.report = ("init", context.is_restored(), sorted(self.counts.get()), sorted(self.seen.get()))

    def open(self, runtime_context):
        self.index = runtime_context.get_index_of_this_subtask()

    def snapshot_state(self, context):
        self.counts.update([self.count])
        self.seen.update([self.index])

    def map(self, value):
        if value == self.fail_at and not os.path.exists(self.flag):
            with open(self.flag + ".n", "a") as f:
                f.write("x")
            if os.path.getsize(self.flag + ".n") >= 1:  # once: Spark does not retry it, the job restarts
                open(self.flag, "w").close()
            msg = f"injected failure at {value}"
            raise RuntimeError(msg)
        self.count += 1
        report, self.report = self.report, None
        return (report, self.index, self.count)


def job(env, function, events=EVENTS, rate=None) -> CollectSink:
    sink = CollectSink()
    source = DataGeneratorSource(lambda i: i, count=events, rate_limit_per_second=rate)
    env.from_source(source, source_name="numbers").uid("numbers").rebalance().map(function).uid("counting").sink_to(sink).uid("sink")
    return sink


def final_counts(results) -> dict[int, int]:
    last: dict[int, int] = {}
    for _, index, count in results:
        last[index] = max(last.get(index, 0), count)
    return last


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_operator_state_survives_a_failure_exactly_once(make_env, tmp_path, backend):
    env = make_env(parallelism=2, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"))
    env.get_configuration().set("state.backend.type", backend)
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    sink = job(env, CountingMap(fail_at=900, flag=flag))
    env.execute("operator state")
    assert os.path.exists(flag), "the injected failure never happened"
    assert sum(final_counts(sink.results).values()) == EVENTS  # nothing counted twice or lost
    restored = [r for r, _, _ in sink.results if r is not None and r[1]]
    assert restored, "after the failure the instances must start from restored operator state"


def test_rescale_splits_list_state_and_unions_union_state(make_env, tmp_path):
    ck = tmp_path / "ck"
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(ck))
    env.get_configuration().set("execution.checkpointing.externalized-checkpoint-retention", "RETAIN_ON_CANCELLATION")
    env.enable_checkpointing(1)
    job(env, CountingMap(), events=None, rate=2_000)
    client = env.execute_async("unbounded")
    job_dir = str(ck / client.get_job_id())
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not os.path.isdir(job_dir) or find_latest(job_dir) is None or find_latest(job_dir).epoch < 4):
        time.sleep(0.2)
    client.cancel()
    try:
        client.wait(60)
    except JobExecutionError:
        pass
    meta = find_latest(job_dir)
    assert meta is not None
    saved = meta.watermarks["operator_state"]
    counts_before = sorted(c for states in saved.values() for c in states["counts"][1])
    assert len(counts_before) == 2 and sum(counts_before) > 0

    env = make_env(parallelism=3, max_records=100)
    env.get_configuration().set("execution.savepoint.path", str(ck / client.get_job_id() / f"chk-{meta.checkpoint_id}"))
    sink = job(env, CountingMap(), events=None, rate=2_000)
    client = env.execute_async("rescaled")
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and len({i for r, i, _ in sink.results if r is not None}) < 3:
        time.sleep(0.2)
    client.cancel()
    try:
        client.wait(60)
    except JobExecutionError:
        pass
    reports: dict = {}
    for r, i, _ in sink.results:  # the first report of each instance: right after the restore
        if r is not None:
            reports.setdefault(i, r)
    assert set(reports) == {0, 1, 2}
    # list state: the two old counts are split over three instances, each exactly once
    assert sorted(c for r in reports.values() for c in r[2]) == counts_before
    # union state: every instance gets every old instance's entry
    assert all(r[1] and r[3] == [0, 1] for r in reports.values())


def test_redistribute_even_split_and_union():
    saved = {0: {"l": (SPLIT, [1, 2, 3]), "u": (UNION, ["a"])}, 1: {"l": (SPLIT, [4, 5]), "u": (UNION, ["b"])}}
    three = redistribute(saved, 3)
    assert [three[i]["l"][1] for i in range(3)] == [[1], [2, 3], [4, 5]]
    assert all(three[i]["u"] == (UNION, ["a", "b"]) for i in range(3))
    one = redistribute(saved, 1)
    assert one[0]["l"] == (SPLIT, [1, 2, 3, 4, 5])


def test_operator_state_of_a_vanished_uid_is_refused():
    from flowpoint.driver.committed import restored_operator_state

    class Graph:
        nodes = {}

    with pytest.raises(CheckpointError, match="uid 'gone'.*allow-non-restored-state"):
        restored_operator_state({"gone:0": {"l": (SPLIT, [1])}}, Graph())
    assert restored_operator_state({"gone:0": {"l": (SPLIT, [1])}}, Graph(), allow_non_restored=True) == {}
