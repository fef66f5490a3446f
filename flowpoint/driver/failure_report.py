"""What a user sees of a failed job, and the log file with the rest (driver side).

A failed job raises one error, whose message names what failed (for a user function: the
operator, its uid, the function's file:line, the exception and the record). :func:`report`
writes the whole report to ``$FLOWPOINT_HOME/logs/<job id>.log`` (a file only its owner can
read: records are in it): the error, the user code's traceback, the task's whole traceback and
the driver's (for a failure that came through Spark, Spark's and Java's text too). It sets
``error.log_path`` and adds the user code's traceback and the log file's path to the error as
notes, so that ``python job.py`` shows them under the error (Python 3.11+); ``flowpoint run``
prints :func:`failure_lines`. The newest :data:`KEEP` logs are kept.
"""

from __future__ import annotations

import contextlib
import linecache
import logging
import os
import time
import traceback

from flowpoint import private_files
from flowpoint.errors import UserFunctionError
from flowpoint.home import home_dir

log = logging.getLogger("flowpoint")

KEEP = 100  # failure logs kept in the logs directory, the newest


def logs_dir() -> str:
    """``$FLOWPOINT_HOME/logs`` (``~/.flowpoint/logs``), created private to the user (0700); one
    open to others is refused (``flowpoint.home.home_dir``)."""
    return str(home_dir("logs", "the log directory"))


def user_traceback(error: BaseException) -> list[str]:
    """The user code's part of a user function's traceback, as Python prints a traceback (the
    frames outside flowpoint, innermost last, then the user's exception); [] for other errors."""
    if not isinstance(error, UserFunctionError) or error.exception is None:
        return []
    lines = ["Traceback of the user code (most recent call last):"]
    for path, line, function, source in error.frames:
        lines.append(f'  File "{path}", line {line}, in {function}')
        source = source or linecache.getline(path, line).strip()
        if source:
            lines.append(f"    {source}")
    lines.append(error.exception)
    return lines


def failure_lines(error: BaseException) -> list[str]:
    """What a terminal shows under the error's message: the user code's traceback and where
    the whole report is."""
    lines = user_traceback(error)
    path = getattr(error, "log_path", None)
    if path:
        lines.append(f"The full report (every traceback): {path}")
    return lines


def report(job_id: str, job_name: str, status: str, error: BaseException) -> str | None:
    """Write ``error``'s whole report to the job's failure log; returns its path (None when it
    could not be written: the error is shown all the same)."""
    if getattr(error, "log_path", None):
        return error.log_path  # type: ignore[attr-defined] - reported already
    try:
        path = os.path.join(logs_dir(), f"{job_id}.log")
        private_files.write_private(path, _text(job_id, job_name, status, error).encode("utf-8", "replace"))
        _prune(os.path.dirname(path))
    except Exception:  # noqa: BLE001 - the error itself still reaches the user
        log.debug("could not write the failure log of job %s", job_id, exc_info=True)
        return None
    with contextlib.suppress(AttributeError, TypeError):
        error.log_path = path  # type: ignore[attr-defined]
        add_note = getattr(error, "add_note", None)  # Python 3.11+
        if add_note is not None:
            for line in failure_lines(error):
                add_note(line)
    return path


def _text(job_id: str, job_name: str, status: str, error: BaseException) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S %z")
    parts = [
        f"flowpoint job {job_name!r} ({job_id}) {status} at {when}",
        f"{type(error).__module__}.{type(error).__qualname__}: {error}",
    ]
    user = user_traceback(error)
    if user:
        parts.append("\n".join(user))
    trace = getattr(error, "trace", None)
    if trace:
        parts.append("-- the task's traceback --\n" + trace.rstrip())
    driver = "".join(traceback.format_exception(type(error), error, error.__traceback__))
    parts.append("-- the driver's traceback (with Spark's text for a failure that came through Spark) --\n" + driver.rstrip())
    return "\n\n".join(parts) + "\n"


def _prune(directory: str) -> None:
    logs = [os.path.join(directory, n) for n in os.listdir(directory) if n.endswith(".log")]
    if len(logs) <= KEEP:
        return
    logs.sort(key=lambda p: os.stat(p).st_mtime)
    for path in logs[:-KEEP]:
        with contextlib.suppress(OSError):
            os.remove(path)
