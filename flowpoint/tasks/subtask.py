"""One parallel instance of one stage on the continuous runtime (docs/architecture.md, section 4b).

A subtask is a thread of its slot (the Spark barrier task) that runs the stage's operator chain
(:class:`~flowpoint.tasks.stage_task.ChainRuntime`, the same operators as the epoch runtime)
for the whole run of the job:

* a *source* subtask reads what the driver assigns it (read specs of its splits, planned by
  the driver's split planner exactly as for an epoch, so a replay reads the same records) and
  receives checkpoint barriers from the driver between two assignments;
* any other subtask reads frames from its :class:`~flowpoint.tasks.input_gate.InputGate`; a
  barrier that arrived on one channel blocks that channel until it arrived on all of them
  (alignment), then the subtask snapshots and forwards it.

Output leaves through the chain's exchange writers; it is flushed to the channels when
``execution.buffer-timeout`` ms have passed since the first unsent record (0: after every
input), when it holds ``execution.buffer-max-batches`` batches, and before a
barrier. Processing time is the wall clock: timers fire at their time, and periodic watermarks
are generated every ``pipeline.auto-watermark-interval`` ms.

At barrier ``n`` (the end of segment ``n``) a subtask commits its keyed state in place, takes
the checkpoint's synchronous part, hands the asynchronous part (writing the files) to a
thread, and acknowledges with a :class:`~flowpoint.partition.protocol.TaskAck` once the files
are written: the same acknowledgement an epoch's task sends, so the driver completes a
checkpoint the same way on both runtimes.
"""

from __future__ import annotations

import contextlib
import logging
import queue
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import cloudpickle

from flowpoint.clock import now_ms
from flowpoint.errors import FlowpointError
from flowpoint.metrics.system import add_process_figures
from flowpoint.partition.factory import partition_backend
from flowpoint.partition.protocol import ContinuousSpec, TaskSlice, UnitSpec
from flowpoint.tasks.barrier_alignment import BarrierAlignment, SubtaskFailed
from flowpoint.tasks.barrier_snapshot import Barrier, BarrierSnapshot
from flowpoint.tasks.channel_state import restored_input
from flowpoint.tasks.input_gate import CONTROL, InputGate
from flowpoint.tasks.output_frames import OutputFrames, Send
from flowpoint.tasks.pickling import unpicklable_sink_payload
from flowpoint.tasks.plan import StagePlan
from flowpoint.tasks.source_reading import SourceReading
from flowpoint.tasks.stage_task import ChainRuntime, feed, keyed_uids

log = logging.getLogger("flowpoint")

__all__ = ["Send", "Subtask", "SubtaskFailed"]


