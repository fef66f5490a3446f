"""Checks run on the job graph before anything runs; each error names the operator and function."""

from __future__ import annotations

import dis
import inspect
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

import cloudpickle

from flowpoint.api.functions import unwrap
from flowpoint.errors import SerializationError, StateAccessError
from flowpoint.graph.transformation import describe_function, remember_where

if TYPE_CHECKING:
    from flowpoint.graph.nodes import Node

KEYED_STATE_CALLS = frozenset(
    {"get_state", "get_list_state", "get_map_state", "get_reducing_state", "get_aggregating_state"}
)


def check_serializable(node: Node, key_selectors: Iterable[Any] = ()) -> None:
    """``key_selectors``: those of the key_by calls feeding the node (key_by is not a node)."""
    t = node.t
    objects = [("function", t.function), ("key selector", t.key_selector), ("sink", t.sink)]
    objects += [("key selector", k) for k in key_selectors]
    for what, obj in objects:
        if obj is None:
            continue
        if what != "sink":
            remember_where(obj)
        try:
            cloudpickle.dumps(obj)
        except Exception as e:  # noqa: BLE001 - any pickling failure is reported the same way
            desc = describe_function(obj) if what != "sink" else type(obj).__name__
            msg = (
                f"the {what} of operator {t.name!r} ({desc}) cannot be serialized to be sent to "
                f"executors: {type(e).__name__}: {e}. Create unpicklable resources (connections, "
                f"locks, files) in open() instead of in __init__ or in a closure."
            )
            raise SerializationError(msg) from e
    if t.source is not None:
        try:
            cloudpickle.dumps(t.source.create_reader())
        except Exception as e:  # noqa: BLE001
            msg = f"the reader of source {t.name!r} ({type(t.source).__name__}) cannot be serialized: {type(e).__name__}: {e}"
            raise SerializationError(msg) from e


# operator state is declared here (CheckpointedFunction): its get_list_state is not keyed state
_OPERATOR_STATE_METHODS = frozenset({"initialize_state", "snapshot_state"})


def _code_objects(fn: Any) -> list[Any]:
    """Code objects of a function or of every method a function object's class defines."""
    fn = unwrap(fn)
    codes = []
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        codes.append(fn.__code__)
    else:
        for klass in type(fn).__mro__:
            if klass.__module__.startswith("flowpoint.") or klass is object:
                continue
            for name, member in vars(klass).items():
                if inspect.isfunction(member) and name not in _OPERATOR_STATE_METHODS:
                    codes.append(member.__code__)
    out = []
    while codes:
        code = codes.pop()
        out.append(code)
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    return out


def find_keyed_state_call(fn: Any) -> tuple[str, str, int] | None:
    """``(call name, file, line)`` of the first keyed-state call in ``fn``'s code, if any."""
    for code in _code_objects(fn):
        if not KEYED_STATE_CALLS.intersection(code.co_names):
            continue
        for ins in dis.get_instructions(code):
            if ins.opname in ("LOAD_ATTR", "LOAD_METHOD") and ins.argval in KEYED_STATE_CALLS:
                line = ins.positions.lineno if ins.positions else code.co_firstlineno
                return ins.argval, code.co_filename, line or code.co_firstlineno
    return None


def check_keyed_state_use(node: Node) -> None:
    """Keyed state is only available to operators on a KeyedStream (after ``key_by``)."""
    if node.keyed or node.t.function is None:
        return
    found = find_keyed_state_call(node.t.function)
    if found is not None:
        call, file, line = found
        msg = (
            f"operator {node.t.name!r} ({describe_function(node.t.function)}) calls {call}() at "
            f"{file}:{line}, but keyed state is only available on a keyed stream: call "
            f"key_by(...) before this operator, or use operator state"
        )
        raise StateAccessError(msg)
