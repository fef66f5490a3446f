"""A continuous subtask's output (docs/architecture.md, section 4b, "Channels"): the records its
chain's exchange writers hold, sent as frames to the channels of each (edge, destination).

With aligned checkpoints a frame is sent at once (a full receiver blocks the send: backpressure).
With unaligned checkpoints each (edge, destination) has a queue of frames not sent yet, sent as
the receiver grants credits (tasks/credits.py); while a receiver has no room, an unaligned
barrier that reached the subtask is taken at once, and a barrier that waited past its
``aligned-checkpoint-timeout`` in these queues is sent ahead of the frames before it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from typing import Any

from flowpoint.clock import now_ms
from flowpoint.tasks.channel_state import data_items

Send = Callable[[int, int, list], None]  # (edge id, destination partition, items)


class OutputFrames:
    """The frames of one subtask (``task``, a :class:`~flowpoint.tasks.subtask.Subtask`)."""

    def __init__(self, task: Any, send: Send, output: Callable[[int, int], Any] | None, receivers: dict) -> None:
        self.task = task
        self.send = send
        # unaligned checkpoints: each (edge, destination)'s frames not sent yet (the sender
        # holds a credit per frame its receiver can queue), the output (tasks/credits.py) of
        # each, and the receiving stage of each edge
        self.output = output
        self.outq: dict[tuple[int, int], deque] = {}
        self.receivers = receivers  # edge id -> (receiving stage's head uid, its parallelism)
        self.promoted: list = []  # channel state entries of barriers sent ahead after their timeout
        self.unsent_since: float | None = None  # when the first record not flushed yet came
        self.in_barrier = False  # an aligned barrier (a savepoint, the final one) is not overtaken
        self.blocked_ns = 0  # time blocked on output since the last metric report

    def flush(self, writers: list, drain: bool = True) -> None:
        for _, w in writers:
            w.flush()  # every channel's current watermark to receivers that have not seen it
        for edge_id, w in writers:
            if not w.out:
                continue
            by_dest: dict[int, list] = {}
            for dest, item in w.out:
                by_dest.setdefault(dest, []).append(item)
            w.out = []
            for dest, items in by_dest.items():
                if self.output is not None:
                    self.outq.setdefault((edge_id, dest), deque()).append(("data", items))
                else:
                    self.blocked_ns += self.send(edge_id, dest, ("data", items))
        self.unsent_since = None
        if self.output is not None and drain:
            self.drain()

    def broadcast(self, writers: list, frame: tuple) -> None:
        for edge_id, w in writers:
            for dest in range(w.edge.parallelism):
                if self.output is not None:
                    self.outq.setdefault((edge_id, dest), deque()).append(frame)
                else:
                    self.send(edge_id, dest, frame)
        if self.output is not None:
            # a barrier that may go ahead after its timeout: the subtask goes on once it is out
            # (sent, or sent ahead); the frames it overtook follow as credits come
            self.drain(until_barrier_out=frame[0] == "barrier" and bool(frame[1].timeout_at))

    def unsent(self) -> bool:
        return any(self.outq.values())

    def drain(self, until_barrier_out: bool = False) -> None:
        """Send the queued frames as the receivers grant credits. While a receiver has no room,
        an unaligned barrier that reached this subtask is taken at once (it overtakes the
        queued frames); a source with a barrier among its commands stops waiting, so that it
        reaches the barrier (its reads before the barrier are bounded)."""
        task = self.task
        while True:
            waiting = None
            for key, q in self.outq.items():
                if not q:
                    continue
                out = self.output(*key)
                while q and out.try_send(q[0]):
                    q.popleft()
                if q and waiting is None:
                    waiting = out
            if waiting is None:
                done, task.deferred_done = task.deferred_done, []
                for msg in done:
                    task.report(msg)
                return
            if until_barrier_out and not any(f[0] == "barrier" for q in self.outq.values() for f in q):
                return
            if not self.in_barrier:
                gate = task.gate
                if gate is not None and gate.queued_barriers:
                    gate.promote_overdue(now_ms())
                if gate is not None and gate.has_priority():
                    taken = gate.take_priority()
                    if taken is not None:
                        task.alignment.priority(taken[0], taken[1], taken[2], task.live)
                        continue
                elif gate is None and task.barrier_queued():
                    return
            if self.promote_overdue():
                continue
            if task.cancelled():
                return  # the run ends: the loop sees the cancel next
            t0 = time.perf_counter_ns()
            waiting.wait(0.005)
            self.blocked_ns += time.perf_counter_ns() - t0

    def promote_overdue(self) -> bool:
        """aligned-checkpoint-timeout: an aligned barrier that waited in these queues past its
        time is sent ahead of the frames in front of it, which become the checkpoint's channel
        state (the subtask's barrier writes ``promoted``); True when one was."""
        now = now_ms()
        promoted = False
        for key, q in self.outq.items():
            for i, frame in enumerate(q):
                if frame[0] == "barrier" and not frame[1].unaligned and frame[1].timeout_at and now >= frame[1].timeout_at:
                    barrier = frame[1]
                    ahead = [q[j] for j in range(i)]
                    del q[i]
                    stage_uid, parallelism = self.receivers[key[0]]
                    self.promoted.append((stage_uid, parallelism, key[1], data_items(ahead)))
                    self.output(*key).send_priority(("barrier", barrier.as_unaligned()))
                    promoted = True
                    break
        return promoted

    def unsent_entries(self, writers: list) -> list:
        """Channel state entries of the frames not sent yet, queued or still in the writers: an
        unaligned barrier's output channel state."""
        outputs: dict[tuple[int, int], list] = {}
        for key, q in self.outq.items():
            if q:
                outputs[key] = data_items(q)
        for edge_id, w in writers:
            for dest, item in w.out:
                outputs.setdefault((edge_id, dest), []).append(item)
        entries = []
        for (edge_id, dest), items in outputs.items():
            stage_uid, parallelism = self.receivers[edge_id]
            entries.append((stage_uid, parallelism, dest, items))
        return entries

    def send_ahead(self, writers: list, barrier: Any) -> None:
        """An unaligned barrier, ahead of every frame on every output."""
        for edge_id, w in writers:
            for dest in range(w.edge.parallelism):
                self.output(edge_id, dest).send_priority(("barrier", barrier))
