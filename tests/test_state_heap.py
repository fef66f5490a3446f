"""Unit tests of the heap keyed-state backend (flowpoint/state/heap.py) and the per-worker task
state cache (flowpoint/partition/working.py). No Spark: these run in milliseconds."""

from __future__ import annotations

import copy
import pickle

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from state_functions import AverageAggregate, MaxAggregate, SumReduce

from flowpoint import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    MapStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flowpoint.checkpoint import part_writer
from flowpoint.errors import (
    ConfigurationError,
    FlowpointError,
    StateAccessError,
    StateNotFoundError,
)
from flowpoint.partition.backend import HashMapPartitionBackend
from flowpoint.partition.committed_chain import CommittedChain, CommittedFile
from flowpoint.partition.protocol import StateLocation, TaskSlice, TaskStateAck
from flowpoint.partition.working import TaskStateCache
from flowpoint.pickles import dumps
from flowpoint.state.heap import HeapKeyedStateBackend
from flowpoint.state.key_identity import KeyedStateMap

# -- helpers ---------------------------------------------------------------------------------


def backend_with_all_kinds(name: str = "op"):
    b = HeapKeyedStateBackend(name)
    states = {
        "value": b.get_partitioned_state(ValueStateDescriptor("value")),
        "list": b.get_partitioned_state(ListStateDescriptor("list")),
        "map": b.get_partitioned_state(MapStateDescriptor("map")),
        "reducing": b.get_partitioned_state(ReducingStateDescriptor("reducing", SumReduce())),
        "reducing_lambda": b.get_partitioned_state(ReducingStateDescriptor("reducing_lambda", lambda a, c: a * c)),
        "aggregating": b.get_partitioned_state(AggregatingStateDescriptor("aggregating", AverageAggregate())),
    }
    return b, states


def tables(b: HeapKeyedStateBackend) -> dict:
    """A deep copy of the backend's visible contents (without empty tables)."""
    return copy.deepcopy(b.snapshot())


# -- each state kind, per key ------------------------------------------------------------------


def test_value_state_value_update_clear_per_key():
    b = HeapKeyedStateBackend("op")
    s = b.get_partitioned_state(ValueStateDescriptor("v"))
    b.current_key = "a"
    assert s.value() is None
    s.update(1)
    b.current_key = "b"
    assert s.value() is None
    s.update(20)
    b.current_key = "a"
    assert s.value() == 1
    s.update(2)
    assert s.value() == 2
    b.current_key = "b"
    assert s.value() == 20
    s.clear()
    assert s.value() is None
    b.current_key = "a"
    assert s.value() == 2
    s.update(None)  # as in Flink: updating to None clears
    assert s.value() is None
    assert b.snapshot() == {}


def test_list_state_operations_per_key():
    b = HeapKeyedStateBackend("op")
    s = b.get_partitioned_state(ListStateDescriptor("l"))
    b.current_key = 1
    assert list(s.get()) == []
    s.add("x")
    s.add_all(["y", "z"])
    assert s.get() == ["x", "y", "z"]
    assert list(s) == ["x", "y", "z"]
    b.current_key = 2
    assert s.get() == []
    s.update(["q"])
    assert s.get() == ["q"]
    b.current_key = 1
    returned = s.get()
    returned.append("not in state")  # get() hands out a copy
    assert s.get() == ["x", "y", "z"]
    s.update(["a", "b"])
    assert s.get() == ["a", "b"]
    s.clear()
    assert s.get() == []
    b.current_key = 2
    assert s.get() == ["q"]
    s.update([])
    assert s.get() == []
    assert b.snapshot() == {}


def test_list_state_rejects_none_element():
    b = HeapKeyedStateBackend("op")
    s = b.get_partitioned_state(ListStateDescriptor("l"))
    b.current_key = "k"
    with pytest.raises(StateAccessError):
        s.add(None)


