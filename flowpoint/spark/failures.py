"""Task failures seen from the driver: which error a failed epoch raises, and whether a restart
can get past it (docs/architecture.md, section 10a: errors keep their class across Spark).

When a Python task raises, Spark retries it; when the retries give up, the driver gets a
py4j/PySpark exception whose text holds the worker's Python traceback. :func:`task_error` reads
the outermost Python exception out of that text and gives the driver an error of the same
class with the same message: ``flowpoint.errors.InvalidKeyError: ...`` becomes an
``InvalidKeyError``, a user function's failure a ``UserFunctionError`` naming the function and
its file:line. A value that cannot be pickled becomes a ``SerializationError``; anything else a
``JobExecutionError`` naming the Python (or Spark) error.

:func:`is_recoverable` tells the restart loop whether a restart may get past an error, and
:func:`failure_identity` whether a failure after a restart is the one before it (a user function
failing on the same record the same way), which the restart manager counts and names; the restart
strategy decides all the same, unless the user chose to fail fast on such a repeat.
Pure Python: no pyspark import.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from flowpoint import errors
from flowpoint.errors import (
    FlowpointError,
    JobExecutionError,
    SerializationError,
    UserFunctionError,
)

_TRACEBACK = "Traceback (most recent call last):"
_FRAME = re.compile(r'^\s+File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>.+?)\s*$')
# the first line of a printed exception: "pkg.mod.Class: message" or a bare "Class"
_HEADER = re.compile(r"(?P<cls>[A-Za-z_][\w.]*)(?:: ?|(?=\r?\n)|\Z)")
# where a printed exception's (possibly multi-line) message ends in the text around it
_MESSAGE_END = re.compile(
    r"\r?\n(?:"
    r" ?SQLSTATE: \w+"  # Spark's PythonException appends the SQL state
    r"|\tat \S"  # a JVM stack frame
    r"|\t\.\.\. \d+ more"
    r"|Caused by: [\w.$]+"
    r"|\r?\n(?:Driver|JVM) stacktrace:"
    r"|\r?\nThe above exception was the direct cause of the following exception:"
    r"|\r?\nDuring handling of the above exception, another exception occurred:"
    r"|[^\n]*Traceback \(most recent call last\):"
    r")"
)
_BARE_FLOWPOINT = re.compile(r"(?:^|(?<=[\s:(]))flowpoint\.errors\.\w+(?=: |\r?\n|\Z)", re.M)
_PICKLING = re.compile(
    r"(?i)\b(?:can't|cannot|could not|unable to) (?:pickle|serialize)\b|\bwhile pickling\b|\bnot picklable\b"
)
_PICKLING_CLASSES = {"PicklingError", "TypeError", "AttributeError", "RecursionError"}
_PICKLING_HELPERS = {"dumps", "_dumps", "dump", "encode", "_write_with_length"}
_JVM_ERROR = re.compile(r"^(?::\s*)?(?P<cls>[\w.$]+(?:Exception|Error))(?::\s*(?P<msg>.*))?$")


@dataclass(frozen=True)
class PythonFailure:
    """A Python exception as printed in a task's traceback."""

    cls: str  # as printed: "flowpoint.errors.InvalidKeyError", "TypeError", "_pickle.PicklingError"
    message: str
    frames: tuple[tuple[str, int, str], ...] = ()  # (file, line, function), innermost last

    @property
    def name(self) -> str:
        return self.cls.rsplit(".", 1)[-1]


def python_failure(text: str) -> PythonFailure | None:
    """The outermost Python exception in the text of a failed Spark job: the exception of the
    last traceback in it (a chained exception's cause is printed first; Spark may repeat the
    whole traceback under "Caused by"). Without a traceback, the last ``flowpoint.errors.X:
    message`` in the text. None when there is no Python exception in the text."""
    last: PythonFailure | None = None
    pos = text.find(_TRACEBACK)
    while pos >= 0:
        pos += len(_TRACEBACK)
        entry = _parse_traceback(text, pos)
        if entry is not None:
            last = entry
        pos = text.find(_TRACEBACK, pos)
    if last is not None:
        return last
    bare = list(_BARE_FLOWPOINT.finditer(text))
    if bare:
        m = bare[-1]
        start = m.end() + 2 if text.startswith(": ", m.end()) else m.end()
        return PythonFailure(m.group(0), _message(text, start))
    return None


