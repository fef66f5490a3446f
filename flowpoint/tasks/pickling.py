"""Naming a record that cannot be pickled (executor side).

Records are pickled where they leave a task: into an exchange (a batch for the next operator,
``operators.ExchangeWriter``) and, for sinks that hand records to the driver (``CollectSink``),
in the task's acknowledgement. A record that cannot be pickled (a socket, a lock, a client)
would fail there with Python's bare "cannot pickle 'socket' object", or crash the Python worker
inside Spark's serializer: either looks like a transient failure and restarts without end.
These functions find the record, pickling one at a time (pickling has no side effects), and
return a :class:`~flowpoint.errors.SerializationError` naming the operator, its uid and the
record's type and repr. No restart can fix it, so the job fails once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowpoint.errors import SerializationError
from flowpoint.pickles import dumps

if TYPE_CHECKING:
    from flowpoint.tasks.plan import EdgeSpec, StagePlan

_ADVICE = (
    "Records must be picklable: keep sockets, connections, locks and clients in the function "
    "(create them in open()), not in records"
)


def pickle_error(value: Any) -> BaseException | None:
    """What pickling ``value`` raises, or None when it pickles."""
    try:
        dumps(value)
    except Exception as e:  # noqa: BLE001 - whatever pickling raises is the answer
        return e
    return None


def _culprit(records: Any) -> tuple[bool, Any]:
    """``(found, record)``: the first element of ``records`` (a list) that cannot be pickled."""
    if isinstance(records, (list, tuple)):
        for x in records:
            if pickle_error(x) is not None:
                return True, x
    return False, None


def _named(found: bool, record: Any) -> str:
    return f"a record of type {type(record).__qualname__}: {record!r:.200}" if found else "records"


def unpicklable_record(edge: EdgeSpec, data: Any, e: BaseException) -> SerializationError:
    """The error for a batch on ``edge`` that cannot be pickled: it names the operator that
    emitted it, the receiving one, and the first record that cannot be pickled."""
    found, record = _culprit(data)
    if found and edge.partitioning == "keyed" and isinstance(record, tuple) and len(record) == 2:
        record = record[1]  # a keyed exchange ships (key, value)
    up_uid = f" (uid {edge.upstream_uid!r})" if edge.upstream_uid else ""
    to_uid = f" (uid {edge.target_uid!r})" if edge.target_uid else ""
    msg = (
        f"operator {edge.upstream_name!r}{up_uid} emitted {_named(found, record)}, which cannot be pickled to "
        f"send to operator {edge.target_name!r}{to_uid}: {type(e).__name__}: {e}. {_ADVICE}"
    )
    return SerializationError(msg)


def unpicklable_sink_payload(plan: StagePlan, nid: int, payload: Any, error: BaseException | None = None) -> SerializationError | None:
    """The error naming the record a sink (operator ``nid`` of ``plan``) collected that cannot be
    pickled to reach the driver, or None when ``payload`` pickles. ``error``: pickling already
    failed with it (the payload is then not pickled again as a whole)."""
    error = error or pickle_error(payload)
    if error is None:
        return None
    spec = plan.ops[nid]
    found, record = _culprit(payload)
    if found and isinstance(record, tuple) and len(record) == 2 and isinstance(record[1], int):
        record = record[0]  # (value, timestamp)
    msg = (
        f"sink {spec.name!r} (uid {spec.uid!r}) received {_named(found, record)}, which cannot be pickled to "
        f"hand it to the driver: {type(error).__name__}: {error}. {_ADVICE}"
    )
    return SerializationError(msg)
