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
import sys
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
    from flowpoint.driver.checkpoint_coordinator import apply_declared, merge_states

    op = OperatorState("counting", "counter", 2, 128, "hashmap", [])
    merge_states(op, {"seen": {"kind": "list", "declared": False, "keys": 3}})
    declared = {"seen": {"kind": "value", "schema": declared_schema(ValueStateDescriptor("seen", NEW_ROW))}, "other": {"kind": "map"}}
    apply_declared(op, declared)
    assert op.states["seen"]["kind"] == "value" and op.states["seen"]["declared"] is True
    assert op.states["seen"]["schema"]["fields"][2] == ["last", "Types.LONG()"]
    assert "other" not in op.states  # a state without data has no entry to restore


# -- named tuples whose class lost or gained fields ----------------------------------------------
#
# A named tuple pickles as ``Point.__new__(Point, *values)``: only its values. ``_metadata``
# records the class and its fields (``value_class``, from one value of each state), and a restore
# unpickles them by those names into the class the job defines now.

OLD_FIELDS = ["name", "count", "last"]
NEW_FIELDS = ["count", "name", "note"]  # 'last' removed, 'note' added with a default, reordered


@pytest.fixture
def point():
    """evolving_values.Point, redefined by ``point(fields, defaults)``; the default class again after."""
    import evolving_values

    yield evolving_values.define
    evolving_values.define(*evolving_values.DEFAULT)


def _record(fields):
    return {"namedtuple": "evolving_values:Point", "fields": list(fields)}


def test_value_class_records_named_tuples_only():
    import collections

    from flowpoint.state.compatibility import sample_value_class, value_class

    P = collections.namedtuple("P", "a b")
    assert value_class("value", P(1, 2)) == {"namedtuple": f"{__name__}:P", "fields": ["a", "b"]}
    assert value_class("list", [P(1, 2)])["fields"] == ["a", "b"] and value_class("list", []) is None
    assert sample_value_class("map", {"k": {"u": P(1, 2)}})["fields"] == ["a", "b"]
    assert value_class("value", Row(a=1, b=2)) is None and value_class("value", (1, 2)) is None
    assert value_class("value", Profile("x")) is None and sample_value_class("value", {}) is None


def test_a_named_tuple_that_lost_a_field_unpickles_by_field_name(point):
    from flowpoint.state.compatibility import remapping_loads, restoring_loads

    old = point(OLD_FIELDS)
    data = pickle.dumps([old("a", 3, 9), {"u": old("b", 4, 10)}], protocol=pickle.HIGHEST_PROTOCOL)
    assert remapping_loads([_record(OLD_FIELDS)]) is None  # the class did not change: plain pickle.loads
    assert restoring_loads([None, {"other": 1}]) is pickle.loads
    point(["name", "count"])
    with pytest.raises(TypeError):
        pickle.loads(data)  # what a restore did before: too many arguments
    assert remapping_loads([_record(OLD_FIELDS)])(data)[0] == ("a", 3)
    new = point(NEW_FIELDS, ["-"])
    assert pickle.loads(data)[0] == new("a", 3, 9)  # as many fields: by position, silently wrong
    values = remapping_loads([_record(OLD_FIELDS)])(data)
    assert values == [new(3, "a", "-"), {"u": new(4, "b", "-")}] and type(values[0]) is new
    # gained a trailing field with a default only
    point(["name", "count"])
    data = pickle.dumps(point(["name", "count"])("c", 5), protocol=pickle.HIGHEST_PROTOCOL)
    grown = point(["name", "count", "last"], [None])
    assert remapping_loads([_record(["name", "count"])])(data) == grown("c", 5, None)

    assert remapping_loads([{"namedtuple": f"{__name__}:nowhere", "fields": ["x"]}]) is None  # no such class now


def test_a_typing_named_tuple_that_lost_a_field(monkeypatch):
    import types
    import typing

    from flowpoint.state.compatibility import remapping_loads, value_class

    module = types.ModuleType("sensor_types")
    monkeypatch.setitem(sys.modules, "sensor_types", module)

    class Reading(typing.NamedTuple):
        at: int
        unit: str
        value: float

    Reading.__module__, Reading.__qualname__ = module.__name__, "Reading"
    module.Reading = Reading
    recorded = value_class("value", Reading(1, "C", 2.5))
    data = pickle.dumps(Reading(1, "C", 2.5), protocol=pickle.HIGHEST_PROTOCOL)

    class Reading(typing.NamedTuple):  # noqa: F811 - the job's next version of the class
        at: int
        value: float
        source: str = "?"

    Reading.__module__, Reading.__qualname__ = module.__name__, "Reading"
    module.Reading = Reading
    assert remapping_loads([recorded])(data) == Reading(1, 2.5, "?")