def test_map_state_operations_per_key():
    b = HeapKeyedStateBackend("op")
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    b.current_key = "k1"
    assert m.is_empty()
    assert m.get("x") is None
    assert not m.contains("x")
    m.put("x", 1)
    m.put_all({"y": 2, "z": 3})
    assert m.get("x") == 1
    assert m.contains("y") and "z" in m
    assert sorted(m.keys()) == ["x", "y", "z"]
    assert sorted(m.values()) == [1, 2, 3]
    assert sorted(m.items()) == [("x", 1), ("y", 2), ("z", 3)]
    assert not m.is_empty()
    m["w"] = 4
    assert m["w"] == 4
    del m["w"]
    assert sorted(iter(m)) == ["x", "y", "z"]
    b.current_key = "k2"
    assert m.is_empty() and m.keys() == [] and m.items() == [] and m.values() == []
    m.put("x", 100)
    b.current_key = "k1"
    m.remove("x")
    m.remove("not there")  # removing a missing key is a no-op
    assert not m.contains("x")
    assert sorted(m.items()) == [("y", 2), ("z", 3)]
    m.remove("y")
    m.remove("z")
    assert m.is_empty()
    b.current_key = "k2"
    assert m.get("x") == 100
    m.clear()
    assert m.is_empty()
    assert b.snapshot() == {}


def test_reducing_state_with_reduce_function_and_lambda():
    b = HeapKeyedStateBackend("op")
    total = b.get_partitioned_state(ReducingStateDescriptor("sum", SumReduce()))
    longest = b.get_partitioned_state(ReducingStateDescriptor("longest", lambda x, y: x if len(x) >= len(y) else y))
    b.current_key = "a"
    assert total.get() is None and longest.get() is None
    for v in (1, 2, 3):
        total.add(v)
    for w in ("ab", "abcd", "abc"):
        longest.add(w)
    b.current_key = "b"
    total.add(10)
    longest.add("z")
    b.current_key = "a"
    assert total.get() == 6
    assert longest.get() == "abcd"
    total.clear()
    assert total.get() is None
    b.current_key = "b"
    assert total.get() == 10 and longest.get() == "z"


def test_reducing_state_descriptor_rejects_non_callable():
    with pytest.raises(ConfigurationError):
        ReducingStateDescriptor("r", 42)
    with pytest.raises(ConfigurationError):
        AggregatingStateDescriptor("a", lambda x: x)


def test_aggregating_state_with_aggregate_function():
    b = HeapKeyedStateBackend("op")
    avg = b.get_partitioned_state(AggregatingStateDescriptor("avg", AverageAggregate()))
    best = b.get_partitioned_state(AggregatingStateDescriptor("max", MaxAggregate()))
    b.current_key = ("x", 1)
    assert avg.get() is None
    for v in (1, 2, 6):
        avg.add(v)
        best.add(v)
    b.current_key = ("y", 2)
    avg.add(10)
    b.current_key = ("x", 1)
    assert avg.get() == 3
    assert best.get() == (6, 3)
    b.current_key = ("y", 2)
    assert avg.get() == 10
    assert best.get() is None
    avg.clear()
    assert avg.get() is None
    # the table holds accumulators; get() returns the result
    assert KeyedStateMap(b.snapshot()["avg"]) == {("x", 1): [9, 3]}


def test_state_without_current_key_raises():
    b, states = backend_with_all_kinds("my-operator")
    calls = [
        lambda: states["value"].value(),
        lambda: states["value"].update(1),
        lambda: states["value"].clear(),
        lambda: states["list"].get(),
        lambda: states["list"].add(1),
        lambda: states["list"].add_all([1]),
        lambda: states["list"].update([1]),
        lambda: states["map"].get("k"),
        lambda: states["map"].put("k", 1),
        lambda: states["map"].put_all({"k": 1}),
        lambda: states["map"].contains("k"),
        lambda: states["map"].remove("k"),
        lambda: states["map"].keys(),
        lambda: states["map"].values(),
        lambda: states["map"].items(),
        lambda: states["map"].is_empty(),
        lambda: states["reducing"].get(),
        lambda: states["reducing"].add(1),
        lambda: states["aggregating"].get(),
        lambda: states["aggregating"].add(1),
    ]
    for call in calls:
        with pytest.raises(StateAccessError) as info:
            call()
        assert "my-operator" in str(info.value)
        assert isinstance(info.value, FlowpointError)
    assert b.snapshot() == {}
    assert b.delta() == {}


def test_one_name_declared_as_two_kinds_raises():
    b = HeapKeyedStateBackend("op")
    b.get_partitioned_state(ValueStateDescriptor("s"))
    with pytest.raises(StateAccessError) as info:
        b.get_partitioned_state(ListStateDescriptor("s"))
    assert "'s'" in str(info.value)
    # declaring the same name and kind again is fine and shares the data
    s1 = b.get_partitioned_state(ValueStateDescriptor("s"))
    s2 = b.get_partitioned_state(ValueStateDescriptor("s"))
    b.current_key = "k"
    s1.update(5)
    assert s2.value() == 5


