"""A user function's exception as the error the driver shows (executor side).

:func:`user_function_error` turns an exception that user code raised while processing a record
(or a key, or a timer) into a :class:`~flowpoint.errors.UserFunctionError` that carries, as
data, what the user needs to see: the operator, its uid, the function, the record, and the user
code's part of the traceback (flowpoint's own frames left out), besides the whole traceback for
the log file. The task returns it in its acknowledgement instead of raising it
(``stage_task.run_stage_task``), so Spark does not retry the task: a retry would fail on the
same record the same way. The driver's restart strategy decides (docs/errors.md).

Functions of the job's script are pickled by value, and cloudpickle gives their code the file
``<dynamic-code>``: such frames get the file of the function the operator runs, whose
``name at file:line`` the driver stamped on it (``graph.transformation.remember_where``).
"""

from __future__ import annotations

import linecache
import os
import traceback
from typing import Any

from flowpoint.errors import UserFunctionError

_FLOWPOINT_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep  # the package's
_DYNAMIC = "<dynamic-code>"
RECORD_CHARS = 200  # of a record's repr in the error
# Python's data errors: what a record's content causes (restart-strategy.repeated-failure.fail-fast)
DATA_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError, ZeroDivisionError, UnicodeError)
NO_RECORD = object()  # the failure did not happen on one record (a timer, a window's contents)


def user_function_error(
    message: str, e: BaseException, *, operator: str, uid: str | None, function: str | None, record: Any = NO_RECORD,
) -> UserFunctionError:
    """``e``, raised by user code, as a UserFunctionError with ``message`` (which names the
    operator, uid, function and record) and the details the driver shows and logs."""
    file = _function_file(function)
    frames = tuple(_user_frames(e, file))
    trace = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    if file:
        trace = trace.replace(f'File "{_DYNAMIC}"', f'File "{file}"')
    kind = type(e)
    text = str(e)
    return UserFunctionError(
        message,
        operator=operator,
        uid=uid,
        function=function,
        record=None if record is NO_RECORD else f"{record!r:.{RECORD_CHARS}}",
        exception=f"{kind.__name__}: {text}" if text else kind.__name__,
        exception_type=kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}",
        data_error=isinstance(e, DATA_ERRORS),
        frames=frames,
        trace=trace,
    )


def _function_file(function: str | None) -> str | None:
    """The file of ``name at file:line`` (None when the description names no file)."""
    if not function or " at " not in function:
        return None
    file = function.rsplit(" at ", 1)[1].rsplit(":", 1)[0]
    return file or None


def _user_frames(e: BaseException, file: str | None) -> list[tuple[str, int, str, str]]:
    """The frames of ``e``'s traceback outside flowpoint: ``(file, line, function, source)``."""
    out = []
    for fs in traceback.extract_tb(e.__traceback__):
        path = fs.filename
        if path == _DYNAMIC and file:
            path = file
        if os.path.abspath(path).startswith(_FLOWPOINT_DIR):
            continue
        line = fs.lineno or 0
        source = (fs.line or linecache.getline(path, line)).strip()
        out.append((path, line, fs.name, source))
    return out
