"""Records as users write them: namedtuples keep their type, classes from the job's ``__main__``
cross the wire, and a failing keyed function names the record and the key."""

from __future__ import annotations

import pickle
from collections import namedtuple

import pytest

from flowpoint import CollectSink, KeyedProcessFunction
from flowpoint.errors import JobExecutionError
from flowpoint.pickles import dumps

Click = namedtuple("Click", "user amount")


def test_rolling_sum_keeps_the_namedtuple_type(make_env):
    env = make_env(parallelism=2)
    sink = CollectSink()
    clicks = [Click("a", 1), Click("b", 5), Click("a", 2), Click("a", 4)]
    env.from_collection(clicks).key_by("user").sum("amount").sink_to(sink)
    env.from_collection(clicks).key_by(0).max(1).sink_to(max_sink := CollectSink())
    env.execute("namedtuple sums")
    assert sorted(sink.results) == sorted([Click("a", 1), Click("b", 5), Click("a", 3), Click("a", 7)])
    assert all(type(r) is Click for r in sink.results)
    assert sorted(max_sink.results) == sorted([Click("a", 1), Click("b", 5), Click("a", 2), Click("a", 4)])
    assert all(type(r) is Click for r in max_sink.results)


def test_records_of_a_class_workers_cannot_import_are_pickled_by_value():
    Local = namedtuple("Local", "x y")  # noqa: PYI024 - a class pickle cannot find by name
    Local.__qualname__ = "not.importable.Local"
    with pytest.raises((pickle.PicklingError, AttributeError)):
        pickle.dumps([Local(1, 2)])
    back = pickle.loads(dumps([Local(1, 2), Local(3, 4)]))
    assert back == [(1, 2), (3, 4)]
    assert back[0].y == 2


class FailOnSeven(KeyedProcessFunction):
    def process_element(self, value, ctx):
        if value == 7:
            raise ValueError("seven is not allowed")
        yield value


def test_a_failing_keyed_function_names_the_record_and_its_key(make_env):
    env = make_env(parallelism=1)
    env.from_collection([1, 3, 7, 9]).key_by(lambda v: v % 2).process(FailOnSeven()).name("no-sevens").sink_to(CollectSink())
    with pytest.raises(JobExecutionError) as info:
        env.execute("keyed failure")
    msg = str(info.value)
    assert "no-sevens" in msg
    assert "seven is not allowed" in msg
    assert "while processing 7 of key 1" in msg