def test_states_with_different_names_are_independent():
    b, states = backend_with_all_kinds()
    other = b.get_partitioned_state(ValueStateDescriptor("other"))
    b.current_key = "k"
    states["value"].update("v")
    assert other.value() is None


# -- delta, commit, rollback, apply ----------------------------------------------------------


def populate_committed(b, states):
    """Epoch 1: state for keys a, b, c in every kind; committed."""
    for key in ("a", "b", "c"):
        b.current_key = key
        states["value"].update(f"v-{key}")
        states["list"].add_all([key, key * 2])
        states["map"].put_all({"m1": key, "m2": [key]})
        states["reducing"].add(1)
        states["reducing_lambda"].add(3)
        states["aggregating"].add(10)
    b.current_key = None
    b.commit()


def mutate_epoch(b, states):
    """Epoch 2: touch keys a and b (and a new key d); leave c alone."""
    b.current_key = "a"
    states["value"].update("v-a2")
    states["list"].add("appended")
    states["map"].put("m3", "new")
    states["map"].remove("m1")
    states["reducing"].add(5)
    states["reducing_lambda"].add(2)
    states["aggregating"].add(20)
    b.current_key = "b"
    states["value"].clear()
    states["list"].clear()
    states["map"].clear()
    states["reducing"].clear()
    states["aggregating"].clear()
    b.current_key = "d"
    states["value"].update("v-d")
    states["list"].add("d")
    b.current_key = None


def test_delta_lists_exactly_the_touched_keys():
    b, states = backend_with_all_kinds()
    assert b.delta() == {}
    populate_committed(b, states)
    assert b.delta() == {}
    assert b.changed_keys() == 0
    mutate_epoch(b, states)
    delta = b.delta()
    assert delta["value"] == ({"a": "v-a2", "d": "v-d"}, ["b"])
    assert delta["list"] == ({"a": ["a", "aa", "appended"], "d": ["d"]}, ["b"])
    assert delta["map"] == ({"a": {"m2": ["a"], "m3": "new"}}, ["b"])
    assert delta["reducing"] == ({"a": 6}, ["b"])
    assert delta["reducing_lambda"] == ({"a": 6}, [])
    assert delta["aggregating"] == ({"a": [30, 2]}, ["b"])
    assert set(delta) == {"value", "list", "map", "reducing", "reducing_lambda", "aggregating"}
    assert b.changed_keys() == 3 + 3 + 2 + 2 + 1 + 2


def test_delta_of_a_read_only_epoch_is_empty():
    b, states = backend_with_all_kinds()
    populate_committed(b, states)
    committed = tables(b)
    for key in ("a", "b", "zz"):
        b.current_key = key
        states["value"].value()
        states["list"].get()
        states["map"].get("m1")
        states["map"].contains("m2")
        states["map"].keys()
        states["map"].is_empty()
        states["map"].remove("absent")
        states["reducing"].get()
        states["reducing_lambda"].get()
    # clearing a key that has no state is not a change either
    b.current_key = "never"
    for name in ("value", "list", "map", "reducing", "aggregating"):
        states[name].clear()
    b.current_key = None
    assert b.delta() == {}
    # reading mutable values (a map holding lists, list accumulators) may list their keys,
    # but only with their unchanged values
    for key in ("a", "b"):
        b.current_key = key
        states["map"].items()
        states["aggregating"].get()
    for name, (puts, deletes) in b.delta().items():
        assert deletes == []
        for key, value in puts.items():
            assert committed[name][key] == value


def test_in_place_mutation_without_update_reaches_the_delta():
    """Hot state (this worker's tables) and cold state (rebuilt from delta files) must agree even
    when a function mutates the object it read and does not write it back."""
    b = HeapKeyedStateBackend("op")
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    replica = HeapKeyedStateBackend("op")
    b.current_key = "k"
    v.update({"n": 1})
    m.put("x", [1])
    replica.apply(pickle.loads(pickle.dumps(b.delta())))
    b.commit()
    v.value()["n"] = 2
    m.get("x").append(2)
    replica.apply(pickle.loads(pickle.dumps(b.delta())))
    b.commit()
    assert replica.snapshot() == b.snapshot() == {"v": {"k": {"n": 2}}, "m": {"k": {"x": [1, 2]}}}


def test_empty_add_all_and_put_all_create_no_state():
    b = HeapKeyedStateBackend("op")
    lst = b.get_partitioned_state(ListStateDescriptor("l"))
    m = b.get_partitioned_state(MapStateDescriptor("m"))
    b.current_key = "k"
    lst.add_all([])
    m.put_all({})
    assert b.snapshot() == {}
    assert b.delta() == {}
    assert b.num_keys() == 0


