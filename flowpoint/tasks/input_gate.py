"""A continuous subtask's inputs: one bounded queue per input channel (docs/architecture.md, section 4b).

Receivers (a channel's reader thread, or an upstream subtask in the same process) ``put``
frames; a full queue blocks its receiver, so a slow operator slows its senders (backpressure)
with at most ``capacity`` frames per channel in memory. While a checkpoint's barriers are being
aligned, the channels that delivered the barrier are *blocked*: their frames stay queued (and
their senders stop once the queue is full) until the barrier has arrived on every channel.
Commands from the task (checkpoint notifications, finish, cancel) are never blocked.

Unaligned checkpoints (``execution.checkpointing.unaligned``) add *priority* barriers: a
barrier put with :meth:`priority` overtakes the frames queued on its channel (those frames, its
channel's in-flight data, are handed to the subtask with it), and once the subtask has taken
its snapshot (:meth:`record`), every frame queued or arriving on a channel whose barrier has not
arrived yet is recorded too, until that barrier arrives: together the checkpoint's input
channel state (docs/architecture.md, section 4b). Senders then hold *credits*: ``put_nowait``
refuses a frame beyond ``capacity``, and ``on_taken(channel)`` hands one back to the sender as
the subtask takes a frame off that channel.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Any

CONTROL = ("control",)


class GateClosed(Exception):  # noqa: N818 - a signal, not an error
    """The subtask ended; receivers stop."""


class InputGate:
    def __init__(self, channels: list[Any], capacity: int) -> None:
        self.capacity = max(1, capacity)
        self.queues: dict[Any, deque] = {c: deque() for c in channels}
        self.order = list(channels)
        self.blocked: set[Any] = set()
        self.control: deque = deque()
        self.cond = threading.Condition()
        self.closed = False
        self._next = 0
        self.backpressured_ns = 0  # time receivers waited for room
        # unaligned checkpoints: barriers that overtook their channel's queue, in arrival order:
        # (channel, barrier, the frames they overtook); the channels recording in-flight frames
        self.priority_barriers: deque = deque()
        self.recording: dict[Any, list] = {}
        self.barrier_arrived: set = set()  # channels whose barrier of the current checkpoint arrived
        self.recorded_done: dict[Any, list] = {}  # channels whose aligned barrier ended their recording
        self.queued_barriers: dict[Any, Any] = {}  # aligned barriers with a timeout, queued (not yet taken)
        self.on_taken: Any = None  # (channel) -> None: a frame left the channel's queue (a credit back)

    def put(self, channel: Any, frame: Any) -> int:
        """Queue ``frame``, waiting while the channel's queue is full; returns the ns waited."""
        q = self.queues[channel]
        waited = 0
        with self.cond:
            if len(q) >= self.capacity and not self.closed:
                t0 = time.perf_counter_ns()
                while len(q) >= self.capacity and not self.closed:
                    self.cond.wait(0.5)
                waited = time.perf_counter_ns() - t0
                self.backpressured_ns += waited
            if self.closed:
                raise GateClosed
            q.append(frame)
            self.cond.notify_all()
        return waited

    def put_nowait(self, channel: Any, frame: Any) -> bool:
        """Queue ``frame`` if the channel has room (the sender holds a credit); False otherwise."""
        q = self.queues[channel]
        with self.cond:
            if self.closed:
                raise GateClosed
            if len(q) >= self.capacity:
                return False
            q.append(frame)
            self._recorded(channel, frame)
            self.cond.notify_all()
        return True

    def put_credited(self, channel: Any, frame: Any) -> None:
        """Queue a frame a remote sender sent on a credit (it never exceeds the capacity)."""
        with self.cond:
            if self.closed:
                raise GateClosed
            self.queues[channel].append(frame)
            self._recorded(channel, frame)
            self.cond.notify_all()

    def _recorded(self, channel: Any, frame: Any) -> None:
        """A recording channel records ``frame``; its aligned barrier (after a switch to
        unaligned) ends what it records. A barrier that may time out is announced."""
        if frame[0] == "barrier" and getattr(frame[1], "timeout_at", 0) and not frame[1].unaligned:
            self.queued_barriers[channel] = frame[1]
        rec = self.recording.get(channel)
        if rec is None:
            return
        if frame[0] == "barrier":
            self.recorded_done[channel] = self.recording.pop(channel)
        else:
            rec.append(frame)

    def priority(self, channel: Any, barrier: Any) -> None:
        """An unaligned barrier: it overtakes the frames queued on ``channel``. Those frames (or,
        when the channel was recording for a snapshot already taken, what it recorded) are the
        channel's in-flight data of the checkpoint."""
        with self.cond:
            if self.closed:
                raise GateClosed
            rec = self.recording.pop(channel, None)
            overtaken = rec if rec is not None else list(self.queues[channel])
            self.barrier_arrived.add(channel)
            self.priority_barriers.append((channel, barrier, overtaken))
            self.cond.notify_all()

    def record(self) -> None:
        """The subtask took its unaligned snapshot: every channel whose barrier has not arrived
        records its queued frames and those still to come, until its barrier arrives."""
        with self.cond:
            for c, q in self.queues.items():
                if c not in self.barrier_arrived:
                    frames = list(q)
                    cut = next((i for i, f in enumerate(frames) if f[0] == "barrier"), None)
                    if cut is None:
                        self.recording[c] = frames
                    else:  # its aligned barrier is queued already: what is before it was in flight
                        self.recorded_done[c] = frames[:cut]

    def prepend_recorded(self, channel: Any, frame: Any) -> None:
        """The rest of a frame taken off ``channel`` before the snapshot but processed after it:
        in flight at the cut, ahead of what the channel recorded (or its barrier overtook)."""
        with self.cond:
            rec = self.recording.get(channel)
            if rec is not None:
                rec.insert(0, frame)
                return
            for c, _barrier, overtaken in self.priority_barriers:
                if c == channel:
                    overtaken.insert(0, frame)
                    return

    def arrived_already(self, channels: set) -> None:
        """Channels that delivered the barrier in line (before a switch to unaligned)."""
        with self.cond:
            self.barrier_arrived |= channels

    def take_recorded(self, channel: Any) -> list:
        """What ``channel`` recorded up to its aligned barrier."""
        with self.cond:
            done = self.recorded_done.pop(channel, None)
            return done if done is not None else self.recording.pop(channel, [])

    def stop_recording(self, channel: Any) -> list:
        """A channel ended without its barrier: what it recorded."""
        with self.cond:
            return self.recording.pop(channel, [])

    def checkpoint_done(self) -> None:
        with self.cond:
            self.barrier_arrived.clear()
            self.recording.clear()
            self.recorded_done.clear()
            self.queued_barriers.clear()

    def has_priority(self) -> bool:
        return bool(self.priority_barriers)

    def promote_overdue(self, now_ms: int) -> bool:
        """aligned-checkpoint-timeout: an aligned barrier queued here past its time overtakes
        the frames in front of it (they become its channel's in-flight data), as if its sender
        had sent it ahead; True when one did."""
        promoted = False
        with self.cond:
            if not self.queued_barriers:
                return False
            for channel, barrier in list(self.queued_barriers.items()):
                if now_ms < barrier.timeout_at:
                    continue
                del self.queued_barriers[channel]
                q = self.queues[channel]
                frames = list(q)
                at = next((i for i, f in enumerate(frames) if f[0] == "barrier" and f[1] is barrier), None)
                if at is None:
                    continue
                del q[at]
                if self.on_taken is not None:
                    self.on_taken(channel)  # the barrier's frame held a credit of its sender
                rec = self.recording.pop(channel, None)
                overtaken = rec if rec is not None else frames[:at]
                self.barrier_arrived.add(channel)
                self.priority_barriers.append((channel, barrier.as_unaligned(), overtaken))
                promoted = True
            if promoted:
                self.cond.notify_all()
        return promoted

    def take_priority(self) -> tuple | None:
        """The next unaligned barrier ``(channel, barrier, overtaken frames)``, if one arrived."""
        with self.cond:
            return self.priority_barriers.popleft() if self.priority_barriers else None

    def command(self, cmd: Any) -> None:
        with self.cond:
            self.control.append(cmd)
            self.cond.notify_all()

    def get(self, timeout: float) -> tuple[Any, Any] | None:
        """The next ``(channel, frame)`` of an unblocked channel (round robin), or
        ``(CONTROL, command)``; None after ``timeout`` seconds without either."""
        deadline = None
        with self.cond:
            while True:
                if self.control:
                    return CONTROL, self.control.popleft()
                if self.closed:  # the slot ended (a failure): the subtask's thread ends too, not left waiting here
                    return CONTROL, ("cancel",)
                if self.priority_barriers:
                    channel, barrier, overtaken = self.priority_barriers.popleft()
                    return channel, ("priority", barrier, overtaken)
                n = len(self.order)
                for i in range(n):
                    c = self.order[(self._next + i) % n]
                    q = self.queues[c]
                    if q and c not in self.blocked:
                        self._next = (self._next + i + 1) % n
                        frame = q.popleft()
                        if frame[0] == "barrier" and self.queued_barriers.get(c) is frame[1]:
                            del self.queued_barriers[c]
                        if len(q) == self.capacity - 1:
                            self.cond.notify_all()  # a receiver may wait for this room
                        if self.on_taken is not None:
                            self.on_taken(c)
                        return c, frame
                if deadline is None:
                    deadline = time.monotonic() + timeout
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

    def wait_room(self, channel: Any, timeout: float) -> None:
        """Wait up to ``timeout`` s for room on ``channel`` (a local sender out of credit)."""
        q = self.queues[channel]
        with self.cond:
            if len(q) >= self.capacity and not self.closed:
                self.cond.wait(timeout)

    def block(self, channel: Any) -> None:
        with self.cond:
            self.blocked.add(channel)

    def unblock_all(self) -> None:
        with self.cond:
            self.blocked.clear()
            self.cond.notify_all()

    def queued(self) -> int:
        with self.cond:
            return sum(len(q) for q in self.queues.values())

    def close(self) -> None:
        with self.cond:
            self.closed = True
            self.cond.notify_all()
