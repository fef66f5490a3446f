"""The continuous loop: the driver of a continuous run (docs/architecture.md, section 4b).

One Spark job in barrier execution mode runs the whole run (the adapter's continuous executor);
its slots connect to the driver's control channels (driver/slot_control.py). The loop never
touches records. It

* has the source tasks read (driver/source_assignment.py: planned reads at most two ahead per
  task, so a slow pipeline slows the sources; Kafka splits read open);
* injects barrier ``n`` at the sources, in the same ordered control stream as the reads, so the
  split positions of the cut are the ends of the reads assigned before it (or, for open splits,
  where their tasks were when the barrier reached them); up to
  ``max-concurrent-checkpoints`` checkpoint barriers fly at once, and savepoints are barriers too;
* commits segment ``n`` when every subtask acknowledged barrier ``n`` (the same commit as an
  epoch's: sinks' payloads, watermarks, operator state), then completes the checkpoint the
  barrier carried through the checkpoint coordinator (``_metadata`` as on the epoch runtime);
* passes at-least-once sinks' output on as it arrives (``print()`` within milliseconds);
* ends a bounded job with a final barrier (a final checkpoint when checkpointing is on, so
  two-phase-commit sinks commit their last data: FLIP-147), then finishes the slots.

A failure of any subtask, slot, channel or of the Spark job raises: the coordinator restarts
the run from the last completed checkpoint.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowpoint.clock import now_ms
from flowpoint.driver.epoch_loop import notify_checkpoint_complete
from flowpoint.driver.loop import CommittedLoop
from flowpoint.driver.slot_control import SlotControl, check_slots, control_host, slot_error
from flowpoint.driver.source_assignment import SourceAssignment
from flowpoint.driver.unit_commit import commit_unit
from flowpoint.errors import JobExecutionError
from flowpoint.partition.protocol import CheckpointTarget, ContinuousSpec, TaskAck, TaskSlice
from flowpoint.spark.tasks_common import spark_failure
from flowpoint.tasks.barrier_snapshot import Barrier

if TYPE_CHECKING:
    from flowpoint.driver.checkpoint_coordinator import CheckpointCoordinator
    from flowpoint.driver.committed import CommittedState
    from flowpoint.driver.loop import LoopServices
    from flowpoint.driver.savepoints import SavepointService
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")

_SEGMENT_MS_WITHOUT_CHECKPOINTS = 1000  # sinks commit this often when checkpointing is off
_END_GRACE_S = 3.0  # how long a failed or cancelled run's slots have to end their tasks before Spark cancels them
_REPORT_WAIT_S = 0.5  # how long a failed Spark job waits for the failing slot's own error (already on its way)


@dataclass
class _InFlight:
    barrier: Barrier
    planned: dict  # SplitKey -> (position, finished) of the planned reads before the barrier
    acks: dict[tuple[int, int], TaskAck] = field(default_factory=dict)
    savepoint: tuple | None = None  # (request, its directory's access, perf-counter start, trigger ms)
    trigger_ms: int = 0
    expired: bool = False  # its checkpoint outlived execution.checkpointing.timeout


class ContinuousLoop(CommittedLoop):
    def __init__(
        self, graph: JobGraph, config: Any, services: LoopServices, *, plans: dict, adapter: Any, job_name: str, settings: Any,
    ) -> None:
        super().__init__(graph, config, services)
        self.plans = plans
        self.adapter = adapter  # the session's SparkAdapter (flowpoint/spark/adapter.py)
        self.job_name = job_name
        self.settings = settings
        self.slots = max(s.parallelism for s in graph.stages)
        self.subtasks = [(s.id, p) for s in graph.stages for p in range(s.parallelism)]
        self.buffer_timeout_ms = int(config.get("execution.buffer-timeout"))
        self.poll_s = max(0.001, min(self.buffer_timeout_ms, 5) / 1000.0)
        self.finished = False
        # unaligned checkpoints: EXACTLY_ONCE checkpoints' barriers overtake in-flight frames
        self.unaligned = bool(services.checkpoints is not None and settings is not None and settings.unaligned and settings.mode == "EXACTLY_ONCE")

    # -- what the restart manager asks of a loop (start, run, reset, restore: CommittedLoop) ----

    def position(self) -> str:
        return f"the continuous run {self.restarts.restarts} (after segment {self.unit})"

    # -- one run -------------------------------------------------------------------------------

    def attempt(self) -> None:
        self.finished = False  # a restarted run has its work to do again
        check_slots(self.adapter, self.slots, self.job_name, int(self.config.get("slot.request.timeout")) / 1000.0, self._check_cancel)
        self.control = SlotControl(self.slots, control_host(self.adapter, self.config))
        st = self.state
        try:
            spec = ContinuousSpec(
                self.files.run_key, self.files.location(), self.control.address, self.control.secret, self.slots,
                self.unit, self.restarts.restarts,
                buffer_timeout_ms=self.buffer_timeout_ms,
                buffers_per_channel=int(self.config.get("taskmanager.network.memory.buffers-per-channel")),
                max_frame_items=int(self.config.get("execution.buffer-max-batches")),
                watermark_interval_ms=int(self.config.get("pipeline.auto-watermark-interval")),
                watermarks=dict(st.watermarks), splits=self.splits.counts(), generators=dict(st.generators), restored=st.restored_uids,
                aligned=not at_least_once(self.settings), unaligned=self.unaligned,
            )
            self.launcher.start(self.restarts.restarts, spec, self.plans, task_slices(self.graph, self.state))
            self.control.await_slots(self._check, self._handle)
            self._send_peers()
            self._loop()
        finally:
            if not self.finished:
                # the slots end their Spark tasks themselves: a cancelled barrier job kills its
                # Python workers, and a restart then waits seconds for new ones to import the job
                self.control.broadcast(("cancel",))
            # a run that ends before any slot connected (cancelled while Spark starts its
            # tasks): no slot heard the cancel, so none ends its task by itself; Spark cancels
            # them at once instead of after the grace
            told = bool(self.control.controls)
            self.control.close()
            if not self.launcher.wait(0) and not (told and self.launcher.wait(_END_GRACE_S)):
                self.launcher.cancel()
                self.launcher.wait(30)

    def _send_peers(self) -> None:
        """Once every slot has said where its data channels listen, tell every slot all the
        addresses (each connects its channels to the others)."""
        control = self.control
        while len(control.slot_addresses) < self.slots:
            self._check()
            control.drain(0.05, self._handle)
        peers = [control.slot_addresses[i] for i in range(self.slots)]
        for index in range(self.slots):
            control.send(index, ("peers", peers))

    def endpoints(self) -> list[str]:
        """The running run's listening endpoints: the driver's control channel, then the slots'."""
        control = getattr(self, "control", None)
        if control is None or control.closed:
            return []
        host, port = control.address
        return [f"{host}:{port}", *(control.slot_addresses[i] for i in sorted(control.slot_addresses))]

    def _check(self) -> None:
        """The run cannot go on: cancelled, or its Spark job ended."""
        self._check_cancel()
        if self.launcher.done.is_set() and not self.finished:
            raise self._spark_failure()

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise _Cancelled

    def _spark_failure(self) -> BaseException:
        reported = self.control.reported_failure(_REPORT_WAIT_S)
        if reported is not None:  # the slot's own error keeps its class and details
            return reported
        e = self.launcher.error
        if e is None:
            return JobExecutionError("the continuous run's Spark job ended before the job finished")
        return spark_failure(e, self.unit)

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        cp = self.checkpoints
        self.sources = SourceAssignment(self.graph, self.config, self.splits, self.control.send)
        self.inflight: dict[int, _InFlight] = {}
        self.segment = self.unit
        self.final_sent = False
        self.last_commit = time.monotonic()
        last_segment = self.last_injected = time.monotonic()
        interval_ms = self.settings.interval_ms if cp is not None else _SEGMENT_MS_WITHOUT_CHECKPOINTS
        while not self.finished:
            try:
                self._check_cancel()
            except _Cancelled:
                self.control.broadcast(("cancel",))
                raise
            self.control.drain(self.poll_s, self._handle)
            self._check()
            if cp is not None:
                self._poll_checkpoint(cp)
                expire_overdue(self.settings, cp, self.inflight, len(self.subtasks))
            if self.final_sent:
                continue
            if not self.inflight and self.savepoints.pending():
                self._savepoint_barrier()
                continue
            self.sources.assign()
            if not self.inflight and self.sources.all_read():
                self._inject(final=True)
                continue
            now = time.monotonic()
            if cp is not None:
                if checkpoint_due(self.settings, cp, self.inflight, self.last_injected, now):
                    self.last_injected = now
                    self._inject(final=False)
            elif not self.inflight and (now - last_segment) * 1000 >= interval_ms:
                last_segment = now
                self._inject(final=False)

    def _handle(self, index: int, msg: tuple) -> None:
        kind = msg[0]
        if kind == "read-done":
            self.sources.read_done(msg[1], msg[2])
        elif kind == "split-finished":  # an open split reached its end
            self.sources.split_finished(msg[1], msg[3], msg[4])
        elif kind == "ack":
            self._ack(msg[1])
        elif kind == "live":
            node = self.graph.nodes[msg[1]]
            node.t.sink.on_epoch_committed(self.segment + 1, [(msg[2], msg[3])], node.parallelism)
        elif kind == "address":  # where the slot's record channels listen
            self.control.slot_addresses[index] = msg[1]
        elif kind == "metrics":  # each subtask's MetricReport of the last second
            for report in msg[2]:
                self.state.live.add(report)
        elif kind == "failed":
            raise slot_error(msg)
        elif kind == "lost":
            if self.finished:
                return
            msg_ = f"slot {index} of the continuous run lost its control channel: {msg[1]}"
            raise JobExecutionError(msg_)

    # -- barriers and checkpoints ----------------------------------------------------------------

    def _inject(self, final: bool) -> None:
        cp = self.checkpoints
        self.segment += 1
        target = None
        shared: dict = {}
        if cp is not None:
            cid = cp.take_id()
            target = CheckpointTarget(cid, cp.store.job_dir_uri(), inline=self.settings.storage != "filesystem")
            shared = barrier_shared_files(self.graph, cp, cid)
        # unaligned: a checkpoint's barrier overtakes in-flight frames; the final one is aligned
        # (everything drains before a bounded job ends anyway)
        overtakes = self.unaligned and target is not None and not final
        timeout = int(self.settings.aligned_timeout_ms) if overtakes else 0
        # aligned-checkpoint-timeout > 0: the barrier starts aligned and turns unaligned wherever
        # it is still queued or aligning that long after its trigger
        barrier = Barrier(self.segment, target, shared, final, unaligned=overtakes and not timeout, timeout_at=now_ms() + timeout if timeout else 0)
        self.inflight[self.segment] = _InFlight(barrier, self.sources.planned(), trigger_ms=now_ms())
        self.control.broadcast(("barrier", barrier))
        if final:
            self.final_sent = True
            self.sources.end()

    def _savepoint_barrier(self) -> None:
        """The requested savepoints: one barrier whose keyed subtasks write their canonical
        parts into each savepoint's directory; a stop with ``--drain`` first sends every split's
        final watermark through the job, and a stop ends it after the barrier."""
        requests = self.savepoints.take_requests()
        stop = any(r.stop for r in requests)
        if any(r.stop and r.drain for r in requests):
            self.sources.final_watermarks()
        while self.unaligned and self.inflight:  # a savepoint is aligned: no unaligned barrier flies beside it
            self._check()
            self.control.drain(self.poll_s, self._handle)
        for i, r in enumerate(requests):
            try:
                access = self.savepoints.create(r.target)
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                r.future.set_exception(e)
                continue
            last = stop and i == len(requests) - 1
            self.segment += 1
            barrier = Barrier(self.segment, None, {}, last, savepoint=access.uri())
            flight = _InFlight(barrier, self.sources.planned())
            flight.savepoint = (r, access, time.perf_counter(), now_ms())
            self.inflight[self.segment] = flight
            self.control.broadcast(("barrier", barrier))
            if last:
                self.final_sent = True
                self.stopped = True
                self.sources.end()
            while self.segment in self.inflight:  # one savepoint at a time: each waits for its acks
                self._check()
                self.control.drain(self.poll_s, self._handle)

    def _ack(self, ack: TaskAck) -> None:
        if ack.report is not None:  # the counts up to the barrier, whether the segment commits or not
            self.state.live.add(ack.report)
            ack.report = None
        flight = self.inflight.get(ack.unit)
        if flight is None:
            return
        flight.acks[(ack.stage_id, ack.partition)] = ack
        # segments commit in order: a later barrier's parts may be written first
        while self.inflight:
            n = min(self.inflight)
            if len(self.inflight[n].acks) < len(self.subtasks):
                return
            self._commit(self.inflight.pop(n))

    def _commit(self, flight: _InFlight) -> None:
        """Every subtask acknowledged barrier ``n``: segment ``n`` is committed."""
        cp, st = self.checkpoints, self.state
        n = flight.barrier.n
        acks = list(flight.acks.values())
        positions = self.sources.cut(flight.planned, acks)
        live = {nd.id for nd in self.graph.sinks() if getattr(nd.t.sink, "continuous_live", False)}
        _, read = commit_unit(st, n, acks, f"segment {n}", live_sinks=live, stateless_chains=False, count_state_tasks=False)
        self.unit = n
        target = flight.barrier.target
        if target is not None and cp is not None and not flight.expired:
            if cp.pending is not None:  # the previous checkpoint's _metadata first (milliseconds)
                self._poll_checkpoint(cp, wait=True)
            stats = cp.trigger(
                n, st.stateful_tasks(), positions, st.sink_states(), st.records_read, st.event_time(),
                checkpoint_id=target.checkpoint_id, trigger_ms=flight.trigger_ms,
            )
            cp.attach_snapshots(stats.checkpoint_id, [a for a in acks if a.snapshot is not None or a.snapshot_error or a.channel_state is not None])
            if flight.barrier.final:
                self._poll_checkpoint(cp, wait=True)
        if flight.savepoint is not None:
            complete_savepoint(self.savepoints, flight.savepoint, acks, n, positions)
        now = time.monotonic()
        self.progress.committed(n, read, now - self.last_commit, st.records_read)
        self.last_commit = now
        if flight.barrier.final:
            self._finish()

    def _poll_checkpoint(self, cp: Any, wait: bool = False) -> None:
        meta = cp.poll(wait=wait)
        if meta is None:
            return
        self.restarts.checkpoint_completed()
        notify_checkpoint_complete(self.graph, meta)
        done, aborted = cp.take_notifications()
        if done or aborted:
            self.control.broadcast(("notify", done, aborted))

    def _finish(self) -> None:
        cp = self.checkpoints
        if cp is not None:
            done, aborted = cp.take_notifications()
            if done or aborted:
                self.control.broadcast(("notify", done, aborted))
        self.control.broadcast(("finish",))
        self.finished = True
        ended = self.launcher.wait(60)
        # each slot removed its partitions' cached state and working files before its Spark task
        # ended (Subtask.job_finished): with one run and no other Spark job over the job's state
        # (WorkingFiles.state_jobs), nothing is left on any executor for a removal job to find
        self.tasks_removed_local_state = ended and self.launcher.error is None and self.restarts.restarts == 0
        if self.launcher.error is not None:
            # the final barrier committed: the job's output and state are final. A restart now
            # would restore the last checkpoint and undo that commit (a lost executor's failure
            # often reaches Spark's scheduler only after the job's end), so it is reported, not
            # restarted
            error = self._spark_failure()
            log.warning("the continuous run's Spark job failed after the job finished (its output and state were committed): %s", error)


