"""Naming a state value that cannot be pickled (issue 10, case 9).

Working state is written as pickles when an epoch ends (HashMap deltas and bases, RocksDB
values), so a value that cannot be pickled (a lock, a socket, a client) fails there, inside
flowpoint's code. :func:`unpicklable_state_error` then looks through the epoch's changes of the
task's keyed operators, pickling one value at a time (only on this failure path), and returns a
:class:`~flowpoint.errors.SerializationError` naming the operator, its uid, the user function,
the state name and the key (and a MapState entry's user key). No restart can fix it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowpoint.errors import SerializationError
from flowpoint.graph.transformation import describe_function
from flowpoint.state.key_identity import user_key
from flowpoint.tasks.pickling import pickle_error

if TYPE_CHECKING:
    from flowpoint.partition.working import TaskState
    from flowpoint.tasks.plan import StagePlan


def _unpicklable_part(value: Any) -> tuple[str, BaseException] | None:
    """``(where in the value, error)`` if ``value`` cannot be pickled: a map entry's user key or a
    list element's index when the value is a dict or list whose element is the culprit."""
    error = pickle_error(value)
    if error is None:
        return None
    if type(value) is dict:
        for uk, v in value.items():
            inner = pickle_error(v)
            if inner is not None:
                return f", user key {uk!r:.100}", inner
    if type(value) is list:
        for i, v in enumerate(value):
            inner = pickle_error(v)
            if inner is not None:
                return f", element {i}", inner
    return "", error


def unpicklable_state_error(plan: StagePlan, ts: TaskState) -> SerializationError | None:
    """The error naming the first value written this epoch that cannot be pickled (operators in
    chain order), or None if every written value pickles (the failure was something else)."""
    for nid in plan.order:
        spec = plan.ops[nid]
        backend = ts.backends.get(spec.uid) if spec.keyed else None
        changed = getattr(backend, "changed_values", None)
        if changed is None:
            continue
        for name, key, value in changed():
            found = _unpicklable_part(value)
            if found is None:
                continue
            where, error = found
            fn = describe_function(spec.function) if spec.function is not None else spec.kind
            msg = (
                f"operator {spec.name!r} (uid {spec.uid!r}, function {fn}) wrote a {type(value).__name__} value to "
                f"state {name!r} for key {user_key(key)!r:.100}{where} that cannot be pickled: {type(error).__name__}: {error}. "
                "State values are written as pickles (working state, checkpoints, savepoints): keep locks, "
                "connections, clients and other resources in fields of the function set in open(), not in state"
            )
            return SerializationError(msg)
    return None


def unpicklable_operator_state_error(plan: StagePlan, operator_state: dict[str, dict]) -> SerializationError | None:
    """The error naming an operator state (or broadcast state) value that cannot be pickled, or
    None if all of ``operator_state`` (``{"<uid>:<subtask>": {name: (mode, items)}}``, returned to
    the driver with the task's acknowledgement) pickles. Checked in the task: a value that Spark
    fails to pickle on the way back crashes the Python worker, which would look like a lost
    worker and be restarted without end."""
    if pickle_error(operator_state) is None:
        return None
    specs = {plan.ops[n].uid: plan.ops[n] for n in plan.order}
    for instance, states in operator_state.items():
        uid = instance.rsplit(":", 1)[0]
        spec = specs.get(uid)
        what = f"operator uid {uid!r}"
        if spec is not None:
            fn = describe_function(spec.function) if spec.function is not None else spec.kind
            what = f"operator {spec.name!r} (uid {uid!r}, function {fn})"
        for name, (_mode, items) in states.items():
            for i, item in enumerate(items):
                error = pickle_error(item)
                if error is None:
                    continue
                msg = (
                    f"{what} holds a {type(item).__name__} value in its operator state {name!r} (element {i}) that cannot "
                    f"be pickled: {type(error).__name__}: {error}. Operator and broadcast state values are written as "
                    "pickles: keep locks, connections, clients and other resources in fields of the function set in "
                    "open(), not in state"
                )
                return SerializationError(msg)
    error = pickle_error(operator_state)
    msg = f"the operator state of stage {plan.name!r} cannot be pickled: {type(error).__name__}: {error}"
    return SerializationError(msg)
