"""Restored state against the state a job declares, as Flink checks it when a state is
registered after a restore (``StateMigrationException``, state schema evolution).

A checkpoint or savepoint records each keyed state's kind (value, list, map, reducing,
aggregating): *declared* when the writing job had registered the state (every RocksDB state, and
HashMap states since issue 17), else *inferred* from the values (a dict is taken for a map, a
list for a list, anything else for a value). It also records the state's *schema*: the type
information its descriptor declared (``Types.ROW_NAMED([...], [...])``, ``Types.INT()``, ...).

When a restored job registers a state under the same name:

- another kind fails the task once, naming the operator, the state and both kinds;
- a Row type that gained or lost fields is migrated, value by value, by field name: an added
  field is None, a removed field is dropped (Flink's POJO and Avro evolution);
- any other change of the declared type fails the same way unless the descriptor names a
  migration function (``descriptor.with_migration(fn)``), which is then applied to every
  restored value (list elements, map values) that is not already of the new type;
- dataclass values whose class gained fields (with a default) or lost fields are rebuilt with
  the current class, whatever the descriptor declares;
- named tuple values (``collections.namedtuple``, ``typing.NamedTuple``; not Rows) whose class
  gained, lost or reordered fields are rebuilt by field name: a removed field is dropped, an
  added one gets its default; one without a default is a StateMigrationError naming the class
  and the field.

Migration happens when the state is registered in a task that restored it, before user code
sees a value; it is idempotent (by field names, and by type for migration functions), so a task
that rebuilds the same restored state later migrates it again to the same values.

Named tuples cannot wait for registration: a named tuple pickles as ``cls.__new__(cls,
*values)``, without its field names, so a class that lost a field does not even unpickle (and
one with as many fields, reordered, unpickles wrong). Each part of a checkpoint or savepoint
therefore records, for each state whose values are named tuples, ``value_class``:
``{"namedtuple": "<module>:<qualname>", "fields": [...]}`` from one of its values (O(1): a
state is written by one job, so its values share one class). A restore unpickles the files of
an operator whose recorded class now has other fields with :func:`remapping_loads` (a stand-in
class whose ``__new__`` maps the values by the recorded names onto the current class); all
other restores use plain ``pickle.loads``. HashMap tables and savepoint rows are remapped as
they load; a RocksDB restore of native files keeps the old pickles in the DB, reads them
through the remapping until the state is registered, and rewrites them then
(``RocksDBKeyedStateBackend.remap_named_tuples``).
"""

from __future__ import annotations

import dataclasses
import importlib
import io
import json
import pickle
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from flowpoint.api.row import Row
from flowpoint.api.types import RowType
from flowpoint.errors import StateAccessError, StateMigrationError

# kinds an inferred kind cannot be: a value that is neither a list nor a dict is not a list or
# map state's, a dict is not a list state's and a list is not a map state's
_INFERRED_MISFITS = {"value": {"list", "map"}, "list": {"map"}, "map": {"list"}}


class Recorded(NamedTuple):
    """What a checkpoint or savepoint records of one keyed state."""

    kind: str
    declared: bool
    schema: dict | None = None
    value_class: dict | None = None  # {"namedtuple": "<module>:<qualname>", "fields": [...]} of its stored values


Migration = Callable[[Any], Any]


# -- what is recorded -------------------------------------------------------------------------


def infer_kind(table: Mapping[Any, Any]) -> str:
    """HashMap state keeps no kinds: a dict is taken for MapState, a list for ListState."""
    for v in table.values():
        if isinstance(v, dict):
            return "map"
        if isinstance(v, list):
            return "list"
        return "value"
    return "value"


def declared_schema(descriptor: Any) -> dict | None:
    """The schema a descriptor declares, as data for ``_metadata`` (None: no type declared)."""
    t = getattr(descriptor, "type_info", None)
    kt = getattr(descriptor, "key_type_info", None)
    if t is None and kt is None:
        return None
    out: dict[str, Any] = {"type": None if t is None else repr(t)}
    if isinstance(t, RowType):
        out["fields"] = [[n, repr(ft)] for n, ft in zip(t.field_names, t.field_types, strict=True)]
    if kt is not None:
        out["key_type"] = repr(kt)
    return out


def schema_json(schema: dict | None) -> str:
    return "" if schema is None else json.dumps(schema, sort_keys=True)