def test_delta_of_key_created_and_removed_in_one_epoch():
    b = HeapKeyedStateBackend("op")
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    b.current_key = "tmp"
    v.update(1)
    v.clear()
    puts, deletes = b.delta()["v"]
    assert puts == {} and deletes == ["tmp"]
    b.commit()
    assert b.snapshot() == {}


def test_rollback_restores_committed_values_exactly():
    b, states = backend_with_all_kinds()
    populate_committed(b, states)
    before = tables(b)
    mutate_epoch(b, states)
    assert tables(b) != before
    b.rollback()
    assert tables(b) == before
    assert b.delta() == {}
    # the states still work after the rollback, against the restored values
    b.current_key = "a"
    assert states["list"].get() == ["a", "aa"]
    assert states["map"].items() == [("m1", "a"), ("m2", ["a"])]
    assert states["aggregating"].get() == 10
    states["list"].add("again")
    assert states["list"].get() == ["a", "aa", "again"]


def test_rollback_undoes_in_place_mutation_of_value_and_accumulator():
    """Users mutate the object value() returned and write it back; aggregate functions mutate
    their accumulator. A rolled-back epoch must not leave those mutations behind."""
    b = HeapKeyedStateBackend("op")
    seen = b.get_partitioned_state(ValueStateDescriptor("seen"))
    avg = b.get_partitioned_state(AggregatingStateDescriptor("avg", AverageAggregate()))
    per_user = b.get_partitioned_state(MapStateDescriptor("per_user"))
    b.current_key = "k"
    seen.update(["first"])
    avg.add(2)
    per_user.put("u", ["e1"])
    b.commit()
    committed = tables(b)

    items = seen.value()
    items.append("second")
    seen.update(items)
    avg.add(4)
    events = per_user.get("u")
    events.append("e2")
    per_user.put("u", events)
    assert seen.value() == ["first", "second"] and avg.get() == 3
    b.rollback()
    assert tables(b) == committed
    assert seen.value() == ["first"]
    assert avg.get() == 2
    assert per_user.get("u") == ["e1"]


def test_rollback_of_first_epoch_leaves_nothing():
    b, states = backend_with_all_kinds()
    mutate_epoch(b, states)
    b.rollback()
    assert b.snapshot() == {}
    assert b.num_keys() == 0


def test_commit_keeps_values_and_clears_the_undo_log():
    b, states = backend_with_all_kinds()
    populate_committed(b, states)
    mutate_epoch(b, states)
    after = tables(b)
    b.commit()
    assert b.delta() == {}
    b.rollback()  # nothing to undo any more
    assert tables(b) == after


def test_apply_delta_on_fresh_backend_reproduces_state():
    b, states = backend_with_all_kinds()
    populate_committed(b, states)
    base = pickle.loads(pickle.dumps(b.snapshot()))
    mutate_epoch(b, states)
    delta = pickle.loads(pickle.dumps(b.delta()))  # as it travels in a delta file
    b.commit()

    fresh = HeapKeyedStateBackend("op")
    fresh.restore(base)
    fresh.apply(delta)
    assert fresh.snapshot() == b.snapshot()
    # the restored backend is usable through newly declared states
    fresh.current_key = "a"
    s = fresh.get_partitioned_state(ListStateDescriptor("list"))
    assert s.get() == ["a", "aa", "appended"]
    agg = fresh.get_partitioned_state(AggregatingStateDescriptor("aggregating", AverageAggregate()))
    assert agg.get() == 15
    # and what was applied is committed: a rollback does not undo it
    fresh.rollback()
    assert fresh.snapshot() == b.snapshot()


def test_apply_sequence_of_deltas_equals_live_backend():
    b, states = backend_with_all_kinds()
    fresh = HeapKeyedStateBackend("op")
    for epoch in range(5):
        for i in range(6):
            b.current_key = (i + epoch) % 4
            states["value"].update(epoch * 10 + i)
            states["list"].add(i)
            if i % 3 == 0:
                states["list"].clear()
            states["map"].put(i % 2, epoch)
            if epoch % 2:
                states["map"].remove(0)
        fresh.apply(pickle.loads(pickle.dumps(b.delta())))
        b.commit()
        assert fresh.snapshot() == b.snapshot()


# -- property: a sequence of operations and rollbacks vs a plain dict model -------------------

