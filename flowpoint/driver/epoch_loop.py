"""The epoch loop: the epoch runtime's driver (docs/architecture.md, section 4).

For every epoch it plans how far each source split advances, runs the epoch on Spark, and
commits it: only when every task of the epoch succeeded do the new split positions, the tasks'
state files and the sinks' output become the base of the next epoch. Between epochs it
completes and triggers checkpoints and takes savepoints. It never touches records; the
services it drives (driver/splits.py, committed.py, savepoints.py, restarts.py,
checkpoint_coordinator.py) are those of every loop.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from flowpoint.clock import now_ms
from flowpoint.connectors.source import Source as SourceBase
from flowpoint.driver.loop import CommittedLoop
from flowpoint.driver.unit_commit import commit_unit
from flowpoint.errors import CheckpointError
from flowpoint.partition.protocol import TaskSlice, UnitSpec

if TYPE_CHECKING:
    from flowpoint.driver.loop import LoopServices
    from flowpoint.driver.restore import RestoredJob
    from flowpoint.graph.jobgraph import JobGraph, Node


class EpochLoop(CommittedLoop):
    def __init__(self, graph: JobGraph, config: Any, services: LoopServices) -> None:
        super().__init__(graph, config, services)
        self._checkpointed_epoch = 0
        self.time_driven = any(_time_driven(n) for n in graph.nodes.values())
        self._copies = LocalCopies()

    # -- what the restart manager asks of a loop (start, run: CommittedLoop) ---------------------

    def reset(self) -> None:
        super().reset()
        self._checkpointed_epoch = 0

    def restore(self, restore: RestoredJob | None) -> None:
        if restore is not None and restore.channel_state:
            msg = (
                f"checkpoint {restore.checkpoint_id} is unaligned: it holds records that were in flight between operators, "
                f"which only the continuous runtime replays. Restore it with execution.runtime: continuous (or auto), or "
                f"restore a savepoint (savepoints are always aligned)"
            )
            raise CheckpointError(msg)
        super().restore(restore)
        self._checkpointed_epoch = self.unit

    def position(self) -> str:
        return f"epoch {self.unit}"

    def attempt(self) -> None:
        idle_s = int(self.config.get("execution.epoch.interval")) / 1000.0
        # jobs with timers or watermarks run epochs without input too: processing time and idle
        # sources' watermarks advance, so windows and timers fire without new records
        idle_epoch_s = int(self.config.get("execution.epoch.idle-interval")) / 1000.0
        compaction_bytes = int(self.config.get("state.working.compaction-bytes"))
        read_started = time.monotonic()
        last_epoch_at = time.monotonic()
        while not self.cancel.is_set():
            self._checkpoint_if_due()
            if self.savepoints.pending() and self.savepoints.take(self._drain, lambda: self.unit):
                self.stopped = True
                return
            self.splits.discover()
            plan = self.splits.plan(self._budget(), time.monotonic() - read_started)
            last = self.splits.all_finished(plan.positions)
            idle_epoch_due = self.time_driven and time.monotonic() - last_epoch_at >= idle_epoch_s
            if plan.records == 0 and not last and not idle_epoch_due and not (self.checkpoints and self.checkpoints.sync_request()):
                self.cancel.wait(idle_s)
                continue
            newly_finished = any(fin and not self.splits.finished(key) for key, (_, fin) in plan.positions.items())
            if plan.records == 0 and last and self.unit > 0 and not newly_finished:
                break  # (a split that finishes only now still gets an epoch: it carries its final watermark)
            last_epoch_at = time.monotonic()
            self._run_epoch(plan.reads, plan.positions, last, compaction_bytes)
            if last:
                break

    def _budget(self) -> int:
        """Records an epoch reads at most, shared by its splits."""
        # BATCH: the whole input in one epoch (a keyed operator sorts each key's records by time)
        return 1 << 62 if self.graph.batch else int(self.config.get("execution.epoch.max-records"))

    def _drain(self) -> None:
        """stop --drain: one more epoch in which every source split sends a final +infinity
        watermark (no records), so every window and event-time timer fires."""
        self._run_epoch(self.splits.final_watermarks(), {}, last=True)

    def _run_epoch(self, reads: dict, new_positions: dict, last: bool, compaction_bytes: int | None = None) -> None:
        if compaction_bytes is None:
            compaction_bytes = int(self.config.get("state.working.compaction-bytes"))
        self.unit += 1
        cp = self.checkpoints
        done, aborted = cp.take_notifications() if cp else ((), ())
        target = cp.sync_request() if cp else None
        slices = self._slices(compaction_bytes)
        st = self.state
        spec = UnitSpec(
            self.files.run_key, self.unit, self.files.location(), last, done, aborted, target, now_ms(), dict(st.watermarks),
            self.splits.counts(), dict(st.generators), st.restored_uids,
        )
        t0 = time.monotonic()
        acks = self.launcher.run_epoch(spec, reads, slices)
        _, read = commit_unit(st, self.unit, acks, f"epoch {self.unit}", advance_sources=lambda: self.splits.advance(new_positions))
        self._copies.note(acks)
        # every epoch decides anew: after a last epoch (stop --drain) whose savepoint failed the
        # job goes on, and the epochs after it cache the state again
        self.tasks_removed_local_state = last and self.restarts.restarts == 0 and self._copies.all_removed(acks)
        if target is not None:
            cp.attach_snapshots(target.checkpoint_id, acks)
        # the records the sources read (the plan's count is an estimate for files)
        self.progress.committed(self.unit, read, time.monotonic() - t0, st.records_read)

    def _slices(self, compaction_bytes: int) -> dict[int, list[TaskSlice]]:
        """Each partition's own share of the epoch (see flowpoint/partition/protocol.py)."""
        cp = self.checkpoints
        operator_state = self.state.operator_state
        out: dict[int, list[TaskSlice]] = {}
        for stage in self.graph.stages:
            uids = [self.graph.nodes[n].uid for n in stage.nodes]
            keyed = [self.graph.nodes[n].uid for n in stage.nodes if self.graph.nodes[n].keyed]
            row = []
            for p in range(stage.parallelism):
                chain = self.state.chain((stage.id, p))
                ops = {f"{u}:{p}": operator_state[f"{u}:{p}"] for u in uids if f"{u}:{p}" in operator_state}
                shared: dict[str, str] = {}
                if cp is not None:
                    for u in keyed:
                        shared.update(cp.shared_files(u, p))
                compact = bool(keyed) and chain.wants_base(compaction_bytes)
                row.append(TaskSlice(stage.id, p, chain, compact, ops, shared))
            out[stage.id] = row
        return out

    def _checkpoint_if_due(self) -> None:
        cp = self.checkpoints
        if cp is None:
            return
        meta = cp.poll()
        if meta is not None:
            self.restarts.checkpoint_completed()
            notify_checkpoint_complete(self.graph, meta)
        if self.unit > self._checkpointed_epoch and cp.due():
            st = self.state
            cp.trigger(self.unit, st.stateful_tasks(), self.splits.positions(), st.sink_states(), st.records_read, st.event_time())
            self._checkpointed_epoch = self.unit