class _Cancelled(Exception):  # noqa: N818 - a signal
    pass


def at_least_once(settings: Any) -> bool:
    """Checkpointing mode AT_LEAST_ONCE with checkpoints on: barriers are not aligned."""
    return bool(settings is not None and settings.enabled and settings.mode == "AT_LEAST_ONCE")


def task_slices(graph: JobGraph, state: CommittedState) -> dict[tuple[int, int], TaskSlice]:
    """Each parallel instance's committed state to start the run from."""
    operator_state = state.operator_state
    out = {}
    for stage in graph.stages:
        uids = [graph.nodes[n].uid for n in stage.nodes]
        for p in range(stage.parallelism):
            ops = {f"{u}:{p}": operator_state[f"{u}:{p}"] for u in uids if f"{u}:{p}" in operator_state}
            uid = graph.nodes[stage.head].uid
            channel_state = state.channel_state.get(uid, ())
            seen = state.input_marks.get(f"{uid}:{p}", {}) if channel_state else {}
            out[(stage.id, p)] = TaskSlice(stage.id, p, state.chain((stage.id, p)), False, ops, channel_state=channel_state, input_marks=seen)
    return out


def checkpoint_due(settings: Any, cp: CheckpointCoordinator, inflight: dict[int, _InFlight], last_injected: float, now: float) -> bool:
    """Flink's rules: the interval since the last trigger, fewer than
    ``max-concurrent-checkpoints`` in flight, and ``min-pause`` after the last one ended (a
    pause means one at a time)."""
    flying = sum(1 for f in inflight.values() if f.barrier.target is not None and not f.expired) + (cp.pending is not None)
    if flying >= max(1, settings.max_concurrent) or (settings.min_pause_ms > 0 and flying):
        return False
    if cp.requested():  # flowpoint checkpoint: now, not after the interval
        return True
    return (now - last_injected) * 1000 >= settings.interval_ms and cp.ms_since_last_end() >= settings.min_pause_ms


