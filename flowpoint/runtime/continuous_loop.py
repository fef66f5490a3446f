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
from flowpoint.runtime.restore import split_position
from flowpoint.state.working import CommittedChain
from flowpoint.tasks.channels import Channel, ChannelError, ChannelServer, new_secret
from flowpoint.tasks.protocol import CheckpointTarget, ContinuousSpec, TaskAck, TaskSlice
from flowpoint.tasks.subtask import Barrier

if TYPE_CHECKING:
    from flowpoint.runtime.coordinator import Coordinator

log = logging.getLogger("flowpoint")

_AHEAD = 2  # unfinished read assignments per source subtask
_CONNECT_TIMEOUT_S = 180.0
_SEGMENT_MS_WITHOUT_CHECKPOINTS = 1000  # sinks commit this often when checkpointing is off


@dataclass
class _InFlight:
    barrier: Barrier
    positions: list  # the split positions of the cut
    acks: dict[tuple[int, int], TaskAck] = field(default_factory=dict)


class ContinuousLoop:
    def __init__(self, co: Coordinator, plans: dict, executor: Any) -> None:
        self.co = co
        self.graph = co.graph
        self.plans = plans
        self.executor = executor
        self.slots = max(s.parallelism for s in self.graph.stages)
        self.subtasks = [(s.id, p) for s in self.graph.stages for p in range(s.parallelism)]
        self.source_parts = [(s.id, p) for s in self.graph.stages if s.is_source for p in range(s.parallelism)]
        config = co.config
        self.buffer_timeout_ms = int(config.get("execution.buffer-timeout"))
        self.poll_s = max(0.001, min(self.buffer_timeout_ms, 5) / 1000.0)
        self.metrics: dict[int, dict] = {}

    # -- one run -------------------------------------------------------------------------------

    def run(self) -> None:
        co = self.co
        self._check_slots()
        self.messages: queue.Queue = queue.Queue()
        self.controls: dict[int, Channel] = {}
        secret = new_secret()
        host = self._driver_host()
        server = ChannelServer(host, secret, self._control, name=f"flowpoint-driver-{co.job_id[:8]}")
        try:
            spec = ContinuousSpec(
                co.run_key, co.location(), server.address, secret, self.slots, co.epoch, co.restarts,
                buffer_timeout_ms=self.buffer_timeout_ms,
                buffers_per_channel=int(co.config.get("taskmanager.network.memory.buffers-per-channel")),
                max_frame_items=int(co.config.get("execution.buffer-max-batches")),
                watermark_interval_ms=int(co.config.get("pipeline.auto-watermark-interval")),
                watermarks=dict(co.watermarks), splits={n.uid: len(co.splits[n.id]) for n in self.graph.sources()},
                generators=dict(co.generators), restored=co._restored_uids,
            )
            self.executor.start(co.restarts, spec, self.plans, self._slices())
            self._await_slots()
            self._loop()
        finally:
            server.close()
            if not self.executor.wait(0):
                self.executor.cancel()
                self.executor.wait(30)
            self.executor.close()

    def _check_slots(self) -> None:
        from flowpoint.spark.continuous_executor import slots_available

        have = slots_available(self.co.spark)
        if have < self.slots:
            msg = (
                f"the continuous runtime runs every parallel instance at once: job {self.co.job_name!r} needs "
                f"{self.slots} task slots (its largest parallelism) but Spark offers {have} "
                f"(master {self.co.spark.sparkContext.master}); lower the parallelism, add cores or executors, "
                "or run it with execution.runtime: epoch. Dynamic allocation and speculation do not work with "
                "Spark's barrier stages either."
            )
            raise ConfigurationError(msg)
        conf = self.co.spark.sparkContext.getConf()
        for key in ("spark.dynamicAllocation.enabled", "spark.speculation"):
            if str(conf.get(key, "false")).lower() == "true":
                msg = f"the continuous runtime runs in a Spark barrier stage, which Spark refuses with {key}=true; turn it off or use execution.runtime: epoch"
                raise ConfigurationError(msg)

    def _driver_host(self) -> str:
        sc = self.co.spark.sparkContext
        master = sc.master or ""
        if master.startswith("local"):
            return "127.0.0.1"
        return sc.getConf().get("spark.driver.host", "127.0.0.1")

    def _slices(self) -> dict[tuple[int, int], TaskSlice]:
        co = self.co
        out = {}
        for stage in self.graph.stages:
            uids = [self.graph.nodes[n].uid for n in stage.nodes]
            for p in range(stage.parallelism):
                chain = co.chains.get((stage.id, p)) or CommittedChain()
                ops = {f"{u}:{p}": co.operator_state[f"{u}:{p}"] for u in uids if f"{u}:{p}" in co.operator_state}
                out[(stage.id, p)] = TaskSlice(stage.id, p, chain, False, ops)
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
        if self.co._cancel.is_set():
            raise _Cancelled

    def _spark_failure(self) -> BaseException:
        from flowpoint.spark.epoch_executor import spark_failure

        e = self.executor.error
        if e is None:
            return JobExecutionError("the continuous run's Spark job ended before the job finished")
        return spark_failure(e, self.co.epoch)

    # -- the loop ------------------------------------------------------------------------------

    def _loop(self) -> None:
        co = self.co
        cp = co.checkpoints
        self.outstanding = dict.fromkeys(self.source_parts, 0)
        self.assignments = 0
        self.inflight: dict[int, _InFlight] = {}
        self.segment = co.epoch
        self.ended_sources = False
        self.final_sent = False
        self.finished = False
        self.read_started = time.monotonic()
        self.next_discovery = 0.0
        self.discovery_s = int(co.config.get("execution.epoch.interval")) / 1000.0
        self.last_commit = time.monotonic()
        last_segment = time.monotonic()
        interval_ms = co.settings.interval_ms if cp is not None else _SEGMENT_MS_WITHOUT_CHECKPOINTS
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
            planned_any = self._assign_reads()
            if not self.inflight:
                if self._all_read():
                    self._inject(final=True)
                    continue
                due = cp.due() if cp is not None else (time.monotonic() - last_segment) * 1000 >= interval_ms
                if due:
                    last_segment = time.monotonic()
                    self._inject(final=False)
            del planned_any

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

    def _assign_reads(self) -> bool:
        co = self.co
        budget = int(co.config.get("execution.epoch.max-records"))
        elapsed = time.monotonic() - self.read_started
        planned_any = False
        now = time.monotonic()
        if now >= self.next_discovery:  # a directory listing or metadata call: not every few ms
            self.next_discovery = now + self.discovery_s
            co._discover()
        by_part: dict[tuple[int, int], list] = {}
        for states in co.splits.values():
            for st in states:
                if not st.finished:
                    by_part.setdefault((st.node.stage_id, st.index % st.node.parallelism), []).append(st)
        for key, states in by_part.items():
            if self.outstanding.get(key, 0) >= _AHEAD:
                continue
            per_split = max(1, budget // max(1, len(states)))
            reads = []
            for st in states:
                source = st.node.t.source
                plan = source.plan(st.split, st.position, per_split, elapsed)
                if plan.end == st.position and not plan.finished:
                    continue
                spec = source.read_spec(st.split, st.position, plan.end) if plan.end != st.position else None
                reads.append((st.index, st.split, spec, plan.finished))
                st.position, st.finished = plan.end, plan.finished
            if reads:
                self.assignments += 1
                self.outstanding[key] = self.outstanding.get(key, 0) + 1
                self._send(key[1], ("read", key[0], key[1], reads, self.assignments))
                planned_any = True
        return planned_any

    def _all_read(self) -> bool:
        co = self.co
        if not all(n.t.source.is_bounded() for n in self.graph.sources()):
            return False
        if any(not st.finished for states in co.splits.values() for st in states):
            return False
        return all(v == 0 for v in self.outstanding.values())

    def _positions(self) -> list:
        return [split_position(st.node, st.index, st.split, st.position, st.finished) for states in self.co.splits.values() for st in states]

    # -- barriers and checkpoints ----------------------------------------------------------------

    def _inject(self, final: bool) -> None:
        co, cp = self.co, self.co.checkpoints
        self.segment += 1
        target = None
        shared: dict = {}
        if cp is not None:
            target = CheckpointTarget(cp.next_id, cp.store.job_dir_uri(), inline=co.settings.storage != "filesystem")
            for stage in self.graph.stages:
                for n in stage.nodes:
                    node = self.graph.nodes[n]
                    if node.keyed:
                        for p in range(stage.parallelism):
                            files = cp.shared_files(node.uid, p)
                            if files:
                                shared[(node.uid, p)] = files
        barrier = Barrier(self.segment, target, shared, final)
        self.inflight[self.segment] = _InFlight(barrier, self._positions())
        self._broadcast(("barrier", barrier))
        if final:
            self.final_sent = True
            for stage_id, p in self.source_parts:
                self._send(p, ("end", stage_id, p))

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
        co, cp = self.co, self.co.checkpoints
        n = flight.barrier.n
        acks = sorted(flight.acks.values(), key=lambda a: (a.stage_id, a.partition))
        for ack in acks:
            if ack.error is not None:
                raise ack.error
        for ack in acks:
            if ack.state is not None:
                key = (ack.stage_id, ack.partition)
                co.chains[key] = (co.chains.get(key) or CommittedChain()).committed(ack.epoch, ack.token, ack.state)
            co.watermarks.update(ack.watermarks)
            co.generators.update(ack.generators)
            co.operator_state.update(ack.operator_state)
            for uid, states in ack.declared.items():
                co.declared_states.setdefault(uid, {}).update(states)
            for name, k in ack.metrics.items():
                co.metrics[name] = co.metrics.get(name, 0) + k
        source_stages = {nd.stage_id for nd in self.graph.sources()}
        records = sum(a.records_in for a in acks if a.stage_id in source_stages)
        co.records_read += records
        for node in self.graph.sinks():
            if getattr(node.t.sink, "continuous_live", False):
                continue
            payloads = sorted((a.partition, a.sink_payloads[node.id]) for a in acks if a.stage_id == node.stage_id and node.id in a.sink_payloads)
            node.t.sink.on_epoch_committed(n, payloads, node.parallelism)
        co.epoch = n
        co._checkpointed_epoch = n
        target = flight.barrier.target
        if target is not None and cp is not None:
            sources = flight.positions
            sinks = {nd.uid: nd.t.sink.snapshot_driver_state() for nd in self.graph.sinks()}
            watermarks = {
                "channels": {c: [wm, idle] for c, (wm, idle) in co.watermarks.items()},
                "generators": dict(co.generators),
                "operator_state": dict(co.operator_state),
            }
            stateful = [(s.id, p) for s in self.graph.stages if any(self.graph.nodes[x].keyed for x in s.nodes) for p in range(s.parallelism)]
            stats = cp.trigger(n, stateful, sources, sinks, co.records_read, watermarks)
            if stats.checkpoint_id != target.checkpoint_id:
                msg = f"checkpoint id mismatch: barrier {n} wrote checkpoint {target.checkpoint_id}, the coordinator expected {stats.checkpoint_id}"
                raise JobExecutionError(msg)
            cp.attach_snapshots(target.checkpoint_id, [a for a in acks if a.snapshot is not None or a.snapshot_error])
            if flight.barrier.final:
                self._poll_checkpoint(cp, wait=True)
        now = time.monotonic()
        co._report(records, now - self.last_commit, None)
        self.last_commit = now
        if flight.barrier.final:
            self._finish()

    def _poll_checkpoint(self, cp: Any, wait: bool = False) -> None:
        meta = cp.poll(wait=wait)
        if meta is None:
            return
        co = self.co
        co.backoff.on_success(now_ms())
        for node in self.graph.sinks():
            node.t.sink.notify_checkpoint_complete(meta.checkpoint_id)
        co._notify_sources(meta)
        done, aborted = cp.take_notifications()
        if done or aborted:
            self._broadcast(("notify", done, aborted))

    def _finish(self) -> None:
        cp = self.co.checkpoints
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