KEYS = st.sampled_from(["a", "b", 3])
OPS = st.one_of(
    st.tuples(st.just("value_update"), KEYS, st.integers(-5, 5) | st.none()),
    st.tuples(st.just("value_clear"), KEYS, st.none()),
    st.tuples(st.just("list_add"), KEYS, st.integers(0, 9)),
    st.tuples(st.just("list_add_all"), KEYS, st.lists(st.integers(0, 9), min_size=1, max_size=3)),
    st.tuples(st.just("list_update"), KEYS, st.lists(st.integers(0, 9), max_size=3)),
    st.tuples(st.just("list_clear"), KEYS, st.none()),
    st.tuples(st.just("map_put"), KEYS, st.tuples(st.sampled_from("xyz"), st.integers(0, 9))),
    st.tuples(st.just("map_remove"), KEYS, st.sampled_from("xyz")),
    st.tuples(st.just("map_clear"), KEYS, st.none()),
    st.tuples(st.just("reduce_add"), KEYS, st.integers(0, 9)),
    st.tuples(st.just("agg_add"), KEYS, st.integers(0, 9)),
    st.tuples(st.just("agg_clear"), KEYS, st.none()),
    st.tuples(st.just("commit"), st.none(), st.none()),
    st.tuples(st.just("rollback"), st.none(), st.none()),
)


def _model_apply(model: dict, op: str, key, arg) -> None:
    v, lst, mp, red, agg = (model[n] for n in ("v", "l", "m", "r", "g"))
    if op == "value_update":
        if arg is None:
            v.pop(key, None)
        else:
            v[key] = arg
    elif op == "value_clear":
        v.pop(key, None)
    elif op == "list_add":
        lst.setdefault(key, []).append(arg)
    elif op == "list_add_all":
        lst.setdefault(key, []).extend(arg)
    elif op == "list_update":
        if arg:
            lst[key] = list(arg)
        else:
            lst.pop(key, None)
    elif op == "list_clear":
        lst.pop(key, None)
    elif op == "map_put":
        mp.setdefault(key, {})[arg[0]] = arg[1]
    elif op == "map_remove":
        if arg in mp.get(key, {}):
            del mp[key][arg]
            if not mp[key]:
                del mp[key]
    elif op == "map_clear":
        mp.pop(key, None)
    elif op == "reduce_add":
        red[key] = red.get(key, 0) + arg
    elif op == "agg_add":
        acc = agg.setdefault(key, [0, 0])
        acc[0] += arg
        acc[1] += 1
    elif op == "agg_clear":
        agg.pop(key, None)


def _backend_apply(b, s, op: str, key, arg) -> None:
    b.current_key = key
    {
        "value_update": lambda: s["v"].update(arg),
        "value_clear": lambda: s["v"].clear(),
        "list_add": lambda: s["l"].add(arg),
        "list_add_all": lambda: s["l"].add_all(list(arg)),
        "list_update": lambda: s["l"].update(list(arg)),
        "list_clear": lambda: s["l"].clear(),
        "map_put": lambda: s["m"].put(*arg),
        "map_remove": lambda: s["m"].remove(arg),
        "map_clear": lambda: s["m"].clear(),
        "reduce_add": lambda: s["r"].add(arg),
        "agg_add": lambda: s["g"].add(arg),
        "agg_clear": lambda: s["g"].clear(),
    }[op]()
    b.current_key = None


def _nonempty(model: dict) -> dict:
    return {name: table for name, table in model.items() if table}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(OPS, max_size=40))