def recorded_states(files: Iterable[Any], uid: str, tables: Mapping[str, Mapping[Any, Any]] | None = None) -> dict[str, Recorded]:
    """What a restore recorded for operator ``uid`` (from the restored files' metadata), with
    kinds inferred from ``tables`` for states the metadata does not record."""
    out: dict[str, Recorded] = {}
    for f in files:
        if f.uid != uid:
            continue
        declared = set(f.declared)
        schemas = {name: json.loads(s) for name, s in getattr(f, "schemas", ()) if s}
        classes = {name: json.loads(s) for name, s in getattr(f, "value_classes", ()) if s}
        for name, kind in f.kinds:
            if name not in out or (name in declared and not out[name].declared):
                out[name] = Recorded(kind, name in declared, schemas.get(name), classes.get(name))
    for name, table in (tables or {}).items():
        if name not in out and table:
            out[name] = Recorded(infer_kind(table), False)
    return out


def operator_label(name: str, uid: str | None) -> str:
    """How an error names a keyed operator: its name and uid (one of them when they are one)."""
    if not uid or uid == name:
        return f"operator uid {name!r}"
    return f"operator {name!r} (uid {uid!r})"


# -- the check at registration ------------------------------------------------------------------


def check_restored_kind(operator: str, name: str, kind: str, recorded: Recorded | None) -> None:
    """Refuse to register state ``name`` as ``kind`` when the restored state of that name has
    another kind (declared), or values no state of that kind can hold (inferred)."""
    if recorded is None or name.startswith("_"):  # flowpoint's own states (timers, windows) keep their kinds
        return
    old, declared = recorded.kind, recorded.declared
    if old == kind:
        return
    if declared or kind in _INFERRED_MISFITS.get(old, ()):
        how = "" if declared else " (as its values show)"
        msg = (
            f"{operator} declares state {name!r} as {kind} state, but the checkpoint or savepoint it was "
            f"restored from holds {name!r} as {old} state{how}. A state's kind cannot change across a restore: "
            f"declare it as {old} state again, give the new state another name (and restore with "
            "--allow-non-restored-state if the old one goes), or migrate the savepoint with flowpoint.state_io"
        )
        raise StateMigrationError(msg)


def restored_state_migration(operator: str, descriptor: Any, recorded: Recorded | None) -> Migration | None:
    """Check state ``descriptor`` against what was restored for it; the function that brings a
    restored value (a list element, a map value) to the declared schema, or None when nothing
    was restored for it. Raises StateMigrationError for a change that cannot be migrated."""
    name, kind = descriptor.name, descriptor.kind
    check_restored_kind(operator, name, kind, recorded)
    if recorded is None or name.startswith("_"):
        return None
    new = declared_schema(descriptor)
    old = recorded.schema
    plan = _Plan()
    if old is not None and new is not None and old != new and not (old.get("key_type") == new.get("key_type") and _row_fields_only(old, new)):
        fn = getattr(descriptor, "migration_function", None)
        if fn is None:
            msg = (
                f"{operator} declares state {name!r} with type {_describe(new)}, but the checkpoint or savepoint it was "
                f"restored from holds it with type {_describe(old)}. Restore with the old type, or name a migration "
                f"function on the descriptor (descriptor.with_migration(lambda old_value: new_value)); a Row type "
                "may gain or lose fields without one"
            )
            raise StateMigrationError(msg)
        plan.steps.append(_typed_migration(fn, descriptor.type_info, operator, name))
        plan.typed = True
    t = getattr(descriptor, "type_info", None)
    if isinstance(t, RowType):  # by field name, also for values restored without a recorded schema
        old_names = [n for n, _ in old["fields"]] if old is not None and "fields" in old else []
        plan.row_names = tuple(t.field_names)
        plan.steps.append(_row_evolution(list(t.field_names), old_names))
    plan.steps.append(_evolve_dataclass)
    return plan


class _Plan:
    """The migration of one restored state: its steps, and what tells a pass is needed."""

    def __init__(self) -> None:
        self.steps: list[Migration] = []
        self.typed = False
        self.row_names: tuple[str, ...] | None = None

    def __call__(self, value: Any) -> Any:
        for step in self.steps:
            value = step(value)
        return value

    def worth_scanning(self, kind: str, sample: Any) -> bool:
        if self.typed:
            return True
        if kind == "list" and isinstance(sample, list):
            sample = sample[0] if sample else None
        elif kind == "map" and isinstance(sample, dict):
            sample = next(iter(sample.values()), None)
        if dataclasses.is_dataclass(sample) and not isinstance(sample, type):
            return True
        return self.row_names is not None and isinstance(sample, tuple) and tuple(getattr(sample, "_fields", None) or ()) != self.row_names


def _row_fields_only(old: dict, new: dict) -> bool:
    """Both are Row types whose common fields keep their types (fields added or removed only)."""
    if "fields" not in old or "fields" not in new:
        return False
    before = dict(map(tuple, old["fields"]))
    return all(before.get(n, t) == t for n, t in new["fields"])


def _describe(schema: dict) -> str:
    t = schema.get("type")
    return t if "key_type" not in schema else f"{schema['key_type']} -> {t}"


