"""``/jobs/:jid/exceptions`` in the shape of Flink's ``JobExceptionsInfoWithHistory``: the job's
failures, newest first, each with its exception's class, message and traceback, and the operator
whose function raised. ``location`` is the user function's file:line (Flink puts the task
manager's address there; flowpoint's failures are located in code). The ``flowpoint`` object of
an entry says whether the job restarted after it and ``repeatedOnSameRecord``, how many failures
in a row, this one included, were the same error on the same record (1: a new failure)."""

from __future__ import annotations

from typing import Any

from flowpoint.driver.history import KEEP


def _entry(r: Any) -> dict:
    return {
        "exceptionName": r.exception_name, "stacktrace": r.stacktrace, "timestamp": r.timestamp_ms,
        "taskName": r.operator, "location": r.location, "taskManagerId": None, "failureLabels": {},
        "concurrentExceptions": [],
        "flowpoint": {
            "message": r.message, "operator": r.operator, "uid": r.uid, "restarted": r.restarted,
            "repeatedOnSameRecord": r.repeat,
        },
    }


def job_exceptions(client: Any, max_exceptions: int | None = None) -> dict:
    records = list(reversed(client.get_exception_history()))
    limit = KEEP if max_exceptions is None else max(0, max_exceptions)
    shown = records[:limit]
    root = records[0] if records else None
    return {
        "root-exception": root.stacktrace if root else None,
        "timestamp": root.timestamp_ms if root else None,
        "all-exceptions": [],
        "truncated": False,
        "exceptionHistory": {"entries": [_entry(r) for r in shown], "truncated": len(records) > len(shown)},
    }
