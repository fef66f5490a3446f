"""The internal timer service of a keyed operator (Flink's ``InternalTimerService``).

A timer is ``(key, namespace, timestamp)`` in one of two time domains: event time (fires when
the watermark reaches it, ``timestamp <= watermark``) and processing time (``timestamp <= now``).
Timers are keyed state: each key's timers of a domain are one MapState entry ``{(timestamp,
namespace): True}``, so they are part of deltas, checkpoints and savepoints on every backend and
move with their key when the job is rescaled. The priority queue that finds the next timer is an
in-memory index over that state, rebuilt by :meth:`InternalTimerService.open` whenever the
operator is (re)created; every change goes through this class, so index and state stay equal.

Timers are deduplicated (registering one twice is one timer) and fire in timestamp order; ties
are broken by the canonical bytes of the key, then of the namespace, so the order does not depend
on the order of registration (a restored operator fires exactly as the original would have). A timer
registered while timers fire that is already due fires in the same advance, as in Flink.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import Any

from flowpoint.api.state import MapStateDescriptor
from flowpoint.api.time import TimeDomain
from flowpoint.state.key_identity import user_key
from flowpoint.state.keygroups import canonical_bytes

EVENT_TIMERS_STATE = "_timers-event"
PROCESSING_TIMERS_STATE = "_timers-processing"

OnTimer = Callable[[Any, Any, int], None]  # (key, namespace, timestamp)


class TimerQueue:
    """The timers of one time domain: MapState per key plus a heap over all keys.

    Deleting a timer removes it from state and from the live set; its heap entry stays behind
    and is skipped when it reaches the top (the heap is rebuilt when such entries outnumber the
    live timers)."""

    def __init__(self, backend: Any, state_name: str):
        self.backend = backend
        self.state_name = state_name
        self.state = backend.get_partitioned_state(MapStateDescriptor(state_name))
        self.live: set[tuple[Any, Any, int]] = set()  # (state key, namespace, timestamp)
        # (timestamp, key bytes, namespace bytes, namespace, key): distinct timers differ before
        # the objects, which are never compared
        self.heap: list[tuple[int, bytes, bytes, Any, Any]] = []
        self.stale = 0

    def rebuild(self) -> None:
        """Index the timers held in state (call when the operator opens)."""
        self.live.clear()
        self.heap = []
        self.stale = 0
        for key, entries in self.backend.iter_entries(self.state_name):
            kb = canonical_bytes(key)
            for ts, ns in entries:
                self.live.add((key, ns, ts))
                self.heap.append((ts, kb, canonical_bytes(ns), ns, key))
        heapq.heapify(self.heap)

    def add(self, key: Any, namespace: Any, timestamp: int) -> None:
        """Register a timer for ``key``, which must be the backend's current state key."""
        timer = (key, namespace, timestamp)
        if timer in self.live:
            return
        self.live.add(timer)
        self.state.put((timestamp, namespace), True)
        heapq.heappush(self.heap, (timestamp, canonical_bytes(key), canonical_bytes(namespace), namespace, key))

    def remove(self, key: Any, namespace: Any, timestamp: int) -> None:
        """Delete a timer of ``key`` (the backend's current state key); unknown timers are ignored."""
        timer = (key, namespace, timestamp)
        if timer not in self.live:
            return
        self.live.discard(timer)
        self.state.remove((timestamp, namespace))
        self.stale += 1
        if self.stale > 64 and self.stale > len(self.live):
            self._compact()

    def _compact(self) -> None:
        self.heap = [e for e in self.heap if (e[4], e[3], e[0]) in self.live]
        heapq.heapify(self.heap)
        self.stale = len(self.heap) - len(self.live)

    def pop_due(self, time: int) -> tuple[Any, Any, int] | None:
        """Remove and return the first timer ``(user's key, namespace, timestamp)`` with
        ``timestamp <= time`` (the backend's current key is then the timer's key), or None."""
        heap = self.heap
        while heap and heap[0][0] <= time:
            ts, _kb, _nb, ns, key = heapq.heappop(heap)
            timer = (key, ns, ts)
            if timer not in self.live:
                self.stale -= 1
                continue
            self.live.discard(timer)
            self.backend.current_key = key
            if not self.state.contains((ts, ns)):
                # state changed behind the index (a delta applied without reopening the
                # operator): never fire a timer twice; open() brings the index up to date
                continue
            self.state.remove((ts, ns))
            return (user_key(key), ns, ts)
        return None

    def next_timestamp(self) -> int | None:
        """The earliest live timer's timestamp (None if there is none)."""
        heap = self.heap
        while heap and (heap[0][4], heap[0][3], heap[0][0]) not in self.live:
            heapq.heappop(heap)
            self.stale -= 1
        return heap[0][0] if heap else None

    def __len__(self) -> int:
        return len(self.live)


class InternalTimerService:
    """Event- and processing-time timers of one keyed operator.

    ``clock`` is the operator: its ``watermark`` and ``processing_time`` are the current times.
    ``on_event_time(key, namespace, timestamp)`` and ``on_processing_time(...)`` are called for
    every timer that fires, with the backend's current key set to the timer's key. Register and
    delete timers only while the backend's current key is the timer's key."""

    def __init__(self, backend: Any, clock: Any, on_event_time: OnTimer, on_processing_time: OnTimer):
        self.backend = backend
        self.clock = clock
        self.on_event_time = on_event_time
        self.on_processing_time = on_processing_time
        self.event = TimerQueue(backend, EVENT_TIMERS_STATE)
        self.processing = TimerQueue(backend, PROCESSING_TIMERS_STATE)

    def open(self) -> None:
        """Rebuild the in-memory queues from state."""
        self.event.rebuild()
        self.processing.rebuild()

    # -- clocks ------------------------------------------------------------------------------

    def current_watermark(self) -> int:
        return self.clock.watermark

    def current_processing_time(self) -> int:
        return self.clock.processing_time

    # -- timers of the current key -------------------------------------------------------------

    def register_event_time_timer(self, namespace: Any, timestamp: int) -> None:
        self.event.add(self.backend.current_state_key, namespace, timestamp)

    def delete_event_time_timer(self, namespace: Any, timestamp: int) -> None:
        self.event.remove(self.backend.current_state_key, namespace, timestamp)

    def register_processing_time_timer(self, namespace: Any, timestamp: int) -> None:
        self.processing.add(self.backend.current_state_key, namespace, timestamp)

    def delete_processing_time_timer(self, namespace: Any, timestamp: int) -> None:
        self.processing.remove(self.backend.current_state_key, namespace, timestamp)

    # -- firing -------------------------------------------------------------------------------

    def advance_watermark(self, watermark: int) -> None:
        """Fire every event-time timer ``<= watermark`` (including those registered meanwhile)."""
        pop, fire = self.event.pop_due, self.on_event_time
        while (timer := pop(watermark)) is not None:
            fire(*timer)

    def advance_processing_time(self, now: int) -> None:
        """Fire every processing-time timer ``<= now``."""
        pop, fire = self.processing.pop_due, self.on_processing_time
        while (timer := pop(now)) is not None:
            fire(*timer)

    def num_event_time_timers(self) -> int:
        return len(self.event)

    def num_processing_time_timers(self) -> int:
        return len(self.processing)

    def queue(self, domain: TimeDomain) -> TimerQueue:
        return self.event if domain is TimeDomain.EVENT_TIME else self.processing