class LocalCopies:
    """Whether the tasks of a run's last epoch removed every executor-local copy of its state.

    A partition's state (a stateless one's opened operators) is cached in the Python worker
    that ran it, with its local working files on that host. While each partition stays in one
    worker (no task rebuilt its state after the partition's first epoch, no task ran twice) the
    last epoch's tasks, which discard what they hold (``TaskAck.discarded``), leave nothing
    behind; otherwise another worker or host may still hold a copy, and the driver runs its
    removal job."""

    def __init__(self) -> None:
        self._seen: set[tuple[int, int]] = set()
        self.scattered = False

    def note(self, acks: list) -> None:
        for ack in acks:
            key = (ack.stage_id, ack.partition)
            if ack.attempt > 0 or (ack.fresh_state and key in self._seen):
                self.scattered = True
            self._seen.add(key)

    def all_removed(self, last_acks: list) -> bool:
        return not self.scattered and bool(last_acks) and all(a.discarded for a in last_acks)


def notify_checkpoint_complete(graph: JobGraph, meta: Any) -> None:
    """A checkpoint completed: the sinks commit what it covers; sources that listen hear its cut."""
    for node in graph.sinks():
        node.t.sink.notify_checkpoint_complete(meta.checkpoint_id)
    for node in graph.sources():
        source = node.t.source
        if type(source).notify_checkpoint_complete is SourceBase.notify_checkpoint_complete:
            continue  # sources that do not listen cost nothing (no positions decoded)
        cut = [source.decode_position(sp.split_id, sp.position) for sp in meta.sources if sp.source_uid == node.uid]
        source.notify_checkpoint_complete(meta.checkpoint_id, cut)


def _time_driven(node: Node) -> bool:
    """Operators whose results depend on time passing, not only on records arriving."""
    if node.kind in ("window", "keyed_process", "timestamps"):
        return True
    strategy = node.t.options.get("watermark_strategy") if node.kind == "source" else None
    return strategy is not None and strategy.generates_watermarks