def test_a_named_tuple_field_added_without_default_names_the_class_and_field(point):
    from flowpoint.state.compatibility import remapping_loads

    data = pickle.dumps(point(["name", "count"])("a", 3), protocol=pickle.HIGHEST_PROTOCOL)
    point(["name", "count", "region"])
    with pytest.raises(StateMigrationError) as info:
        remapping_loads([_record(["name", "count"])])(data)
    assert "Point" in str(info.value) and "'region'" in str(info.value) and "default" in str(info.value)


def _pickled_part(tables):
    import hashlib

    from flowpoint.checkpoint.parts import RestoredFile

    data = pickle.dumps(tables, protocol=pickle.HIGHEST_PROTOCOL)
    classes = (("l", json.dumps(_record(OLD_FIELDS))), ("m", json.dumps(_record(OLD_FIELDS))), ("v", json.dumps(_record(OLD_FIELDS))))
    kinds = (("l", "list"), ("m", "map"), ("v", "value"))
    return RestoredFile("counting", "memory://chk-1/part.pkl", len(data), data=data, sha256=hashlib.sha256(data).hexdigest(), kinds=kinds, declared=("l", "m", "v"), value_classes=classes)


def test_a_hashmap_checkpoint_part_restores_named_tuples_by_field_name(point):
    from flowpoint.partition.working import load_restored
    from flowpoint.state.compatibility import recorded_states

    old = point(OLD_FIELDS)
    f = _pickled_part({"v": {"a": old("a", 3, 9)}, "l": {"a": [old("a", 1, 7), old("a", 2, 8)]}, "m": {"a": {"u": old("u", 5, 1)}}})
    new = point(NEW_FIELDS, ["-"])
    tables = load_restored([f])["counting"]
    assert tables == {"v": {"a": new(3, "a", "-")}, "l": {"a": [new(1, "a", "-"), new(2, "a", "-")]}, "m": {"a": {"u": new(5, "u", "-")}}}
    assert recorded_states([f], "counting")["v"].value_class == _record(OLD_FIELDS)
    point(["name", "count", "last", "region"])
    with pytest.raises(StateMigrationError, match="'region'"):  # not a StateDecodeError: the file is fine
        load_restored([f])


def test_a_rocksdb_native_restore_rewrites_named_tuples_when_registered(point, tmp_path):
    from flowpoint.state.compatibility import recorded_states

    old = point(OLD_FIELDS)
    with RocksDBKeyedStateBackend("counter", str(tmp_path / "db"), 128, uid="counting") as b:
        b.restore({"v": {"a": old("a", 3, 9)}, "l": {"a": [old("a", 1, 7)]}, "m": {"a": {"u": old("u", 5, 1)}}}, {"v": "value", "l": "list", "m": "map"})
        assert b.value_class("v") == _record(OLD_FIELDS) and b.value_class("m") == _record(OLD_FIELDS)
        b.create_checkpoint(str(tmp_path / "chk"))
    new = point(NEW_FIELDS, ["-"])
    RocksDBKeyedStateBackend.restore_files(str(tmp_path / "db2"), str(tmp_path / "chk"))
    f = _pickled_part({})
    with RocksDBKeyedStateBackend("counter", str(tmp_path / "db2"), 128, uid="counting") as b:
        b.restored_states = recorded_states([f], "counting")
        b.remap_named_tuples({n: r.value_class for n, r in b.restored_states.items()})
        # before registration: the DB holds the old pickles, read (savepoints, queries) by name
        assert b.snapshot()["m"] == {state_key("a"): {"u": new(5, "u", "-")}}
        assert b.value_class("v") == _record(OLD_FIELDS)  # what a checkpoint of these files records
        assert value_of(b, ValueStateDescriptor("v"), "a") == new(3, "a", "-")
        assert value_of(b, ListStateDescriptor("l"), "a") == [new(1, "a", "-")]
        assert value_of(b, MapStateDescriptor("m"), "a") == {"u": new(5, "u", "-")}
        b._remap.clear()  # registration rewrote them: plain pickle.loads reads every value now
        assert b.snapshot() == {"v": {state_key("a"): new(3, "a", "-")}, "l": {state_key("a"): [new(1, "a", "-")]}, "m": {state_key("a"): {"u": new(5, "u", "-")}}}
        assert b.value_class("l") == _record(NEW_FIELDS)


