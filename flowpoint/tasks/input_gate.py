"""A continuous subtask's inputs: one bounded queue per input channel (docs/architecture.md, section 4b).

Receivers (a channel's reader thread, or an upstream subtask in the same process) ``put``
frames; a full queue blocks its receiver, so a slow operator slows its senders (backpressure)
with at most ``capacity`` frames per channel in memory. While a checkpoint's barriers are being
aligned, the channels that delivered the barrier are *blocked*: their frames stay queued (and
their senders stop once the queue is full) until the barrier has arrived on every channel.
Commands from the task (checkpoint notifications, finish, cancel) are never blocked.
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
                n = len(self.order)
                for i in range(n):
                    c = self.order[(self._next + i) % n]
                    q = self.queues[c]
                    if q and c not in self.blocked:
                        self._next = (self._next + i + 1) % n
                        frame = q.popleft()
                        if len(q) == self.capacity - 1:
                            self.cond.notify_all()  # a receiver may wait for this room
                        return c, frame
                if deadline is None:
                    deadline = time.monotonic() + timeout
                left = deadline - time.monotonic()
                if left <= 0:
                    return None
                self.cond.wait(left)

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