def _row_evolution(names: list[str], old_names: list[str]) -> Migration:
    """A Row value with other field names as a Row of ``names``: by name, None for a new field;
    a Row without names (or a plain tuple) is read by the old schema's positions."""
    target = tuple(names)

    def evolve(value: Any) -> Any:
        if not isinstance(value, tuple):
            return value
        fields = getattr(value, "_fields", None) or (tuple(old_names) if len(value) == len(old_names) else None)
        if fields is None or tuple(fields) == target:
            return value
        by_name = dict(zip(fields, value, strict=True))
        out = Row.of(target, [by_name.get(n) for n in target])
        kind = getattr(value, "get_row_kind", None)
        if kind is not None and hasattr(out, "set_row_kind"):
            out.set_row_kind(kind())
        return out

    return evolve


def _conforms(value: Any, type_info: Any) -> bool:
    if type_info is None:
        return True
    classes = type_info.python_classes()
    return object in classes or isinstance(value, classes)


def _typed_migration(fn: Migration, type_info: Any, operator: str, name: str) -> Migration:
    def migrate(value: Any) -> Any:
        if _conforms(value, type_info):
            return value
        try:
            return fn(value)
        except Exception as e:
            msg = f"{operator}: the migration function of state {name!r} failed on the restored value {value!r:.100}: {type(e).__name__}: {e}"
            raise StateMigrationError(msg) from e

    return migrate


def _evolve_dataclass(value: Any) -> Any:
    """A dataclass instance restored with the fields of an older class definition, rebuilt with
    the current one: kept fields keep their values, new ones get their defaults."""
    if not dataclasses.is_dataclass(value) or isinstance(value, type):
        return value
    state = getattr(value, "__dict__", None)
    if state is None:
        return value
    fields = dataclasses.fields(value)
    names = {f.name for f in fields}
    if names == state.keys():
        return value
    new = object.__new__(type(value))
    for f in fields:
        if f.name in state:
            v = state[f.name]
        elif f.default is not dataclasses.MISSING:
            v = f.default
        elif f.default_factory is not dataclasses.MISSING:
            v = f.default_factory()
        else:
            msg = (
                f"restored {type(value).__qualname__} values have no field {f.name!r}, which the class now declares "
                "without a default: give the new field a default (field(default=...)) to restore old state"
            )
            raise StateMigrationError(msg)
        object.__setattr__(new, f.name, v)
    return new


# -- named tuple values: recorded field names, remapped when unpickled ---------------------------


def value_class(kind: str, value: Any) -> dict | None:
    """``{"namedtuple": "<module>:<qualname>", "fields": [...]}`` when ``value``, as stored for a
    state of ``kind`` (a list state's first element, a map state's first value), is a named
    tuple (``collections.namedtuple``, ``typing.NamedTuple``; not a Row); else None."""
    if kind == "list" and isinstance(value, list):
        value = value[0] if value else None
    elif kind == "map" and isinstance(value, dict):
        value = next(iter(value.values()), None)
    cls = type(value)
    if not isinstance(value, tuple) or cls is tuple or not hasattr(cls, "_make") or not isinstance(getattr(cls, "_fields", None), tuple):
        return None
    return {"namedtuple": f"{cls.__module__}:{cls.__qualname__}", "fields": list(cls._fields)}


def sample_value_class(kind: str, table: Mapping[Any, Any]) -> dict | None:
    """:func:`value_class` of one value of ``table`` (the first: O(1)); a state is written by one
    job, so its values share one class."""
    for v in table.values():
        return value_class(kind, v)
    return None


