"""The continuous loop: the driver of a continuous run (DESIGN 4b).

One Spark job in barrier execution mode runs the whole run (flowpoint/spark/continuous_executor.py);
its slots connect to the driver's control channel. The loop never touches records. It

* assigns reads to source subtasks (the split planner's read specs, at most ``_AHEAD``
  unfinished assignments per source subtask: a slow pipeline slows the planning, and with it
  the sources);
* injects barrier ``n`` at the sources, in the same ordered control stream as the reads, so the
  split positions of the cut are the ends of the reads assigned before it;
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
import queue
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowpoint.errors import ConfigurationError, JobExecutionError
from flowpoint.runtime.checkpointing import now_ms
from flowpoint.runtime.epoch_loop import notify_checkpoint_complete
from flowpoint.tasks.channels import Channel, ChannelError, ChannelServer, new_secret
from flowpoint.tasks.protocol import CheckpointTarget, ContinuousSpec, TaskAck, TaskSlice
from flowpoint.tasks.subtask import Barrier

if TYPE_CHECKING:
    import threading

    from flowpoint.graph.jobgraph import JobGraph
    from flowpoint.runtime.checkpointing import CheckpointCoordinator
    from flowpoint.runtime.committed import CommittedState
    from flowpoint.runtime.progress import Progress
    from flowpoint.runtime.restarts import RestartManager
    from flowpoint.runtime.restore import RestoredJob
    from flowpoint.runtime.savepoints import SavepointService
    from flowpoint.runtime.splits import SplitPlanner
    from flowpoint.runtime.working_files import WorkingFiles

log = logging.getLogger("flowpoint")

_AHEAD = 2  # unfinished read assignments per source subtask
_CONNECT_TIMEOUT_S = 180.0
_SLOTS_WAIT_S = 60.0  # on a cluster, how long a run waits for enough executors before it is refused
_SEGMENT_MS_WITHOUT_CHECKPOINTS = 1000  # sinks commit this often when checkpointing is off


@dataclass
class _InFlight:
    barrier: Barrier
    positions: list  # the split positions of the cut
    acks: dict[tuple[int, int], TaskAck] = field(default_factory=dict)
    savepoint: tuple | None = None  # (request, its directory's access, perf-counter start, trigger ms)


class ContinuousLoop:
    def __init__(
        self, graph: JobGraph, config: Any, *, state: CommittedState, splits: SplitPlanner, savepoints: SavepointService,
        restarts: RestartManager, checkpoints: CheckpointCoordinator | None, files: WorkingFiles, progress: Progress,
        executor: Any, cancel: threading.Event, plans: dict, spark: Any, job_name: str, settings: Any,
    ) -> None:
        self.graph = graph
        self.config = config
        self.state = state
        self.splits = splits
        self.savepoints = savepoints
        self.restarts = restarts
        self.checkpoints = checkpoints
        self.files = files
        self.progress = progress
        self.executor = executor  # runs one run on Spark (flowpoint/spark/continuous_executor.py)
        self.cancel = cancel
        self.plans = plans
        self.spark = spark
        self.job_name = job_name
        self.settings = settings
        self.epoch = 0  # the last committed segment (the work up to a barrier)
        self.stopped = False
        self.slots = max(s.parallelism for s in graph.stages)
        self.subtasks = [(s.id, p) for s in graph.stages for p in range(s.parallelism)]
        self.source_parts = [(s.id, p) for s in graph.stages if s.is_source for p in range(s.parallelism)]
        self.buffer_timeout_ms = int(config.get("execution.buffer-timeout"))
        self.poll_s = max(0.001, min(self.buffer_timeout_ms, 5) / 1000.0)
        self.metrics: dict[int, dict] = {}

    # -- what the restart manager asks of a loop -----------------------------------------------

    def start(self, restore: RestoredJob | None) -> None:
        self.splits.init()
        if restore is not None:
            self.restore(restore)

    def run(self) -> None:
        self.restarts.run(self)

    def reset(self) -> None:
        self.state.reset()
        self.epoch = 0
        self.splits.init()

    def restore(self, restore: RestoredJob | None) -> None:
        if restore is None:
            self.state.restore_sinks(None)
            return
        self.state.apply_restore(restore, self.restarts.allow_non_restored)
        self.epoch = restore.epoch
        self.splits.restore(restore.positions)
        self.state.restore_sinks(restore.sinks)

    def position(self) -> str:
        return f"the continuous run {self.restarts.restarts} (after segment {self.epoch})"

    # -- one run -------------------------------------------------------------------------------

    def attempt(self) -> None:
        self._check_slots()
        self.messages: queue.Queue = queue.Queue()
        self.controls: dict[int, Channel] = {}
        secret = new_secret()
        server = ChannelServer(self._driver_host(), secret, self._control, name="flowpoint-driver-control")
        st = self.state
        try:
            spec = ContinuousSpec(
                self.files.run_key, self.files.location(), server.address, secret, self.slots, self.epoch, self.restarts.restarts,
                buffer_timeout_ms=self.buffer_timeout_ms,
                buffers_per_channel=int(self.config.get("taskmanager.network.memory.buffers-per-channel")),
                max_frame_items=int(self.config.get("execution.buffer-max-batches")),
                watermark_interval_ms=int(self.config.get("pipeline.auto-watermark-interval")),
                watermarks=dict(st.watermarks), splits=self.splits.counts(), generators=dict(st.generators), restored=st.restored_uids,
            )
            self.executor.start(self.restarts.restarts, spec, self.plans, self._slices())
            self._await_slots()
            self._loop()
        finally:
            server.close()
            if not self.executor.wait(0):
                self.executor.cancel()
                self.executor.wait(30)

    def _check_slots(self) -> None:
        from flowpoint.spark.continuous_executor import slots_available

        have = slots_available(self.spark)
        master = self.spark.sparkContext.master or ""
        if have < self.slots and master != "local" and not master.startswith("local["):
            # a cluster: executors lost with the failed run may be registering again
            deadline = time.monotonic() + _SLOTS_WAIT_S
            while have < self.slots and time.monotonic() < deadline:
                self._check_cancel()
                time.sleep(0.5)
                have = slots_available(self.spark)
        if have < self.slots:
            msg = (
                f"the continuous runtime runs every parallel instance at once: job {self.job_name!r} needs "
                f"{self.slots} task slots (its largest parallelism) but Spark offers {have} "
                f"(master {self.spark.sparkContext.master}); lower the parallelism, add cores or executors, "
                "or run it with execution.runtime: epoch. Dynamic allocation and speculation do not work with "
                "Spark's barrier stages either."
            )
            raise ConfigurationError(msg)
        conf = self.spark.sparkContext.getConf()
        for key in ("spark.dynamicAllocation.enabled", "spark.speculation"):
            if str(conf.get(key, "false")).lower() == "true":
                msg = f"the continuous runtime runs in a Spark barrier stage, which Spark refuses with {key}=true; turn it off or use execution.runtime: epoch"
                raise ConfigurationError(msg)

    def _driver_host(self) -> str:
        sc = self.spark.sparkContext
        master = sc.master or ""
        if master.startswith("local"):
            return "127.0.0.1"
        return sc.getConf().get("spark.driver.host", "127.0.0.1")

    def _slices(self) -> dict[tuple[int, int], TaskSlice]:
        operator_state = self.state.operator_state
        out = {}
        for stage in self.graph.stages:
            uids = [self.graph.nodes[n].uid for n in stage.nodes]
            for p in range(stage.parallelism):
                ops = {f"{u}:{p}": operator_state[f"{u}:{p}"] for u in uids if f"{u}:{p}" in operator_state}
                out[(stage.id, p)] = TaskSlice(stage.id, p, self.state.chain((stage.id, p)), False, ops)
        return out

    def _control(self, hello: tuple, channel: Channel) -> None:
        """A slot's control channel: its messages go to the loop."""
        if hello[0] != "control" or len(hello) != 2 or not isinstance(hello[1], int) or not 0 <= hello[1] < self.slots or hello[1] in self.controls:
            channel.close()
            return
        index = hello[1]
        self.controls[index] = channel
        self.messages.put((index, ("connected",)))
        try:
            while True:
                self.messages.put((index, channel.recv()))
        except ChannelError as e:
            self.messages.put((index, ("lost", str(e))))

    def _await_slots(self) -> None:
        deadline = time.monotonic() + _CONNECT_TIMEOUT_S
        connected: set[int] = set()
        while len(connected) < self.slots:
            self._check_cancel()
            if self.executor.done.is_set():
                raise self._spark_failure()
            try:
                index, msg = self.messages.get(timeout=0.1)
            except queue.Empty:
                if time.monotonic() > deadline:
                    msg = f"only {len(connected)} of {self.slots} slots of the continuous run connected within {_CONNECT_TIMEOUT_S:.0f} s; Spark could not schedule them all at once"
                    raise JobExecutionError(msg) from None
                continue
            if msg[0] == "connected":
                connected.add(index)
            else:
                self._handle(index, msg)

    def _check_cancel(self) -> None:
        if self.cancel.is_set():
            raise _Cancelled

    def _spark_failure(self) -> BaseException:
        from flowpoint.spark.epoch_executor import spark_failure

        e = self.executor.error
        if e is None:
            return JobExecutionError("the continuous run's Spark job ended before the job finished")
        return spark_failure(e, self.epoch)

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        cp = self.checkpoints
        self.outstanding = dict.fromkeys(self.source_parts, 0)
        self.assignments = 0
        self.inflight: dict[int, _InFlight] = {}
        self.segment = self.epoch
        self.final_sent = False
        self.finished = False
        self.read_started = time.monotonic()
        self.next_discovery = 0.0
        self.discovery_s = int(self.config.get("execution.epoch.interval")) / 1000.0
        self.last_commit = time.monotonic()
        last_segment = time.monotonic()
        interval_ms = self.settings.interval_ms if cp is not None else _SEGMENT_MS_WITHOUT_CHECKPOINTS
        while not self.finished:
            try:
                self._check_cancel()
            except _Cancelled:
                self._broadcast(("cancel",))
                raise
            self._drain(self.poll_s)
            if self.executor.done.is_set() and not self.finished:
                raise self._spark_failure()
            if cp is not None:
                self._poll_checkpoint(cp)
            if self.final_sent:
                continue
            if not self.inflight and self.savepoints.pending():
                self._savepoint_barrier()
                continue
            self._assign_reads()
            if not self.inflight:
                if self._all_read():
                    self._inject(final=True)
                    continue
                due = cp.due() if cp is not None else (time.monotonic() - last_segment) * 1000 >= interval_ms
                if due:
                    last_segment = time.monotonic()
                    self._inject(final=False)

    def _drain(self, wait: float) -> None:
        try:
            index, msg = self.messages.get(timeout=wait)
        except queue.Empty:
            return
        self._handle(index, msg)
        while True:
            try:
                index, msg = self.messages.get_nowait()
            except queue.Empty:
                return
            self._handle(index, msg)

    def _handle(self, index: int, msg: tuple) -> None:
        kind = msg[0]
        if kind == "read-done":
            self.outstanding[(msg[1], msg[2])] -= 1
        elif kind == "ack":
            self._ack(msg[1])
        elif kind == "live":
            node = self.graph.nodes[msg[1]]
            node.t.sink.on_epoch_committed(self.segment + 1, [(msg[2], msg[3])], node.parallelism)
        elif kind == "metrics":
            self.metrics[index] = msg[2]
        elif kind == "failed":
            error = msg[3]
            raise error if isinstance(error, BaseException) else JobExecutionError(str(error))
        elif kind == "lost":
            if self.finished:
                return
            msg_ = f"slot {index} of the continuous run lost its control channel: {msg[1]}"
            raise JobExecutionError(msg_)

    def _send(self, index: int, cmd: tuple) -> None:
        channel = self.controls.get(index)
        if channel is None:
            msg = f"slot {index} of the continuous run is not connected"
            raise JobExecutionError(msg)
        channel.send(cmd)

    def _broadcast(self, cmd: tuple) -> None:
        for index in range(self.slots):
            try:
                self._send(index, cmd)
            except (ChannelError, JobExecutionError):
                if cmd[0] not in ("cancel",):
                    raise

    # -- sources -------------------------------------------------------------------------------

    def _assign_reads(self) -> None:
        budget = int(self.config.get("execution.epoch.max-records"))
        elapsed = time.monotonic() - self.read_started
        now = time.monotonic()
        if now >= self.next_discovery:  # a directory listing or metadata call: not every few ms
            self.next_discovery = now + self.discovery_s
            self.splits.discover()
        for node in self.graph.sources():
            for p in range(node.parallelism):
                key = (node.stage_id, p)
                if self.outstanding.get(key, 0) >= _AHEAD:
                    continue
                plan = self.splits.plan_partition(node, p, budget, elapsed)
                reads = [r for r in (plan.reads.get(node.stage_id) or [[]] * node.parallelism)[p] if r[2] is not None or r[3]]
                if not reads:
                    continue
                self.splits.advance(plan.positions)  # the cut of the next barrier is after these reads
                self.assignments += 1
                self.outstanding[key] = self.outstanding.get(key, 0) + 1
                self._send(p, ("read", key[0], p, reads, self.assignments))

    def _all_read(self) -> bool:
        return self.splits.all_finished() and all(v == 0 for v in self.outstanding.values())

    # -- barriers and checkpoints ----------------------------------------------------------------

    def _inject(self, final: bool) -> None:
        cp = self.checkpoints
        self.segment += 1
        target = None
        shared: dict = {}
        if cp is not None:
            target = CheckpointTarget(cp.next_id, cp.store.job_dir_uri(), inline=self.settings.storage != "filesystem")
            for stage in self.graph.stages:
                for n in stage.nodes:
                    node = self.graph.nodes[n]
                    if node.keyed:
                        for p in range(stage.parallelism):
                            files = cp.shared_files(node.uid, p)
                            if files:
                                shared[(node.uid, p)] = files
        barrier = Barrier(self.segment, target, shared, final)
        self.inflight[self.segment] = _InFlight(barrier, self.splits.positions())
        self._broadcast(("barrier", barrier))
        if final:
            self.final_sent = True
            for stage_id, p in self.source_parts:
                self._send(p, ("end", stage_id, p))

    def _savepoint_barrier(self) -> None:
        """The requested savepoints: one barrier whose keyed subtasks write their canonical
        parts into each savepoint's directory; a stop with ``--drain`` first sends every split's
        final watermark through the job, and a stop ends it after the barrier."""
        requests = self.savepoints.take_requests()
        stop = any(r.stop for r in requests)
        if any(r.stop and r.drain for r in requests):
            for stage_id, rows in self.splits.final_watermarks().items():
                for p, reads in enumerate(rows):
                    if reads:
                        self.assignments += 1
                        self.outstanding[(stage_id, p)] = self.outstanding.get((stage_id, p), 0) + 1
                        self._send(p, ("read", stage_id, p, reads, self.assignments))
        for i, r in enumerate(requests):
            try:
                access = self.savepoints.create(r.target)
            except BaseException as e:  # noqa: BLE001 - reported to the caller
                r.future.set_exception(e)
                continue
            last = stop and i == len(requests) - 1
            self.segment += 1
            barrier = Barrier(self.segment, None, {}, last, savepoint=access.uri())
            flight = _InFlight(barrier, self.splits.positions())
            flight.savepoint = (r, access, time.perf_counter(), now_ms())
            self.inflight[self.segment] = flight
            self._broadcast(("barrier", barrier))
            if last:
                self.final_sent = True
                self.stopped = True
                for stage_id, p in self.source_parts:
                    self._send(p, ("end", stage_id, p))
            while self.segment in self.inflight:  # one savepoint at a time: each waits for its acks
                self._check_cancel()
                self._drain(self.poll_s)
                if self.executor.done.is_set() and not self.finished:
                    raise self._spark_failure()

    def _ack(self, ack: TaskAck) -> None:
        flight = self.inflight.get(ack.epoch)
        if flight is None:
            return
        flight.acks[(ack.stage_id, ack.partition)] = ack
        if len(flight.acks) < len(self.subtasks):
            return
        del self.inflight[ack.epoch]
        self._commit(flight)

    def _commit(self, flight: _InFlight) -> None:
        """Every subtask acknowledged barrier ``n``: segment ``n`` is committed."""
        cp, st = self.checkpoints, self.state
        n = flight.barrier.n
        acks = list(flight.acks.values())
        accepted = st.accept(acks, f"segment {n}")
        st.commit_chains({k: a for k, a in accepted.items() if a.state is not None})
        before = st.records_read
        live = {nd.id for nd in self.graph.sinks() if getattr(nd.t.sink, "continuous_live", False)}
        st.commit(accepted, n, skip_sinks=live)
        self.epoch = n
        target = flight.barrier.target
        if target is not None and cp is not None:
            stats = cp.trigger(n, st.stateful_tasks(), flight.positions, st.sink_states(), st.records_read, st.event_time())
            if stats.checkpoint_id != target.checkpoint_id:
                msg = f"checkpoint id mismatch: barrier {n} wrote checkpoint {target.checkpoint_id}, the coordinator expected {stats.checkpoint_id}"
                raise JobExecutionError(msg)
            cp.attach_snapshots(target.checkpoint_id, [a for a in acks if a.snapshot is not None or a.snapshot_error])
            if flight.barrier.final:
                self._poll_checkpoint(cp, wait=True)
        if flight.savepoint is not None:
            request, access, t0, trigger_ms = flight.savepoint
            try:
                parts = [p for a in acks for p in a.savepoint_parts]
                request.future.set_result(self.savepoints.complete(access, lambda: parts, n, flight.positions, t0, trigger_ms))
            except BaseException as e:  # noqa: BLE001 - reported to the caller; the job goes on
                request.future.set_exception(e)
        now = time.monotonic()
        self.progress.committed(n, st.records_read - before, now - self.last_commit, st.records_read)
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
            self._broadcast(("notify", done, aborted))

    def _finish(self) -> None:
        cp = self.checkpoints
        if cp is not None:
            done, aborted = cp.take_notifications()
            if done or aborted:
                self._broadcast(("notify", done, aborted))
        self._broadcast(("finish",))
        self.finished = True
        self.executor.wait(60)
        if self.executor.error is not None:
            raise self._spark_failure()


class _Cancelled(Exception):  # noqa: N818 - a signal
    pass
