"""The end of a unit of work in a task: what an epoch's task does when its input ends and what a
continuous subtask does at a barrier (docs/architecture.md, sections 4 and 4b), written once.

The acknowledgement gets the unit's event-time marks and metric report, the states the task's
operators declared, its operator state and each sink's payload for the unit, each checked to
pickle before the acknowledgement holds it (Spark would crash the worker pickling it otherwise).
How the keyed state ends the unit differs by runtime and stays with each: the epoch task writes
its working state's delta or base (``tasks/stage_task.py``), the continuous subtask commits in
place and snapshots for a checkpoint (``tasks/barrier_snapshot.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from flowpoint.partition.protocol import TaskAck
from flowpoint.state.compatibility import declared_states
from flowpoint.tasks.pickling import unpicklable_sink_payload
from flowpoint.tasks.state_values import unpicklable_operator_state_error


def end_unit(
    rt: Any, plan: Any, backends: dict, ack: TaskAck, unit: int, processing_time: int, report: Callable[[], Any],
    live_sinks: Collection[int] = (), send_live: Callable[[], None] | None = None,
) -> None:
    """End unit ``unit`` of the task's operator chain ``rt`` into ``ack``. ``report()`` makes the
    metric report (its counts up to here); a sink in ``live_sinks`` passed its output on as it
    came, so it has no payload: ``send_live()`` sends what it holds instead."""
    rt.end_epoch(ack)  # TTL cleanup, generator states, watermarks, metrics; flushes the marks
    ack.report = report()
    ack.declared = {uid: declared_states(b) for uid, b in backends.items()}
    if rt.operator_states:
        operator_state = rt.snapshot_operator_state(unit, processing_time)
        unpicklable = unpicklable_operator_state_error(plan, operator_state)
        if unpicklable is not None:
            raise unpicklable
        ack.operator_state = operator_state
    for nid, op in rt.ops.items():
        if nid in live_sinks:
            if send_live is not None:
                send_live()
            continue
        payload = op.finish(unit)
        if payload is not None:
            unpicklable = unpicklable_sink_payload(plan, nid, payload)
            if unpicklable is not None:
                raise unpicklable
            ack.sink_payloads[nid] = payload