def remapping_loads(value_classes: Iterable[dict | None]) -> Callable[[bytes], Any] | None:
    """An unpickler for values recorded with ``value_classes``: a named tuple class whose fields
    changed since (the current class, imported by its recorded name, has other ``_fields``) is
    rebuilt by field name (a removed field is dropped, an added one gets its default). None when
    no recorded class changed: plain ``pickle.loads`` reads them.

    A named tuple pickles as ``cls.__new__(cls, *values)``; the unpickler hands pickle a stand-in
    class whose ``__new__`` maps the values by the recorded names and returns an instance of the
    current class."""
    stand_ins: dict[tuple[str, str], type] = {}
    for rec in value_classes:
        if not rec or "namedtuple" not in rec:
            continue
        module, _, qualname = rec["namedtuple"].partition(":")
        current = _current_class(module, qualname)
        old = tuple(rec.get("fields") or ())
        if current is not None and tuple(current._fields) != old:
            stand_ins[(module, qualname)] = _stand_in(current, old)
    if not stand_ins:
        return None

    class Unpickler(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> Any:
            return stand_ins.get((module, name)) or super().find_class(module, name)

    def loads(data: bytes) -> Any:
        return Unpickler(io.BytesIO(data)).load()

    return loads


def restoring_loads(value_classes: Iterable[dict | None]) -> Callable[[bytes], Any]:
    """:func:`remapping_loads`, or ``pickle.loads`` when nothing needs remapping."""
    return remapping_loads(value_classes) or pickle.loads


def _current_class(module: str, qualname: str) -> Any:
    """The named tuple class the job defines under a recorded name now (None: none, or not a
    named tuple: unpickling then fails as it would have)."""
    try:
        obj: Any = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except Exception:  # noqa: BLE001 - the unpickling that follows reports a missing class
        return None
    fields = getattr(obj, "_fields", None)
    return obj if isinstance(obj, type) and issubclass(obj, tuple) and hasattr(obj, "_make") and isinstance(fields, tuple) else None


def _stand_in(current: Any, old_fields: tuple[str, ...]) -> type:
    defaults = current._field_defaults
    missing = object()

    def __new__(cls: type, *values: Any) -> Any:
        by_name = dict(zip(old_fields, values, strict=False))
        out = []
        for name in current._fields:
            v = by_name.get(name, defaults.get(name, missing))
            if v is missing:
                msg = (
                    f"restored {current.__qualname__} values have no field {name!r}, which the class now declares "
                    f"without a default (they were written with fields {list(old_fields)}): give the new field a "
                    "default to restore old state"
                )
                raise StateMigrationError(msg)
            out.append(v)
        return current._make(out)

    return type(current.__name__, (), {"__new__": __new__, "__qualname__": current.__qualname__, "__module__": current.__module__})


# -- applying a migration to stored values ------------------------------------------------------


def migrate_value(kind: str, value: Any, migrate: Migration) -> Any:
    """``value`` as stored for a state of ``kind`` (a list's elements, a map's values) migrated;
    the same object when nothing changed."""
    if kind == "list" and isinstance(value, list):
        out = [migrate(x) for x in value]
        return value if all(a is b for a, b in zip(out, value, strict=True)) else out
    if kind == "map" and isinstance(value, dict):
        out = {k: migrate(v) for k, v in value.items()}
        return value if all(out[k] is v for k, v in value.items()) else out
    return migrate(value)


def migrate_table(kind: str, table: dict, migrate: Migration) -> int:
    """Migrate every value of one state's table in place; how many changed."""
    changed = 0
    for key, value in table.items():
        new = migrate_value(kind, value, migrate)
        if new is not value:
            table[key] = new
            changed += 1
    return changed


def declared_states(backend: Any) -> dict[str, dict]:
    """``{state name: {"kind", "schema"}}`` of the states the operators registered in ``backend``
    (in this process): a task reports them with each epoch, and the coordinator records them in
    ``_metadata`` (a checkpoint's synchronous part may run in a task whose operators have not
    registered their states yet, on a partition rebuilt in another worker)."""
    out: dict[str, dict] = {}
    for name, kind in backend.kinds.items():
        info: dict[str, Any] = {"kind": kind}
        schema = backend.schemas.get(name)
        if schema is not None:
            info["schema"] = schema
        out[name] = info
    return out


def check_redeclared(backend: Any, descriptor: Any, known: str | None) -> None:
    """One state name declared as two kinds in one job (``known``: the kind this backend has
    registered for the name in this run, None if none)."""
    if known is not None and known != descriptor.kind:
        msg = (
            f"operator {backend.operator_name!r} declares state {descriptor.name!r} as {descriptor.kind} state, "
            f"but it was declared as {known} state before; give the two states different names"
        )
        raise StateAccessError(msg)


def on_register(backend: Any, descriptor: Any, recorded: Recorded | None) -> Migration | None:
    """What a backend does when a state is first registered in it (both backends): check the
    kind against what was recorded for it (``recorded``), remember the declared schema, and
    return the migration its restored values need, once (None if none)."""
    name = descriptor.name
    label = operator_label(backend.operator_name, backend.uid)
    migrate = None
    if name in backend.restored_states and name not in backend.migrated:
        migrate = restored_state_migration(label, descriptor, recorded)
        backend.migrated.add(name)
    else:
        check_restored_kind(label, name, descriptor.kind, recorded)
    backend.schemas[name] = declared_schema(descriptor)
    return migrate


def worth_scanning(migrate: Migration, kind: str, sample: Any) -> bool:
    """Whether the restored values of a state need a pass, judged by one stored value
    (``sample``): a type change always does; the field evolutions only when the sample shows
    an older Row or dataclass shape (a state is written by one job, so its values share one)."""
    check = getattr(migrate, "worth_scanning", None)
    return True if check is None else check(kind, sample)
