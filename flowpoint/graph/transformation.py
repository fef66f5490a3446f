"""The nodes the DataStream API records: one :class:`Transformation` per API call.

``key_by`` and ``union`` are *virtual* nodes (they decide how records are partitioned);
every other kind is a physical operator that runs in a task.
"""

from __future__ import annotations

import functools
import itertools
import re
import types
from dataclasses import dataclass, field
from typing import Any

from flowpoint.api.functions import unwrap
from flowpoint.api.types import TypeInformation
from flowpoint.errors import JobGraphError

_ids = itertools.count(1)

VIRTUAL_KINDS = frozenset({"key_by", "union", "rebalance", "broadcast", "forward", "partition_custom"})
KEYED_KINDS = frozenset({"keyed_process", "keyed_map", "keyed_flat_map", "keyed_filter", "reduce", "rolling_agg", "window", "keyed_broadcast_process", "keyed_co_process"})
_UID_PATTERN = re.compile(r"^[A-Za-z0-9_\-:]+$")


@dataclass(eq=False)
class Transformation:
    kind: str
    name: str
    inputs: list[Transformation] = field(default_factory=list)
    function: Any = None
    output_type: TypeInformation | None = None
    parallelism: int | None = None
    max_parallelism: int | None = None
    uid: str | None = None
    source: Any = None  # a Source for kind == "source"
    sink: Any = None  # a Sink for kind == "sink"
    key_selector: Any = None  # for kind == "key_by"
    options: dict[str, Any] = field(default_factory=dict)
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def is_virtual(self) -> bool:
        return self.kind in VIRTUAL_KINDS

    def set_uid(self, uid: str) -> None:
        if not isinstance(uid, str) or not _UID_PATTERN.match(uid):
            msg = (
                f"uid {uid!r} of operator {self.name!r} is not valid: use letters, digits, '_', '-' and ':' only"
            )
            raise JobGraphError(msg)
        self.uid = uid

    def describe(self) -> str:
        """``'name' (uid 'x', function f at file.py:12)`` for error messages."""
        parts = [f"uid {self.uid!r}"] if self.uid else []
        if self.function is not None:
            parts.append(f"function {describe_function(self.function)}")
        return f"{self.name!r}" + (f" ({', '.join(parts)})" if parts else "")

    def __repr__(self) -> str:
        return f"<{self.kind} {self.name!r} #{self.id}>"


_WHERE = "__flowpoint_where__"


def remember_where(function: Any) -> None:
    """Stamp a user function with its ``name at file:line``, on the driver, before it is pickled:
    cloudpickle >= 3.1 replaces the file of code it pickles by value with ``<dynamic-code>``, so an
    executor could no longer name the user's file in an error message."""
    fn = unwrap(function)
    holder = getattr(fn, "__func__", fn)  # a bound method: its function carries the stamp
    if getattr(holder, _WHERE, None) is not None:
        return
    where = describe_function(fn)
    try:
        object.__setattr__(holder, _WHERE, where)
    except (AttributeError, TypeError):  # builtins, __slots__ classes: described where they run
        pass


def describe_function(function: Any) -> str:
    """A user function as ``name at file:line`` (lambdas, functions, methods, partials and class
    instances), from code objects only: a function's or method's own code, a class instance's
    earliest method defined in its class (or, failing that, in the nearest class of its MRO
    outside flowpoint). Source files are never read or parsed: ``inspect.getsourcelines`` parses
    a whole file with ``ast``, which is slow and, on CPython 3.11, not safe while another thread
    parses too."""
    fn = unwrap(function)
    stamped = getattr(getattr(fn, "__func__", fn), _WHERE, None)
    if isinstance(stamped, str):
        return stamped
    while isinstance(fn, functools.partial):
        fn = fn.func
    code = _code_of(fn)
    name = getattr(fn, "__qualname__", None) or type(fn).__qualname__
    if code is None:
        return name
    return f"{name} at {code.co_filename}:{code.co_firstlineno}"


def _is_routine(fn: Any) -> bool:
    return isinstance(fn, (types.FunctionType, types.MethodType))


def _code_of(fn: Any) -> types.CodeType | None:
    """The code object that says where ``fn`` was written, or None (a builtin, a C type)."""
    if _is_routine(fn):
        return getattr(fn, "__func__", fn).__code__
    cls = fn if isinstance(fn, type) else type(fn)
    for klass in cls.__mro__:
        if klass.__module__ in ("builtins", "abc") or klass.__module__.startswith("flowpoint."):
            continue
        codes = [c for c in map(_method_code, vars(klass).values()) if c is not None]
        if codes:
            return min(codes, key=lambda c: c.co_firstlineno)
    return None


def _method_code(member: Any) -> types.CodeType | None:
    member = getattr(member, "__func__", member)  # staticmethod, classmethod
    if isinstance(member, property):
        member = member.fget
    return member.__code__ if isinstance(member, types.FunctionType) else None