def test_operations_and_rollbacks_match_a_dict_model(ops):
    b = HeapKeyedStateBackend("op")
    s = {
        "v": b.get_partitioned_state(ValueStateDescriptor("v")),
        "l": b.get_partitioned_state(ListStateDescriptor("l")),
        "m": b.get_partitioned_state(MapStateDescriptor("m")),
        "r": b.get_partitioned_state(ReducingStateDescriptor("r", lambda x, y: x + y)),
        "g": b.get_partitioned_state(AggregatingStateDescriptor("g", AverageAggregate())),
    }
    committed = {n: {} for n in "vlmrg"}
    model = copy.deepcopy(committed)
    replica = HeapKeyedStateBackend("op")  # follows b through its deltas, as a cold task would
    for op, key, arg in ops:
        if op == "commit":
            replica.apply(pickle.loads(pickle.dumps(b.delta())))
            b.commit()
            committed = copy.deepcopy(model)
            assert replica.snapshot() == _nonempty(model)
        elif op == "rollback":
            b.rollback()
            model = copy.deepcopy(committed)
        else:
            _model_apply(model, op, key, arg)
            _backend_apply(b, s, op, key, arg)
        assert b.snapshot() == _nonempty(model)
        # the delta names exactly the keys whose value differs from the committed one
        delta = b.delta()
        for name in "vlmrg":
            puts, deletes = delta.get(name, ({}, []))
            changed = {k for k in set(model[name]) | set(committed[name]) if model[name].get(k) != committed[name].get(k)}
            assert changed <= set(puts) | set(deletes)
            for k in puts:
                assert model[name][k] == puts[k]
            for k in deletes:
                assert k not in model[name]
    # read through the state interfaces too
    for key in ("a", "b", 3):
        b.current_key = key
        assert s["v"].value() == model["v"].get(key)
        assert s["l"].get() == model["l"].get(key, [])
        assert dict(s["m"].items()) == model["m"].get(key, {})
        assert s["r"].get() == model["r"].get(key)
        acc = model["g"].get(key)
        assert s["g"].get() == (None if acc is None else acc[0] / acc[1])


# -- the HashMap partition backend: cache, durable deltas and bases ----------------------------

JOB = "job-under-test/run-0"


class Worker:
    """One Python worker's view: the partition backend with its own process cache."""

    def __init__(self, root) -> None:
        self.cache = TaskStateCache()
        self.backend = HashMapPartitionBackend(StateLocation(JOB, str(root / "local"), str(root / "durable")), 128, self.cache)

    def acquire(self, chain, stage: int = 1, partition: int = 0):
        return self.backend.acquire(stage, partition, chain, ["op-uid"])


def _ack(epoch: int, token: str, delta: CommittedFile | None = None, base: CommittedFile | None = None) -> TaskStateAck:
    return TaskStateAck(epoch, token, delta, base, 0, 0)


def _run_epoch(ts, epoch: int, token: str, writes: dict) -> None:
    """What a task does: mark the attempt pending and change state of operator 'op-uid'."""
    ts.pending = (epoch, token)
    b = ts.backend("op-uid", "Counter")
    v = b.get_partitioned_state(ValueStateDescriptor("count"))
    for key, value in writes.items():
        b.current_key = key
        v.update(value)
    b.current_key = None


def _count_table(ts) -> dict:
    b = ts.backends.get("op-uid")
    return dict(b.tables.get("count", {})) if b else {}


def _file(directory, kind: str, epoch: int, token: str, per_uid: dict) -> CommittedFile:
    uri = str(directory / f"{kind}-{epoch:08d}-{token}.pkl")
    h = part_writer.write_working_file(uri, dumps((kind, per_uid)))
    size, digest = h.size, h.sha256
    part_writer.recent_writes().pop(uri)  # as another process wrote it
    return CommittedFile(epoch, token, uri, size, digest)


def _write_delta(directory, epoch: int, token: str, puts: dict, deletes=()) -> TaskStateAck:
    return _ack(epoch, token, _file(directory, "delta", epoch, token, {"op-uid": {"count": (puts, list(deletes))}}))


def _write_base(directory, epoch: int, token: str, per_uid: dict) -> TaskStateAck:
    return _ack(epoch, token, None, _file(directory, "base", epoch, token, per_uid))


def committed_tables(tmp_path, chain) -> dict:
    """The committed state as a worker that never held the partition rebuilds it."""
    w = Worker(tmp_path)
    ts, fresh = w.acquire(chain)
    assert fresh
    return w.backend.committed_tables(ts, sorted(ts.backends))[0]


def test_cache_promotes_a_committed_pending_attempt_without_reloading(tmp_path):
    w = Worker(tmp_path)
    chain = CommittedChain()
    ts, fresh = w.acquire(chain)
    assert fresh and ts.version == 0
    _run_epoch(ts, 1, "t1", {"a": 1, "b": 2})
    ts.operators = marker = object()
    # the coordinator committed exactly this attempt; its delta file is never read
    chain = chain.committed(1, "t1", _ack(1, "t1", CommittedFile(1, "t1", "/nonexistent/delta-1.pkl", 10)))
    ts2, fresh2 = w.acquire(chain)
    assert ts2 is ts and not fresh2
    assert ts2.version == 1 and ts2.pending is None
    assert _count_table(ts2) == {"a": 1, "b": 2}
    assert ts2.backends["op-uid"].delta() == {}  # committed: nothing left to undo
    assert ts2.operators is marker  # the opened functions are kept