class Subtask(SourceReading, BarrierSnapshot):
    def __init__(
        self, plan: StagePlan, s: TaskSlice, spec: ContinuousSpec, send: Send, report: Callable[[tuple], None], gate: InputGate | None,
        output: Callable[[int, int], Any] | None = None,
    ) -> None:
        self.plan = plan
        self.partition = s.partition
        self.slice = s
        self.spec = spec
        self.report = report  # a message to the driver
        self.gate = gate
        self.commands: queue.Queue = queue.Queue()  # a source subtask's assignments, barriers, commands
        self.token = f"c{spec.run_key}.{plan.stage_id}.{s.partition}"
        self.uids = keyed_uids(plan)
        self.backend = partition_backend(spec.location, plan.ops[plan.head].max_parallelism, stateful=bool(self.uids))
        self.ts: Any = None
        self.rt: ChainRuntime | None = None
        self.buffer_timeout = spec.buffer_timeout_ms / 1000.0
        self.watermark_interval = spec.watermark_interval_ms / 1000.0
        self.next_periodic = 0.0
        self.segment = spec.first_segment
        self.records_in = 0
        self.split_seq: dict[int, int] = {}
        self.open_reads: dict[int, tuple[Any, Any]] = {}  # split index -> (OpenRead, split)
        self.positions: dict[int, tuple[Any, bool]] = {}  # open splits: (position, finished) so far
        self.alignment = BarrierAlignment(self)
        self.ended: set = set()
        receivers = {e.edge_id: (e.target_uid, e.parallelism) for op in plan.ops.values() for e in op.out_edges}
        self.frames = OutputFrames(self, send, output, receivers)
        self.credited = output is not None  # unaligned checkpoints: frames wait for credits
        self.pending_uc: Any = None  # the unaligned checkpoint whose channel state is being recorded
        self.live: set = set()
        self.feeding: list | None = None  # [channel, items, items done] of the frame being fed
        self.deferred_done: list = []  # a source's read-done reports held until the read's output is sent
        self.inputs = None
        self.live_sinks = {nid for nid, op in plan.ops.items() if op.kind == "sink" and getattr(op.sink, "continuous_live", False)}
        self.done = False
        self.error: BaseException | None = None
        self.idle_ns = 0  # time waiting for input since the last metric report (blocked: self.frames)
        self.reported_at = time.perf_counter_ns()
        self.job_finished = False  # the driver said finish: the job's last state is committed
        self.thread = threading.Thread(target=self._main, name=f"flowpoint-subtask-{plan.stage_id}.{s.partition}", daemon=True)

    # -- life ----------------------------------------------------------------------------------

    def start(self) -> None:
        self.thread.start()

    def _main(self) -> None:
        try:
            self._open()
            if self.plan.source_reader is not None:
                self._source_loop()
            else:
                self._input_loop()
        except BaseException as e:  # noqa: BLE001 - reported to the driver and the slot
            self.error = e
            self.report(("failed", self.plan.stage_id, self.partition, _portable(e)))
        finally:
            self.done = True
            self._close_open_reads()
            if self.gate is not None:
                self.gate.close()
            if self.ts is not None:
                try:
                    self.backend.release(self.ts)
                    if self.job_finished:  # the driver then runs no Spark job to remove it
                        self.backend.discard(self.plan.stage_id, self.partition)
                except Exception:  # noqa: BLE001 - the job's outcome stands; its local files are a cache
                    log.warning("subtask %s.%d of %s could not release or remove its working state", self.plan.stage_id,
                                self.partition, self.backend.location.run_key, exc_info=True)

    def _open(self) -> None:
        s, spec = self.slice, self.spec
        self.ts, _ = self.backend.acquire(self.plan.stage_id, s.partition, s.chain, self.uids)
        plan = cloudpickle.loads(cloudpickle.dumps(self.plan))  # functions private to this subtask
        recovered, watermarks, catch_up = restored_input(self.plan, s, spec)
        unit_spec = UnitSpec(
            spec.run_key, self.segment, spec.location, processing_time=now_ms(), watermarks=watermarks,
            splits=dict(spec.splits), generators=dict(spec.generators), restored=spec.restored,
        )
        self.rt = ChainRuntime(plan, s.partition, self.ts, unit_spec, s.operator_state)
        self.rt.set_attempt(spec.attempt)  # as Flink's attempt number: the restarts so far
        for _, w in self.rt.writers:
            w.eager_marks = True
        splits = [i for i in range(spec.splits.get(self.plan.head_uid, 0)) if i % self.plan.parallelism == s.partition]
        self.inputs = self.rt.begin_epoch(unit_spec, splits)
        self.split_seq = dict.fromkeys(splits, 0)
        if recovered or catch_up:  # an unaligned checkpoint's in-flight records come first, in channel order
            marks = [(0, (), ("wm", (c, wm, idle))) for c, (wm, idle) in catch_up.items()]
            head = self.rt.ops[self.plan.head]
            feed(self.plan, head, recovered + marks, self.inputs, ordered=False)
            self.records_in += head.records_in
            head.records_in = 0
            self._after_input()

    # -- the loops -----------------------------------------------------------------------------

    def _wait(self) -> float:
        now = time.monotonic()
        waits = [0.05]
        if self.frames.unsent_since is not None:
            waits.append(self.frames.unsent_since + self.buffer_timeout - now)
        if self.watermark_interval > 0:
            waits.append(self.next_periodic - now)
        return max(0.0, min(waits))

    def _input_loop(self) -> None:
        gate = self.gate
        head = self.rt.ops[self.plan.head]
        live = self.live = set(gate.order)
        while True:
            t0 = time.perf_counter_ns()
            item = gate.get(self._wait())
            self.idle_ns += time.perf_counter_ns() - t0
            self._tick()
            if self.alignment.aligning is not None and self.alignment.timed_out():
                self.alignment.switch_to_unaligned(live)
            if gate.queued_barriers:
                gate.promote_overdue(now_ms())
            if self.credited and self.frames.unsent():
                self.frames.drain()  # frames an aligned barrier overtook after its timeout
            if item is None:
                continue
            channel, frame = item
            if channel == CONTROL:
                if self._command(frame):
                    return
                continue
            kind = frame[0]
            if kind == "data" and self.credited:
                self._feed_items(channel, frame[1], head)
            elif kind == "data":
                feed(self.plan, head, frame[1], self.inputs, ordered=False)
                self.records_in += head.records_in
                head.records_in = 0
                self._after_input()
            elif kind == "priority":
                self.alignment.priority(channel, frame[1], frame[2], live)
            elif kind == "barrier":
                self.alignment.arrive(channel, frame[1], live)
            elif kind == "end":
                self.ended.add(channel)
                live.discard(channel)
                self.alignment.ended(channel, live)
                if not live:
                    self._end_of_input()

    def _feed_items(self, channel: Any, items: list, head: Any) -> None:
        """Unaligned checkpoints: a frame's items one at a time, so that a barrier that arrives
        meanwhile is taken after the item being processed, not after the whole frame (the
        items left are in flight at the cut: :meth:`BarrierAlignment.priority`)."""
        self.feeding = feeding = [channel, items, 0]
        try:
            for i in range(len(items)):
                if i and self.gate.queued_barriers:
                    self.gate.promote_overdue(now_ms())
                if i and self.gate.has_priority():
                    taken = self.gate.take_priority()
                    if taken is not None:
                        self.alignment.priority(taken[0], taken[1], taken[2], self.live)
                feed(self.plan, head, items[i : i + 1], self.inputs, ordered=False)
                feeding[2] = i + 1
                self.records_in += head.records_in
                head.records_in = 0
                self._after_input()
        finally:
            self.feeding = None

    def _on_barrier(self, barrier: Barrier) -> None:
        """A source subtask's barrier from the driver (between its reads)."""
        if barrier.unaligned:
            self._unaligned_snapshot(barrier)
            self._unaligned_done()
        else:
            self._barrier(barrier)

    def _end_of_input(self) -> None:
        """Every input channel ended: tell the consumers; the subtask waits for finish."""
        self._flush()
        self._broadcast(("end",))

    def _command(self, cmd: tuple) -> bool:
        """A command from the driver; True when the subtask ends."""
        kind = cmd[0]
        if kind == "notify":
            self.rt.notify_checkpoints(cmd[1], cmd[2])
            return False
        if kind == "end":  # a source subtask: no more assignments, nothing more read
            self._close_open_reads()
            self._flush()
            self._broadcast(("end",))
            return False
        if kind == "finish":
            self.rt.close()
            self.job_finished = True
            return True
        if kind == "cancel":
            return True
        msg = f"unknown command {kind!r}"
        raise SubtaskFailed(msg)

    # -- time and output -------------------------------------------------------------------------

    def _tick(self) -> None:
        now = time.monotonic()
        ms = now_ms()
        for op in self.rt.ops.values():
            op.advance_processing_time(ms)
        if self.watermark_interval > 0 and now >= self.next_periodic:
            self.next_periodic = now + self.watermark_interval
            self._periodic_watermarks()
            self._flush()  # a watermark or idleness that moved without records goes out too
        self._after_input()
        if self.frames.unsent_since is not None and now - self.frames.unsent_since >= self.buffer_timeout:
            self._flush()

    def _periodic_watermarks(self) -> None:
        if self.plan.source_reader is not None:
            for i, seq in self.split_seq.items():
                for op in self.rt.timestamp_ops:
                    op.end_split((self.plan.head, i, seq))
        else:
            for op in self.rt.timestamp_ops:
                op.end_split(())

    def _after_input(self) -> None:
        pending = 0
        for _, w in self.rt.writers:
            pending += len(w.out)
        if self.live_sinks:
            self._send_live()
        if not pending:
            return
        if self.frames.unsent_since is None:
            self.frames.unsent_since = time.monotonic()
        if self.buffer_timeout <= 0 or pending >= self.spec.max_frame_items:
            self._flush()

    def _send_live(self) -> None:
        for nid in self.live_sinks:
            payload = self.rt.ops[nid].finish(self.segment)
            if payload is not None:
                try:
                    self.report(("live", nid, self.partition, payload))
                except Exception as e:
                    bad = None if isinstance(e, FlowpointError) else unpicklable_sink_payload(self.plan, nid, payload)
                    if bad is None:
                        raise
                    raise bad from e

    def _flush(self, drain: bool = True) -> None:
        self.frames.flush(self.rt.writers, drain)

    def _broadcast(self, frame: tuple) -> None:
        self.frames.broadcast(self.rt.writers, frame)

    def cancelled(self) -> bool:
        """The driver cancelled the run (or the slot closed) while this subtask waits to send."""
        if self.gate is not None:
            with self.gate.cond:
                return self.gate.closed or any(c[0] == "cancel" for c in self.gate.control)
        with self.commands.mutex:
            return any(c[0] == "cancel" for c in self.commands.queue)

    def barrier_queued(self) -> bool:
        with self.commands.mutex:
            # an unaligned barrier, or one that turns unaligned after its timeout: the source
            # must reach it while its earlier output waits
            return any(c[0] == "barrier" and (c[1].unaligned or c[1].timeout_at) for c in self.commands.queue)

    # -- metrics -------------------------------------------------------------------------------

    def metric_report(self) -> Any:
        """The chain's metrics since the last report (None before the chain opened); the slot
        asks every second, a barrier's acknowledgement carries the rest."""
        rt = self.rt
        if rt is None:
            return None
        now = time.perf_counter_ns()
        wall, self.reported_at = now - self.reported_at, now
        idle, self.idle_ns = self.idle_ns, 0
        blocked, self.frames.blocked_ns = self.frames.blocked_ns, 0
        busy = max(0, wall - idle - blocked)
        report = rt.meter.report(self.plan.stage_id, self.partition, busy / 1e6, blocked / 1e6, idle / 1e6)
        # the worker's memory and RocksDB's own figures: a few reads once a report, not per record
        return add_process_figures(report, self.ts.backends if self.ts is not None else None)

    def watermark(self) -> int | None:
        if self.inputs is not None:
            return self.inputs.watermark
        return None


def _portable(e: BaseException) -> BaseException:
    """The error as the driver can unpickle it (a user's exception class may not import there),
    with the task's traceback as text in ``trace``: the failure log has it, the terminal only
    the error's message (driver/failure_report.py)."""
    if getattr(e, "trace", None) is None:
        with contextlib.suppress(AttributeError, TypeError):
            e.trace = "".join(traceback.format_exception(type(e), e, e.__traceback__))  # type: ignore[attr-defined]
    try:
        cloudpickle.loads(cloudpickle.dumps(e))
        return e
    except Exception:  # noqa: BLE001
        return SubtaskFailed(f"{type(e).__name__}: {e}")
