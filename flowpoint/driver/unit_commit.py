"""Committing a unit of work on the driver: an epoch of the epoch runtime, a segment of the
continuous one (docs/architecture.md, sections 4 and 4b), written once.

A unit commits only when every task acknowledged it: the acknowledgements are accepted (a task's
reported error is raised, a missing one fails the unit), the tasks' new state files become the
base of their next unit, the sources' positions move, and the watermarks, operator and generator
state, declared states and metrics of the acknowledgements become the job's; the sinks hear that
their output of the unit is final. What differs between the runtimes is passed in.
"""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowpoint.driver.committed import CommittedState, TaskKey
    from flowpoint.partition.protocol import TaskAck


def commit_unit(
    state: CommittedState, unit: int, acks: list[TaskAck], what: str, *,
    advance_sources: Callable[[], None] | None = None, live_sinks: Collection[int] = frozenset(),
    stateless_chains: bool = True, count_state_tasks: bool = True,
) -> tuple[dict[TaskKey, TaskAck], int]:
    """Commit unit ``unit`` (``what``: "epoch 7", "segment 7"): the accepted acknowledgements, one
    per task, and the records the sources read in it.

    ``advance_sources``: moves the sources' positions (the epoch runtime's planned reads; the
    continuous runtime cut them from the acknowledgements before). ``live_sinks``: sinks that
    passed their output on as it came (the continuous runtime's live sinks) and hear nothing.
    ``stateless_chains``: every task's chain records the unit, not only those that wrote state
    (a continuous subtask writes state files only at the job's end). ``count_state_tasks``: the
    ``stateTasks`` metrics (did a task find its state in its process: an epoch runtime figure)."""
    accepted = state.accept(acks, what)
    state.commit_chains(accepted if stateless_chains else {k: a for k, a in accepted.items() if a.state is not None})
    if advance_sources is not None:
        advance_sources()
    before = state.records_read
    state.commit(accepted, unit, skip_sinks=frozenset(live_sinks))
    if count_state_tasks:
        state.count_state_tasks(acks)
    return accepted, state.records_read - before
