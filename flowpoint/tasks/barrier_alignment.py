"""Barrier alignment of a continuous subtask with several input channels (docs/architecture.md,
section 4b, "Barriers" and "Unaligned checkpoints").

* aligned (EXACTLY_ONCE): a channel that delivered barrier ``n`` is blocked until barrier ``n``
  has arrived on every live channel; then the subtask snapshots and forwards it;
* not aligned (AT_LEAST_ONCE): no channel is blocked; the subtask snapshots once barrier ``n``
  has arrived on every live channel (savepoints stay aligned);
* unaligned checkpoints: the first priority barrier ``n`` makes the subtask snapshot at once;
  each channel then records its in-flight items until its own barrier ``n`` comes. An aligned
  barrier still aligning past its ``aligned-checkpoint-timeout`` turns unaligned here.
"""

from __future__ import annotations

from typing import Any

from flowpoint.clock import now_ms
from flowpoint.errors import FlowpointError
from flowpoint.tasks.barrier_snapshot import Barrier
from flowpoint.tasks.channel_state import data_items


class SubtaskFailed(FlowpointError):
    """A subtask of a continuous job failed."""


class BarrierAlignment:
    """Which barrier a subtask (``task``, a :class:`~flowpoint.tasks.subtask.Subtask`) aligns, and
    on which channels it arrived."""

    def __init__(self, task: Any) -> None:
        self.task = task
        self.aligning: Barrier | None = None
        self.arrived: set = set()
        # not aligned (AT_LEAST_ONCE): barrier n -> (the barrier, the channels it arrived on)
        self.unaligned: dict[int, tuple[Barrier, set]] = {}

    def arrive(self, channel: Any, barrier: Barrier, live: set) -> None:
        task = self.task
        if not task.spec.aligned and barrier.savepoint is None:
            # AT_LEAST_ONCE: the channel is not blocked; records after the barrier on it are
            # processed before the snapshot, and replayed after a restore from it (seed 002).
            # Savepoints stay aligned: a savepoint is exact whatever the mode
            self.unaligned.setdefault(barrier.n, (barrier, set()))[1].add(channel)
            self.complete_unaligned(live)
            return
        if task.pending_uc is not None and task.pending_uc.barrier.n == barrier.n:
            # the checkpoint went unaligned here (aligned-checkpoint-timeout): this channel
            # recorded its in-flight frames up to this barrier
            task._unaligned_input(channel, data_items(task.gate.take_recorded(channel)), live)
            return
        if self.aligning is None:
            self.aligning = barrier
            self.arrived = set()
        elif barrier.n != self.aligning.n:  # cannot happen: a blocked channel delivers nothing
            msg = f"barrier {barrier.n} arrived while barrier {self.aligning.n} is being aligned"
            raise SubtaskFailed(msg)
        self.arrived.add(channel)
        task.gate.block(channel)
        if self.arrived >= live:
            self.aligned()

    def priority(self, channel: Any, barrier: Barrier, overtaken: list, live: set) -> None:
        """An unaligned barrier overtook ``overtaken`` on ``channel``: the first of checkpoint
        ``n`` snapshots at once; each records its channel's in-flight items. The items of the
        frame being processed that come after the cut are in flight on their channel too."""
        task = self.task
        if task.pending_uc is None and self.aligning is not None and self.aligning.n == barrier.n:
            self.switch_to_unaligned(live)  # an upstream subtask's barrier timed out: it came ahead
        if task.pending_uc is None:
            task._unaligned_snapshot(barrier)
            if task.feeding is not None:
                c, items, done = task.feeding
                rest = items[done:]
                if rest:
                    if c == channel:
                        overtaken = [("data", rest), *overtaken]
                    else:
                        task.gate.prepend_recorded(c, ("data", rest))
        elif task.pending_uc.barrier.n != barrier.n:
            msg = f"unaligned barrier {barrier.n} arrived while checkpoint {task.pending_uc.barrier.n} records its channel state"
            raise SubtaskFailed(msg)
        task._unaligned_input(channel, data_items(overtaken), live)

    def complete_unaligned(self, live: set) -> None:
        """Snapshot at every unaligned barrier that has arrived on every live input, in order
        (each channel delivers barriers in order, so barrier n completes no later than n + 1)."""
        for n in sorted(self.unaligned):
            barrier, arrived = self.unaligned[n]
            if not arrived >= live:
                return
            del self.unaligned[n]
            self.task._barrier(barrier)

    def aligned(self) -> None:
        barrier = self.aligning
        self.aligning = None
        self.arrived = set()
        self.task.gate.unblock_all()
        self.task._barrier(barrier)

    def timed_out(self) -> bool:
        """The barrier being aligned (the caller checked there is one: the input loop asks at
        every item) is past its aligned-checkpoint-timeout."""
        return bool(self.aligning.timeout_at) and now_ms() >= self.aligning.timeout_at

    def switch_to_unaligned(self, live: set) -> None:
        """aligned-checkpoint-timeout: the barrier being aligned is older than the timeout (or
        an upstream subtask sent it ahead): snapshot now. The channels that delivered it had
        nothing in flight before it; the others record until theirs arrives."""
        task = self.task
        barrier, arrived = self.aligning, set(self.arrived)
        self.aligning, self.arrived = None, set()
        task.gate.arrived_already(arrived)
        task.gate.unblock_all()
        task._unaligned_snapshot(barrier)
        for c in arrived:
            task._unaligned_input(c, [], live)

    def ended(self, channel: Any, live: set) -> None:
        """Channel ``channel`` ended (it is no longer in ``live``): a barrier may now be complete."""
        task = self.task
        if task.pending_uc is not None and channel not in task.pending_uc.inputs:
            task._unaligned_input(channel, data_items(task.gate.stop_recording(channel)), live)
        if self.aligning is not None and self.arrived >= live:
            self.aligned()
        self.complete_unaligned(live)