def test_cache_rolls_back_an_uncommitted_attempt_and_applies_the_committed_one(tmp_path):
    w = Worker(tmp_path)
    ts, _ = w.acquire(CommittedChain())
    _run_epoch(ts, 1, "t1", {"a": 1})
    chain = CommittedChain().committed(1, "t1", _ack(1, "t1"))
    ts, _ = w.acquire(chain)
    assert _count_table(ts) == {"a": 1}

    # attempt t2 of epoch 2 ran here but another attempt, t3, was committed
    _run_epoch(ts, 2, "t2", {"a": 100, "zombie": 5})
    ts.operators = object()
    chain = chain.committed(2, "t3", _write_delta(tmp_path, 2, "t3", {"a": 2, "c": 3}))
    ts2, fresh = w.acquire(chain)
    assert ts2 is ts and not fresh
    assert _count_table(ts2) == {"a": 2, "c": 3}
    assert ts2.version == 2
    assert ts2.operators is None  # functions of the failed attempt are not reused


def test_cache_rolls_back_an_attempt_of_an_epoch_that_did_not_commit(tmp_path):
    w = Worker(tmp_path)
    ts, _ = w.acquire(CommittedChain())
    _run_epoch(ts, 1, "t1", {"a": 1})
    chain = CommittedChain().committed(1, "t1", _ack(1, "t1"))
    ts, _ = w.acquire(chain)
    _run_epoch(ts, 2, "t2", {"a": 7, "b": 8})
    # epoch 2 failed as a whole: the chain still ends at epoch 1
    ts2, fresh = w.acquire(chain)
    assert ts2 is ts and not fresh
    assert _count_table(ts2) == {"a": 1}
    assert ts2.version == 1


def test_cache_catches_up_from_delta_files(tmp_path):
    w = Worker(tmp_path)
    ts, _ = w.acquire(CommittedChain())
    _run_epoch(ts, 1, "t1", {"a": 1, "b": 1})
    chain = CommittedChain().committed(1, "t1", _write_delta(tmp_path, 1, "t1", {"a": 1, "b": 1}))
    ts, _ = w.acquire(chain)
    # epochs 2..4 ran on other workers
    chain = chain.committed(2, "x2", _write_delta(tmp_path, 2, "x2", {"a": 2}))
    chain = chain.committed(3, "x3", None)  # an epoch that changed nothing
    chain = chain.committed(4, "x4", _write_delta(tmp_path, 4, "x4", {"c": 4}, deletes=["b"]))
    ts2, fresh = w.acquire(chain)
    assert ts2 is ts and not fresh
    assert _count_table(ts2) == {"a": 2, "c": 4}
    assert ts2.version == 4
    assert ts2.backends["op-uid"].delta() == {}  # caught-up changes are committed
    assert committed_tables(tmp_path, chain) == {"op-uid": {"count": {"a": 2, "c": 4}}}


def test_cache_cold_load_from_base_and_deltas(tmp_path):
    chain = CommittedChain().committed(5, "b5", _write_base(tmp_path, 5, "b5", {"op-uid": {"count": {"a": 5, "b": 5}}, "other": {"s": {1: [1]}}}))
    chain = chain.committed(6, "d6", _write_delta(tmp_path, 6, "d6", {"a": 6}, deletes=["b"]))
    w = Worker(tmp_path)  # a worker that never held this partition
    ts, fresh = w.acquire(chain, 3, 1)
    assert fresh
    assert ts.version == 6
    assert _count_table(ts) == {"a": 6}
    assert ts.backends["other"].tables["s"] == {1: [1]}
    assert committed_tables(tmp_path, chain) == {"op-uid": {"count": {"a": 6}}, "other": {"s": {1: [1]}}}


def test_cache_reloads_a_copy_older_than_the_base(tmp_path):
    w = Worker(tmp_path)
    ts, _ = w.acquire(CommittedChain())
    _run_epoch(ts, 1, "t1", {"a": 1})
    chain = CommittedChain().committed(1, "t1", _write_delta(tmp_path, 1, "t1", {"a": 1}))
    ts, _ = w.acquire(chain)
    # later a base snapshot at epoch 3 replaced the deltas (older delta files may be gone)
    chain = chain.committed(2, "x2", None).committed(3, "b3", _write_base(tmp_path, 3, "b3", {"op-uid": {"count": {"a": 3, "z": 3}}}))
    assert chain.obsolete == (str(tmp_path / "delta-00000001-t1.pkl"),)  # the next task deletes it
    ts2, fresh = w.acquire(chain)
    assert fresh and ts2 is not ts
    assert _count_table(ts2) == {"a": 3, "z": 3}


