"""What happened to a job, kept for the REST API and the dashboard (driver side): the failures
it went through (Flink's exception history) and the checkpoints or savepoints it restored.

The restart manager records both; readers (the control endpoint's threads) get copies. Each
list keeps the newest ``KEEP`` entries, as Flink's ``web.exception-history-size`` does.
"""

from __future__ import annotations

import re
import threading
import traceback
from dataclasses import dataclass

from flowpoint.clock import now_ms

KEEP = 16  # Flink's web.exception-history-size default
_AT = re.compile(r" at (?P<where>.+:\d+)$")
# how flowpoint.errors.UserFunctionError's message names the operator and the function
_NAMED = re.compile(r"operator '(?P<operator>[^']*)' \(uid '(?P<uid>[^']*)', function (?P<function>.+? at \S+:\d+)\)")


@dataclass(frozen=True)
class FailureRecord:
    """One failure of the job: what raised, where, and what the job did next."""

    timestamp_ms: int
    exception_name: str  # the qualified class name, e.g. "flowpoint.errors.UserFunctionError"
    message: str
    stacktrace: str  # the formatted traceback (the task's own, when the error carries it)
    operator: str | None  # the operator whose function raised, when the error names it
    uid: str | None
    location: str | None  # the user function's file:line, when the error names it
    restarted: bool  # the job restarted after it (False: it ended the job)
    repeat: int = 1  # the same failure on the same record this many times in a row (1: a new one)


@dataclass(frozen=True)
class RestoreRecord:
    """A checkpoint or savepoint the job restored: at its start, or after a failure."""

    checkpoint_id: int
    timestamp_ms: int
    is_savepoint: bool
    path: str | None


def _details(error: BaseException) -> BaseException:
    """The error that names the operator: ``error`` or an explicit cause of it."""
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if getattr(e, "operator", None) or getattr(e, "location", None):
            return e
        e = e.__cause__
    return error


def _location(error: BaseException) -> str | None:
    """``error.location`` (file:line), else the file:line of ``error.function``
    ("name at file:line", flowpoint.errors.UserFunctionError)."""
    location = getattr(error, "location", None)
    if location:
        return str(location)
    function = getattr(error, "function", None)
    return _location_of(str(function)) if function else None


def _location_of(function: str) -> str | None:
    m = _AT.search(function)
    return m.group("where") if m else None


def failure_record(error: BaseException, restarted: bool, timestamp_ms: int | None = None, repeat: int = 1) -> FailureRecord:
    """What is kept of a failure. The operator, uid and file:line come from the error's
    attributes, else from its message as a user function's failure words it (an error rebuilt
    from Spark's text carries only its message)."""
    named = _details(error)
    trace = getattr(named, "trace", None) or "".join(traceback.format_exception(type(error), error, error.__traceback__))
    cls = type(error)
    operator, uid, location = getattr(named, "operator", None), getattr(named, "uid", None), _location(named)
    m = _NAMED.search(str(named))
    if m is not None:
        operator, uid = operator or m["operator"], uid or m["uid"]
        location = location or _location_of(m["function"])
    return FailureRecord(
        now_ms() if timestamp_ms is None else timestamp_ms,
        f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__,
        str(error),
        trace,
        str(operator) if operator else None,
        str(uid) if uid else None,
        location,
        restarted,
        repeat,
    )


class JobHistory:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: list[FailureRecord] = []
        self._restores: list[RestoreRecord] = []
        self._errors: list[BaseException] = []  # the errors recorded last (one record per error)
        self.total_failures = 0
        self.total_restores = 0

    def failed(self, error: BaseException, restarted: bool, repeat: int = 1) -> None:
        record = failure_record(error, restarted, repeat=repeat)
        with self._lock:
            self._errors.append(error)
            del self._errors[:-KEEP]
            self.total_failures += 1
            self._failures.append(record)
            del self._failures[:-KEEP]

    def recorded(self, error: BaseException) -> bool:
        with self._lock:
            return any(e is error for e in self._errors)

    def restored(self, checkpoint_id: int, is_savepoint: bool, path: str | None) -> None:
        with self._lock:
            self.total_restores += 1
            self._restores.append(RestoreRecord(int(checkpoint_id), now_ms(), is_savepoint, path))
            del self._restores[:-KEEP]

    def failures(self) -> list[FailureRecord]:
        """Oldest first."""
        with self._lock:
            return list(self._failures)

    def restores(self) -> list[RestoreRecord]:
        with self._lock:
            return list(self._restores)