def barrier_shared_files(graph: JobGraph, cp: CheckpointCoordinator, checkpoint_id: int) -> dict:
    """The shared files a checkpoint barrier carries: for each keyed subtask ``(uid,
    partition)``, the files of earlier checkpoints its incremental snapshot may refer to."""
    shared: dict = {}
    for stage in graph.stages:
        for n in stage.nodes:
            node = graph.nodes[n]
            if node.keyed:
                for p in range(stage.parallelism):
                    files = cp.shared_files(node.uid, p, checkpoint_id)
                    if files:
                        shared[(node.uid, p)] = files
    return shared


def expire_overdue(settings: Any, cp: Any, inflight: dict[int, _InFlight], subtasks: int) -> None:
    """Checkpoints whose barriers have not come back within ``execution.checkpointing.timeout``
    fail (a stalled sink, a task stuck in user code): new checkpoints may then be triggered,
    and too many failures in a row fail the run. The final barrier's checkpoint does not
    expire: two-phase-commit sinks commit their last data with it (FLIP-147), and no later
    barrier could carry another. ``subtasks``: how many acknowledge each barrier."""
    timeout = settings.timeout_ms
    now = now_ms()
    for flight in inflight.values():
        target = flight.barrier.target
        if target is None or flight.expired or flight.barrier.final or now - flight.trigger_ms <= timeout:
            continue
        flight.expired = True
        waiting = subtasks - len(flight.acks)
        cp.expire(target.checkpoint_id, (
            f"checkpoint {target.checkpoint_id} expired after {timeout} ms before completing "
            f"({waiting} of {subtasks} subtasks had not acknowledged its barrier)"
        ))


def complete_savepoint(savepoints: SavepointService, savepoint: tuple, acks: list[TaskAck], n: int, positions: Any) -> None:
    """A savepoint barrier's segment ``n`` committed: its ``_metadata`` is written from the
    parts the subtasks wrote (``savepoint``: the in-flight barrier's request, its directory's
    access, perf-counter start and trigger ms); the request's future gets the result."""
    request, access, t0, trigger_ms = savepoint
    try:
        parts = [p for a in acks for p in a.savepoint_parts]
        request.future.set_result(savepoints.complete(access, lambda: parts, n, positions, t0, trigger_ms, stop=request.stop))
    except BaseException as e:  # noqa: BLE001 - reported to the caller; the job goes on
        request.future.set_exception(e)