def test_cache_keeps_partitions_and_jobs_apart(tmp_path):
    w = Worker(tmp_path)
    a, _ = w.acquire(CommittedChain(), 1, 0)
    b, _ = w.acquire(CommittedChain(), 1, 1)
    other = HashMapPartitionBackend(StateLocation("other-job/run-0", str(tmp_path), str(tmp_path)), 128, w.cache)
    c, _ = other.acquire(1, 0, CommittedChain(), ["op-uid"])
    assert a is not b and a is not c
    _run_epoch(a, 1, "t", {"k": 1})
    assert _count_table(b) == {} and _count_table(c) == {}
    w.cache.drop("job-under-test")
    a2, fresh = w.acquire(CommittedChain())
    assert fresh and a2 is not a


def test_a_missing_delta_file_fails_naming_it_never_empty_state(tmp_path):
    chain = CommittedChain().committed(1, "t1", _write_delta(tmp_path, 1, "t1", {"a": 1}))
    chain = chain.committed(2, "t2", _write_delta(tmp_path, 2, "t2", {"b": 2}))
    (tmp_path / "delta-00000001-t1.pkl").unlink()  # as on a host that cannot see the file
    with pytest.raises(StateNotFoundError, match=r"delta-00000001-t1\.pkl.*never starts from empty state"):
        Worker(tmp_path).acquire(chain)


@pytest.mark.parametrize("damage", ["flip", "truncate", "append"])
def test_a_changed_delta_file_fails_naming_it(tmp_path, damage):
    chain = CommittedChain().committed(1, "t1", _write_delta(tmp_path, 1, "t1", {"a": 1, "b": 2}))
    path = tmp_path / "delta-00000001-t1.pkl"
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0x01
    elif damage == "truncate":
        data = data[:-1]
    else:
        data += b"x"
    path.write_bytes(bytes(data))
    with pytest.raises(StateNotFoundError, match=r"delta-00000001-t1\.pkl"):
        Worker(tmp_path).acquire(chain)


def test_superseded_files_are_deleted_by_the_next_task_only(tmp_path):
    chain = CommittedChain().committed(1, "t1", _write_delta(tmp_path, 1, "t1", {"a": 1}))
    chain = chain.committed(2, "b2", _write_base(tmp_path, 2, "b2", {"op-uid": {"count": {"a": 2}}}))
    assert (tmp_path / "delta-00000001-t1.pkl").exists()  # until epoch 2 is known to be committed
    w = Worker(tmp_path)
    w.backend.begin_task(TaskSlice(1, 0, chain))
    assert not (tmp_path / "delta-00000001-t1.pkl").exists()
    assert (tmp_path / "base-00000002-b2.pkl").exists()
    ts, _ = w.acquire(chain)
    assert _count_table(ts) == {"a": 2}


def test_remote_durable_files_are_cached_locally_and_a_bad_copy_is_refetched(tmp_path):
    """Durable storage on a remote filesystem (memory:// stands in for S3): the writer keeps a
    local copy for the executor's other workers; a copy that does not match the committed
    checksum is dropped and the file read again, never used."""
    location = StateLocation(JOB, str(tmp_path / "local"), f"memory://durable-{tmp_path.name}")
    writer = HashMapPartitionBackend(location, 128, TaskStateCache())
    uri, size, digest = writer.write(1, 0, "delta-00000001-t1.pkl", dumps(("delta", {"op-uid": {"count": ({"a": 1}, [])}})))
    chain = CommittedChain().committed(1, "t1", _ack(1, "t1", CommittedFile(1, "t1", uri, size, digest)))
    copy = tmp_path / "local" / JOB / "stage-1" / "part-0" / "durable" / "delta-00000001-t1.pkl"
    assert copy.exists()
    part_writer.recent_writes().clear()  # another worker process
    ts, fresh = HashMapPartitionBackend(location, 128, TaskStateCache()).acquire(1, 0, chain, ["op-uid"])
    assert fresh and _count_table(ts) == {"a": 1}
    copy.write_bytes(b"not the committed bytes")
    part_writer.recent_writes().clear()
    ts, _ = HashMapPartitionBackend(location, 128, TaskStateCache()).acquire(1, 0, chain, ["op-uid"])
    assert _count_table(ts) == {"a": 1}
    assert copy.read_bytes() != b"not the committed bytes"  # refetched