def _parse_traceback(text: str, pos: int) -> PythonFailure | None:
    """The exception printed after the frames of a traceback whose header ends at ``pos``."""
    nl = text.find("\n", pos)
    if nl < 0:
        return None
    frames: list[tuple[str, int, str]] = []
    p = nl + 1
    while p < len(text):
        end = text.find("\n", p)
        end = len(text) if end < 0 else end
        line = text[p:end]
        if not line.startswith(" "):  # frames and their source lines are indented
            break
        m = _FRAME.match(line)
        if m:
            frames.append((m["path"], int(m["line"]), m["func"]))
        p = end + 1
    else:
        return None
    m = _HEADER.match(text, p)
    if m is None:
        return None
    return PythonFailure(m["cls"], _message(text, m.end()), tuple(frames))


def _message(text: str, start: int) -> str:
    end = _MESSAGE_END.search(text, start)
    return text[start : end.start() if end else len(text)].rstrip()


def flowpoint_class(name: str) -> type[FlowpointError] | None:
    """The flowpoint error class printed as ``name`` (``flowpoint.errors.<Class>``), or None."""
    prefix = "flowpoint.errors."
    if not name.startswith(prefix):
        return None
    cls = getattr(errors, name[len(prefix) :], None)
    if isinstance(cls, type) and issubclass(cls, FlowpointError):
        return cls
    return None


def task_error(text: str, epoch: int) -> FlowpointError:
    """The error a failed epoch raises on the driver, from the text of Spark's exception."""
    failure = python_failure(text)
    if failure is None:
        return JobExecutionError(f"epoch {epoch} failed: {spark_reason(text)}")
    cls = flowpoint_class(failure.cls)
    if cls is not None:
        try:
            return cls(failure.message)
        except Exception:  # noqa: BLE001 - a class with another signature: fall back below
            pass
    if failure.name in _PICKLING_CLASSES and _PICKLING.search(failure.message):
        return _serialization_error(failure, epoch)
    reason = f"{failure.name}: {failure.message}" if failure.message else failure.name
    return JobExecutionError(f"epoch {epoch} failed: {reason}")


def _serialization_error(failure: PythonFailure, epoch: int) -> SerializationError:
    ours = [f for f in failure.frames if "/flowpoint/" in f[0].replace("\\", "/")]
    named = [f for f in ours if f[2] not in _PICKLING_HELPERS] or ours
    where = ""
    if named:
        path, line, func = named[-1]
        path = path.replace("\\", "/")
        where = f" (in {func} at {path[path.rfind('/flowpoint/') + 1 :]}:{line})"
    msg = (
        f"epoch {epoch} failed: a record or state value of the job cannot be pickled{where}: "
        f"{failure.name}: {failure.message}. Records and state values must be picklable; create "
        f"locks, connections, clients and other such resources in open(), not in records or state"
    )
    return SerializationError(msg)


def spark_reason(text: str) -> str:
    """A one-line reason for a Spark failure that carries no Python exception (a crashed Python
    worker, a lost executor, a cancelled job)."""
    lines = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith("\t")]
    reason = None
    for ln in lines:
        i = ln.find("Job aborted")
        if i >= 0:
            reason = ln[i:]
            break
    if reason is None:
        jvm = [m for m in map(_JVM_ERROR.match, lines) if m]
        reason = jvm[0].group(0).lstrip(": ") if jvm else (lines[0] if lines else "unknown Spark failure")
    if "Python worker exited unexpectedly" in reason:
        reason += " (the worker's own traceback, if it printed one, is in the executor's stderr)"
    return reason[:2000]


def is_recoverable(error: BaseException) -> bool:
    """Whether a restart may get past ``error``. False for a flowpoint error whose class is not
    ``recoverable`` (also when it is the explicit ``__cause__`` of the error raised) and for
    errors that are not ``Exception`` (KeyboardInterrupt, SystemExit); True for all else: user
    code, Spark, I/O (Flink restarts on those; the restart strategy's limits apply)."""
    if not isinstance(error, Exception):
        return False
    seen: set[int] = set()
    e: BaseException | None = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, FlowpointError) and not getattr(e, "recoverable", True):
            return False
        e = e.__cause__
    return True


def failure_identity(error: BaseException) -> tuple | None:
    """What makes two failures the same failure on the same record: for a user function's
    error, its operator and uid, the class and message of the user's exception and the record.
    None for other errors and for an error rebuilt from Spark's text (no details)."""
    if not isinstance(error, UserFunctionError) or error.exception is None:
        return None
    return (error.operator, error.uid, error.function, error.exception_type, error.exception, error.record)