class PointKeeper(KeyedProcessFunction):
    """Keeps the key's last Point (ValueState), every tenth (ListState) and the last of each
    count % 3 (MapState), with whatever fields ``evolving_values.Point`` has in this job."""

    def open(self, ctx):
        self.last = ctx.get_state(ValueStateDescriptor("last"))
        self.some = ctx.get_list_state(ListStateDescriptor("some"))
        self.by_rest = ctx.get_map_state(MapStateDescriptor("by_rest"))

    def process_element(self, value, ctx):
        import evolving_values

        point = evolving_values.Point
        old = self.last.value()
        n = 1 if old is None else old.count + 1
        fields = {"name": str(ctx.get_current_key()), "count": n, "last": value}
        p = point(**{f: fields[f] for f in point._fields if f in fields})
        self.last.update(p)
        if n % 10 == 1:
            self.some.add(p)
        self.by_rest.put(n % 3, p)
        yield ctx.get_current_key(), n


def _points_job(make_env, parallelism, backend, restore=None, checkpoints=None, rate=None, count=600):
    config = {} if checkpoints is None else {"state_checkpoints_dir": str(checkpoints), "state_checkpoints_num-retained": 10}
    env = make_env(parallelism=parallelism, max_records=50, **config)
    env.get_configuration().set("state.backend.type", backend.removesuffix("-incremental"))
    env.get_configuration().set("state.backend.incremental", backend.endswith("-incremental"))
    if checkpoints is not None:
        from flowpoint.api.checkpointing import ExternalizedCheckpointCleanup

        env.enable_checkpointing(1)
        env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    if restore is not None:
        env.get_configuration().set("execution.savepoint.path", str(restore))
    source = DataGeneratorSource(lambda i: i, count=count, rate_limit_per_second=rate)
    env.from_source(source, source_name="n").uid("n").key_by(lambda v: v % 5).process(PointKeeper()).uid("points").sink_to(CollectSink()).uid("out")
    return env


def _stopped_with_state(make_env, tmp_path, backend, via):
    """Run the writing job (parallelism 2) until a few epochs are done; a savepoint or retained
    checkpoint of it."""
    checkpoints = tmp_path / "ck" if via == "checkpoint" else None
    env = _points_job(make_env, 2, backend, checkpoints=checkpoints, rate=1500)
    client = env.execute_async("points v1")
    deadline = time.monotonic() + 120
    while client._coordinator.epoch < 4 and not client.is_done() and time.monotonic() < deadline:
        time.sleep(0.05)
    if via == "savepoint":
        path = client.stop_with_savepoint(f"file://{tmp_path}/sp").removeprefix("file://")
        client.wait(60)
    else:
        client.cancel()
        with pytest.raises(Exception):  # noqa: B017 - a cancelled job's wait raises its cancellation
            client.wait(120)
        job_dir = checkpoints / client.get_job_id()
        path = str(job_dir / max((n for n in os.listdir(job_dir) if n.startswith("chk-") and (job_dir / n / "_metadata").exists()), key=lambda n: int(n[4:])))
    meta = json.loads(open(os.path.join(path, "_metadata")).read())
    (op,) = [o for o in meta["operators"] if o["uid"] == "points"]
    for name in ("last", "some", "by_rest"):
        assert op["states"][name]["value_class"] == {"namedtuple": "evolving_values:Point", "fields": OLD_FIELDS}, name
    return path


@pytest.mark.slow
@pytest.mark.parametrize(("backend", "via", "parallelism"), [
    ("hashmap", "savepoint", 3),
    ("rocksdb", "savepoint", 3),
    ("hashmap", "checkpoint", 3),
    ("rocksdb", "checkpoint", 2),  # native files restore at their own parallelism only
    ("rocksdb-incremental", "checkpoint", 2),
])
def test_named_tuple_state_restores_into_a_class_that_lost_and_gained_fields(make_env, tmp_path, point, backend, via, parallelism):
    point(OLD_FIELDS)
    path = _stopped_with_state(make_env, tmp_path, backend, via)
    new = point(NEW_FIELDS, ["-"])
    result = _points_job(make_env, parallelism, backend, restore=path).execute("points v2")
    state = result.get_keyed_state("points")
    assert sorted(p.count for p in state["last"].values()) == [120] * 5  # counting went on across the restore
    values = [*state["last"].values(), *(p for ps in state["some"].values() for p in ps), *(p for m in state["by_rest"].values() for p in m.values())]
    assert all(type(p) is new for p in values)
    assert sorted(p.count for ps in state["some"].values() for p in ps) == sorted(list(range(1, 121, 10)) * 5)
    assert {p.note for p in values} == {"-"}
    # a field added without a default cannot be filled: the restore fails once, naming it
    point([*OLD_FIELDS, "region"])
    with pytest.raises(StateMigrationError) as info:
        _points_job(make_env, parallelism, backend, restore=path).execute("points v3")
    assert "Point" in str(info.value) and "'region'" in str(info.value)
