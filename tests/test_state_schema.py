"""State schema evolution and type checks at restore (issue 17), as Flink does for POJOs and Avro:
a Row type that gains or loses fields is migrated by field name (an added field is None, a
removed field is dropped), a dataclass whose class gained a field with a default or lost one is
rebuilt, and any other change of a state's declared type is refused, naming the operator, the
state and both types, unless the descriptor names a migration function."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import time

import pytest

from flowpoint import (
    CollectSink,
    DataGeneratorSource,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    Row,
    Types,
    ValueStateDescriptor,
)
from flowpoint.errors import StateMigrationError
from flowpoint.state.compatibility import Recorded, declared_schema
from flowpoint.state.heap import HeapKeyedStateBackend
from flowpoint.state.key_identity import state_key
from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

OLD_ROW = Types.ROW_NAMED(["name", "count"], [Types.STRING(), Types.INT()])
NEW_ROW = Types.ROW_NAMED(["name", "count", "last"], [Types.STRING(), Types.INT(), Types.LONG()])


@dataclasses.dataclass
class Profile:
    name: str
    visits: int = 0
    tags: list = dataclasses.field(default_factory=list)


def old_profile(**fields):
    """A Profile as an older class definition left it in a checkpoint (pickles keep __dict__)."""
    p = object.__new__(Profile)
    p.__dict__.update(fields)
    return pickle.loads(pickle.dumps(p))


@pytest.fixture(params=["hashmap", "rocksdb"])
def restored(request, tmp_path):
    """``restored(tables, recorded)`` -> a backend of operator 'counter' (uid 'counting') holding
    ``tables`` as restored from a checkpoint that recorded ``recorded`` per state."""
    opened = []

    def make(tables, recorded):
        if request.param == "hashmap":
            b = HeapKeyedStateBackend("counter", uid="counting")
            b.restore(tables)
            b.commit()
        else:
            b = RocksDBKeyedStateBackend("counter", str(tmp_path / f"db{len(opened)}"), 128, uid="counting")
            b.open()
            opened.append(b)
            b.restore(tables, {name: r.kind for name, r in recorded.items()})
        b.restored_states = dict(recorded)
        return b

    yield make
    for b in opened:
        b.close()


def value_of(b, descriptor, key):
    state = b.get_partitioned_state(descriptor)
    b.current_key = key
    if descriptor.kind == "value":
        return state.value()
    if descriptor.kind == "list":
        return state.get()
    return dict(state.items())


def test_a_row_field_added_is_none_and_a_removed_one_is_dropped(restored):
    rec = {"p": Recorded("value", True, declared_schema(ValueStateDescriptor("p", OLD_ROW)))}
    b = restored({"p": {"a": Row(name="a", count=3)}}, rec)
    v = value_of(b, ValueStateDescriptor("p", NEW_ROW), "a")
    assert v == Row(name="a", count=3, last=None) and v._fields == ("name", "count", "last")
    assert v.last is None and v["count"] == 3
    b2 = restored({"p": {"a": Row(name="a", count=3)}}, rec)
    only_count = Types.ROW_NAMED(["count"], [Types.INT()])
    assert value_of(b2, ValueStateDescriptor("p", only_count), "a") == Row(count=3)


def test_rows_in_list_and_map_states_evolve_element_by_element(restored):
    rec = {
        "l": Recorded("list", True, declared_schema(ListStateDescriptor("l", OLD_ROW))),
        "m": Recorded("map", True, declared_schema(MapStateDescriptor("m", Types.STRING(), OLD_ROW))),
    }
    b = restored({"l": {"k": [Row(name="x", count=1), Row(name="y", count=2)]}, "m": {"k": {"u": Row(name="z", count=5)}}}, rec)
    assert value_of(b, ListStateDescriptor("l", NEW_ROW), "k") == [Row(name="x", count=1, last=None), Row(name="y", count=2, last=None)]
    assert value_of(b, MapStateDescriptor("m", Types.STRING(), NEW_ROW), "k") == {"u": Row(name="z", count=5, last=None)}


def test_a_type_change_is_refused_naming_operator_state_and_both_types(restored):
    rec = {"count": Recorded("value", True, declared_schema(ValueStateDescriptor("count", Types.INT())))}
    b = restored({"count": {"a": 5}}, rec)
    with pytest.raises(StateMigrationError) as info:
        b.get_partitioned_state(ValueStateDescriptor("count", Types.STRING()))
    msg = str(info.value)
    assert "'counter' (uid 'counting')" in msg and "'count'" in msg
    assert "Types.STRING()" in msg and "Types.INT()" in msg and "with_migration" in msg
    assert not info.value.recoverable


def test_a_type_change_with_a_migration_function(restored):
    rec = {"count": Recorded("value", True, declared_schema(ValueStateDescriptor("count", Types.INT())))}
    b = restored({"count": {"a": 5, "b": 7}}, rec)
    descriptor = ValueStateDescriptor("count", Types.STRING()).with_migration(lambda old: f"#{old}")
    assert value_of(b, descriptor, "a") == "#5"
    b.current_key = "b"
    assert b.get_partitioned_state(descriptor).value() == "#7"


def test_a_failing_migration_function_names_the_value(restored):
    rec = {"count": Recorded("value", True, declared_schema(ValueStateDescriptor("count", Types.INT())))}
    b = restored({"count": {"a": 5}}, rec)
    descriptor = ValueStateDescriptor("count", Types.STRING()).with_migration(lambda old: 1 / 0)
    with pytest.raises(StateMigrationError) as info:
        b.get_partitioned_state(descriptor)
    assert "migration function of state 'count'" in str(info.value) and "5" in str(info.value)


def test_a_dataclass_gains_a_field_with_its_default_and_loses_one(restored):
    rec = {"profile": Recorded("value", True, None)}
    b = restored({"profile": {"a": old_profile(name="a", visits=4, removed="gone")}}, rec)
    p = value_of(b, ValueStateDescriptor("profile"), "a")
    assert p == Profile("a", 4, []) and not hasattr(p, "removed")


def test_a_dataclass_field_without_default_cannot_be_filled(restored):
    rec = {"profile": Recorded("value", True, None)}
    b = restored({"profile": {"a": old_profile(visits=4)}}, rec)  # 'name' was added, without a default
    with pytest.raises(StateMigrationError) as info:
        b.get_partitioned_state(ValueStateDescriptor("profile"))
    assert "'name'" in str(info.value) and "default" in str(info.value)


def test_unchanged_state_is_not_touched(restored):
    rec = {"p": Recorded("value", True, declared_schema(ValueStateDescriptor("p", NEW_ROW)))}
    row = Row(name="a", count=3, last=9)
    b = restored({"p": {state_key(("a", 1)): row}}, rec)
    assert value_of(b, ValueStateDescriptor("p", NEW_ROW), ("a", 1)) == row


# -- end to end: a savepoint restored into a job whose state type changed ------------------------


class RowCounter(KeyedProcessFunction):
    def __init__(self, type_info, migration=None):
        self.type_info = type_info
        self.migration = migration

    def open(self, ctx):
        d = ValueStateDescriptor("p", self.type_info)
        if self.migration is not None:
            d.with_migration(self.migration)
        self.p = ctx.get_state(d)

    def process_element(self, value, ctx):
        old = self.p.value()
        n = 1 if old is None else old["count"] + 1
        names = self.type_info.field_names
        fields = {"name": str(ctx.get_current_key()), "count": n, "last": value}
        self.p.update(Row.of(tuple(names), [fields[f] for f in names]))
        yield ctx.get_current_key(), n


def _job(make_env, type_info, restore=None, rate=None, backend="hashmap"):
    env = make_env(parallelism=2, max_records=50)
    env.get_configuration().set("state.backend.type", backend)
    if restore is not None:
        env.get_configuration().set("execution.savepoint.path", str(restore))
    sink = CollectSink()
    source = DataGeneratorSource(lambda i: i, count=600, rate_limit_per_second=rate)
    env.from_source(source, source_name="n").uid("n").key_by(lambda v: v % 5).process(RowCounter(type_info)).uid("counting").sink_to(sink).uid("out")
    return env, sink


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_savepoint_restores_into_a_row_type_with_a_new_field(make_env, tmp_path, backend):
    env, _ = _job(make_env, OLD_ROW, rate=1500, backend=backend)
    client = env.execute_async("row v1")
    deadline = time.monotonic() + 120
    while client.progress().epoch < 3 and not client.is_done() and time.monotonic() < deadline:
        time.sleep(0.05)
    sp = client.stop_with_savepoint(f"file://{tmp_path}/sp")
    client.wait(60)
    meta = json.loads(open(os.path.join(sp.removeprefix("file://"), "_metadata")).read())
    (op,) = [o for o in meta["operators"] if o["uid"] == "counting"]
    assert op["states"]["p"]["schema"]["fields"] == [["name", "Types.STRING()"], ["count", "Types.INT()"]]
    env, _ = _job(make_env, NEW_ROW, restore=sp, backend=backend)
    state = env.execute("row v2").get_keyed_state("counting", "p")
    assert sorted(v["count"] for v in state.values()) == [120] * 5  # counting went on across the restore
    assert all(v._fields == ("name", "count", "last") for v in state.values())
    # an INT field that became a STRING is refused, naming the state and both types
    env, _ = _job(make_env, Types.ROW_NAMED(["name", "count"], [Types.STRING(), Types.STRING()]), restore=sp, backend=backend)
    with pytest.raises(StateMigrationError) as info:
        env.execute("row v3")
    assert "'p'" in str(info.value) and "Types.INT()" in str(info.value) and "counting" in str(info.value)


def test_metadata_records_the_declared_kind_even_when_a_part_could_only_infer_it():
    """A checkpoint's synchronous part can run in a task whose partition was rebuilt from durable
    state before its operators registered their states: the part infers the kind from values, the
    coordinator records what the tasks reported the operators declared."""
    from flowpoint.checkpoint.metadata import OperatorState
    from flowpoint.runtime.checkpointing import apply_declared, merge_states

    op = OperatorState("counting", "counter", 2, 128, "hashmap", [])
    merge_states(op, {"seen": {"kind": "list", "declared": False, "keys": 3}})
    declared = {"seen": {"kind": "value", "schema": declared_schema(ValueStateDescriptor("seen", NEW_ROW))}, "other": {"kind": "map"}}
    apply_declared(op, declared)
    assert op.states["seen"]["kind"] == "value" and op.states["seen"]["declared"] is True
    assert op.states["seen"]["schema"]["fields"][2] == ["last", "Types.LONG()"]
    assert "other" not in op.states  # a state without data has no entry to restore
