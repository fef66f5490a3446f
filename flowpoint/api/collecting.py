"""Calling a window function in its forms: returning or yielding its results, or handing them
to a collector (Flink's 4-argument ``apply(key, window, inputs, out)``). Shared by the API, which
wraps a user's function, and the window operator, which calls it."""

from __future__ import annotations

import inspect
from typing import Any


class ListCollector:
    """Flink's ``Collector`` for the 4-argument ``apply(key, window, inputs, out)`` form."""

    __slots__ = ("values",)

    def __init__(self) -> None:
        self.values: list = []

    def collect(self, value: Any) -> None:
        self.values.append(value)


def takes_collector(method: Any, arity: int) -> bool:
    """True if a bound method takes one positional argument more than ``arity`` (a collector)."""
    try:
        params = inspect.signature(method).parameters.values()
    except (TypeError, ValueError):
        return False
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return False
    return sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params) > arity


def call_collecting(method: Any, args: tuple, collector: bool) -> list:
    """Call a window function; its results are what it yields/returns plus what it collects."""
    if not collector:
        r = method(*args)
        return [] if r is None else list(r)
    out = ListCollector()
    r = method(*args, out)
    if r is not None:
        out.values.extend(r)
    return out.values
