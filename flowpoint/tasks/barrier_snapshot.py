"""What a continuous subtask does at checkpoint barrier ``n`` (docs/architecture.md, section 4b): commit its keyed state in
place, take the checkpoint's synchronous part, collect what the driver commits (watermarks,
generator and operator state, sinks' payloads, open splits' positions), forward the barrier,
and acknowledge once the asynchronous part (the files) is written. A mixin of
:class:`~flowpoint.tasks.subtask.Subtask`.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import Any

from flowpoint.checkpoint.savepoint import write_parts
from flowpoint.clock import now_ms
from flowpoint.partition.backend import state_schemas
from flowpoint.partition.protocol import TaskAck
from flowpoint.state.keygroups import key_group_range_for_operator
from flowpoint.tasks.channel_state import write_channel_state
from flowpoint.tasks.unit_end import end_unit


class Barrier:
    """Checkpoint barrier ``n``: ends segment ``n``. ``target`` is None for a barrier that only
    ends a segment (sinks commit; no state is written); ``final`` is the last one; a barrier
    with a ``savepoint`` directory (its URI) has every keyed subtask write its canonical part there."""

    __slots__ = ("final", "n", "savepoint", "shared", "target", "timeout_at", "unaligned")

    def __init__(
        self, n: int, target: Any, shared: dict, final: bool, savepoint: str | None = None, unaligned: bool = False, timeout_at: int = 0,
    ) -> None:
        self.n = n
        self.target = target
        self.shared = shared  # (uid, partition) -> the shared files of the last completed checkpoint
        self.final = final
        self.savepoint = savepoint
        self.unaligned = unaligned  # overtakes in-flight frames; they become channel state
        # aligned-checkpoint-timeout: from this wall-clock time (epoch ms) on, an aligned barrier
        # still queued or aligning turns unaligned (0: never)
        self.timeout_at = timeout_at

    def as_unaligned(self) -> Barrier:
        return Barrier(self.n, self.target, self.shared, self.final, self.savepoint, True, self.timeout_at)

    def __reduce__(self) -> Any:
        return Barrier, (self.n, self.target, self.shared, self.final, self.savepoint, self.unaligned, self.timeout_at)


@dataclass
class _Unaligned:
    """An unaligned checkpoint a subtask has snapshotted and whose in-flight input it records."""

    barrier: Barrier
    ack: TaskAck
    write: Any
    outputs: list  # channel state entries of the frames this subtask had not sent
    inputs: dict  # channel -> the items in flight on it at the cut (known once its barrier came)


class BarrierSnapshot:
    rt: Any
    plan: Any

    def _barrier(self, barrier: Barrier) -> None:
        """Snapshot at barrier ``n``, forward it, acknowledge once the parts are written."""
        ack, write = self._snapshot(barrier)
        self.frames.in_barrier = True  # an aligned barrier (a savepoint, the final one) is not overtaken
        try:
            # a barrier that may go ahead after its timeout is queued behind the frames at once
            self._flush(drain=not barrier.timeout_at)
            self._broadcast(("barrier", barrier))
        finally:
            self.frames.in_barrier = False
        # aligned-checkpoint-timeout: the frames the barrier overtook once it timed out in this
        # subtask's queues are the checkpoint's channel state
        promoted, self.frames.promoted = self.frames.promoted, []
        if write is None and not promoted:
            self.report(("ack", ack))
            return
        self._upload(barrier, ack, write, promoted)

    def _upload(self, barrier: Barrier, ack: TaskAck, write: Any, entries: list) -> None:
        """The asynchronous part, in a thread: the state's files, then the channel state
        ``entries`` (none: no file); then the acknowledgement."""
        writer = f"{self.plan.head_uid}:{self.partition}"
        name = f"{self.plan.stage_id}-{self.partition}"
        options = self.spec.location.options

        def upload() -> None:
            try:
                if write is not None:
                    ack.snapshot = write()
                ack.channel_state = write_channel_state(entries, barrier.target, options, writer, name)
            except Exception as e:  # noqa: BLE001 - the subtask declines the checkpoint; the job goes on
                ack.snapshot_error = f"{type(e).__name__}: {e}"
            self.report(("ack", ack))

        threading.Thread(target=upload, name=f"flowpoint-checkpoint-{barrier.n}", daemon=True).start()

    def _snapshot(self, barrier: Barrier) -> tuple[TaskAck, Any]:
        """The synchronous part at barrier ``n``: the acknowledgement and the function that writes
        the state's files (None: nothing to write)."""
        rt, plan = self.rt, self.plan
        self.segment = barrier.n
        ack = TaskAck(plan.stage_id, self.partition, barrier.n, self.token, 0)
        ack.records_in, self.records_in = self.records_in, 0
        ack.positions = dict(self.positions)
        end_unit(rt, plan, self.ts.backends, ack, barrier.n, now_ms(), self.metric_report,
                 live_sinks=self.live_sinks, send_live=self._send_live)
        write = None
        if self.uids:
            self.backend.commit_in_place(self.ts, barrier.n)
            pickled: dict[str, bytes] = {}  # tables end_epoch pickled, which the snapshot reuses (HashMap)
            if barrier.final:  # the job's final state, where get_keyed_state and savepoints read it
                ack.state = self.backend.end_epoch(self.ts, replace(self.slice, compact=True), barrier.n, self.token, pickled)
            if barrier.savepoint is not None:
                ack.savepoint_parts = self._savepoint_parts(barrier.savepoint)
            if barrier.target is not None:
                shared: dict[str, str] = {}
                for uid in self.uids:
                    shared.update(barrier.shared.get((uid, self.partition), {}))
                write = self.backend.snapshot(self.ts, self.uids, self.partition, barrier.target, shared, pickled)
        return ack, write

    # -- unaligned checkpoints (tasks/channel_state.py) ----------------------------------------

    def _unaligned_snapshot(self, barrier: Barrier) -> None:
        """The first unaligned barrier ``n`` reached this subtask: snapshot now, record the frames
        not sent yet as output channel state, and send the barrier ahead of them."""
        ack, write = self._snapshot(barrier)
        if self.inputs is not None:  # what it had seen: the in-flight records came after these marks
            ack.input_marks = dict(self.inputs.channels)
        entries = self.frames.unsent_entries(self.rt.writers)
        self.frames.send_ahead(self.rt.writers, barrier.as_unaligned())
        self.pending_uc = _Unaligned(barrier, ack, write, entries, {})
        if self.gate is not None:
            self.gate.record()

    def _unaligned_input(self, channel: Any, items: list, live: set) -> None:
        """Channel ``channel`` delivered barrier ``n`` (or ended): its in-flight items are known."""
        uc = self.pending_uc
        uc.inputs[channel] = items
        if set(uc.inputs) >= live:
            self._unaligned_done()

    def _unaligned_done(self) -> None:
        """Barrier ``n`` arrived on every input: write the state and channel state, acknowledge."""
        uc, self.pending_uc = self.pending_uc, None
        if self.gate is not None:
            self.gate.checkpoint_done()
        entries = list(uc.outputs)
        mine = [item for items in uc.inputs.values() for item in items]
        if mine:
            entries.append((self.plan.head_uid, self.plan.parallelism, self.partition, mine))
        self._upload(uc.barrier, uc.ack, uc.write, entries)

    def _savepoint_parts(self, uri: str) -> list:
        """This partition's canonical savepoint parts of its committed state (the parts a Spark
        state job writes on the epoch runtime, flowpoint/spark/state_jobs.py)."""
        head = self.plan.ops[self.plan.head]
        kgr = key_group_range_for_operator(head.max_parallelism, self.plan.parallelism, self.partition)
        tables, kinds = self.backend.committed_tables(self.ts, self.uids)
        schemas = {uid: state_schemas(self.ts.backends[uid]) for uid in self.uids if uid in self.ts.backends}
        return write_parts(uri, self.spec.location.options, list(self.uids), self.partition, kgr.start, kgr.end, tables, kinds, schemas, head.max_parallelism)
