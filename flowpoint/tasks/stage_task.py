"""One stage, one partition, one epoch: the body of every Spark task flowpoint runs."""

from __future__ import annotations

import logging
import threading
import time
from typing import Any

import cloudpickle

from flowpoint.api.functions import unwrap
from flowpoint.api.operator_state import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorStateStore,
)
from flowpoint.api.time import MAX_WATERMARK, MIN_WATERMARK
from flowpoint.api.watermarks import Watermark
from flowpoint.connectors.source import SourceMetric, TimestampedBatch
from flowpoint.errors import FlowpointError, UserFunctionError
from flowpoint.metrics.group import MetricGroup
from flowpoint.metrics.report import ChainMeter
from flowpoint.metrics.system import add_process_figures
from flowpoint.partition.factory import partition_backend
from flowpoint.partition.protocol import OperatorPart, TaskAck, TaskSlice, UnitSpec
from flowpoint.partition.working import TaskState
from flowpoint.tasks.batches import KeyedBatch, decode, num_records
from flowpoint.tasks.context import TaskRuntimeContext
from flowpoint.tasks.event_time import InputWatermarks, TimestampsOp
from flowpoint.tasks.operators import EXCHANGE_WRITERS, ExchangeWriter, Operator, SinkOp, SourceOp
from flowpoint.tasks.plan import StagePlan
from flowpoint.tasks.registry import operator_class
from flowpoint.tasks.state_values import unpicklable_state_error
from flowpoint.tasks.unit_end import end_unit

log = logging.getLogger("flowpoint")

__all__ = ["ChainRuntime", "UnitSpec", "TaskAck", "TaskSlice", "run_stage_task"]


class ChainRuntime:
    """The opened operators of one stage partition, wired head -> chained -> exchanges."""

    def __init__(self, plan: StagePlan, partition: int, ts: TaskState, unit_spec: UnitSpec | None = None, operator_state: dict | None = None):
        self.plan = plan
        self.partition = partition
        self.ops: dict[int, Operator] = {}
        self.writers: list[tuple[int, ExchangeWriter]] = []
        self.contexts: list[TaskRuntimeContext] = []
        self.user_metrics: dict[str, dict[str, Any]] = {}  # operator uid -> the user's metrics
        for nid in plan.order:
            spec = plan.ops[nid]
            backend = ts.backend(spec.uid, spec.name) if spec.keyed else None
            if spec.kind == "source":
                strategy = spec.options.get("watermark_strategy")
                event_time = strategy is not None and (strategy.generates_watermarks or strategy.timestamp_assigner is not None)
                op: Operator = TimestampsOp(spec) if event_time else SourceOp(spec)
            elif spec.kind == "sink":
                ctx = self._context(spec, partition, None)
                op = SinkOp(spec, spec.sink.create_writer(partition, spec.parallelism, ctx))
                ctx.clock = op  # a writer may ask the epoch's processing time (file buckets)
            elif spec.keyed:
                op = operator_class(spec.kind, True, plan.batch)(spec, backend)
            else:
                op = operator_class(spec.kind, False)(spec)
            self.ops[nid] = op
        source_uid = plan.head_uid if plan.source_reader is not None else None
        for nid in plan.order:
            spec = plan.ops[nid]
            op = self.ops[nid]
            for c in spec.chained:
                child = self.ops[c]
                if child.spec.kind == "side_output":
                    op.side_outputs.setdefault(child.spec.options["tag_id"], []).append(child)
                else:
                    op.outputs.append(child)
            for e in spec.out_edges:
                w = EXCHANGE_WRITERS[e.partitioning](e, partition)
                w.channel_of = _channel_namer(source_uid, plan.head_uid, partition)
                self.writers.append((e.edge_id, w))
                op.outputs.append(w)
        self.timestamp_ops = [op for op in self.ops.values() if isinstance(op, TimestampsOp)]
        self.split_channel_ops: list[Operator] = []
        namer = _channel_namer(source_uid, plan.head_uid, partition)
        for op in self.timestamp_ops:
            op.channel_of = namer
        if source_uid is not None:  # the operators after the source keep watermarks per split
            self.split_channel_ops = [op for op in self.ops.values() if not isinstance(op, (TimestampsOp, SourceOp))]
            for op in self.split_channel_ops:
                op.channel_of = namer
        self.operator_states: dict[str, OperatorStateStore] = {}
        for nid in plan.order:  # initialize_state, then open, after wiring, in order, as Flink does
            op_spec = plan.ops[nid]
            self._initialize_state(op_spec, partition, ts, unit_spec, operator_state or {})
        for nid in plan.order:
            spec = plan.ops[nid]
            if spec.kind == "sink" or (spec.kind == "source" and spec.function is None):
                continue
            ctx = self._context(spec, partition, ts.backends.get(spec.uid) if spec.keyed else None)
            ctx.clock = self.ops[nid]
            self.ops[nid].open(ctx)
        self.meter = ChainMeter(self.ops, self.user_metrics)

    def _initialize_state(self, op_spec: Any, partition: int, ts: TaskState, spec: UnitSpec | None, operator_state: dict) -> None:
        """CheckpointedFunction.initialize_state with the instance's committed operator state."""
        fn = unwrap(op_spec.function) if op_spec.function is not None else None
        op = self.ops[op_spec.id]
        hook = getattr(op, "initialize_operator_state", None)  # operators with their own (broadcast state)
        if not isinstance(fn, CheckpointedFunction) and hook is None:
            return
        key = f"{op_spec.uid}:{partition}"
        saved = operator_state.get(key)
        store = OperatorStateStore(op_spec.name, saved)
        self.operator_states[key] = store
        restored = saved is not None or (spec is not None and op_spec.uid in spec.restored)
        if hook is not None:
            op._init_broadcast()
            hook(store, restored)
        if isinstance(fn, CheckpointedFunction):
            keyed = ts.backends.get(op_spec.uid) if op_spec.keyed else None
            fn.initialize_state(FunctionInitializationContext(store, restored, keyed))

    def snapshot_operator_state(self, epoch: int, now: int) -> dict[str, dict]:
        """CheckpointedFunction.snapshot_state at the end of an epoch: the state to commit."""
        out = {}
        for nid in self.plan.order:
            op_spec = self.plan.ops[nid]
            key = f"{op_spec.uid}:{self.partition}"
            store = self.operator_states.get(key)
            if store is None:
                continue
            fn = unwrap(op_spec.function)
            if isinstance(fn, CheckpointedFunction):
                fn.snapshot_state(FunctionSnapshotContext(epoch, now))
            state = store.snapshot()
            hook = getattr(self.ops[op_spec.id], "snapshot_operator_state", None)
            if hook is not None:
                state.update(hook())
            out[key] = state
        return out

    def _context(self, spec: Any, partition: int, backend: Any) -> TaskRuntimeContext:
        ctx = TaskRuntimeContext(spec.name, partition, spec.parallelism, spec.max_parallelism, self.plan.job_parameters, backend)
        ctx.metric_group = MetricGroup(self.user_metrics.setdefault(spec.uid, {}), owner=spec.name)
        self.contexts.append(ctx)
        return ctx

    def set_attempt(self, attempt: int) -> None:
        for ctx in self.contexts:
            ctx.attempt = attempt

    def notify_checkpoints(self, completed: tuple[int, ...], aborted: tuple[int, ...]) -> None:
        """Flink's CheckpointListener, on every function that has the methods."""
        if not completed and not aborted:
            return
        for op in self.ops.values():
            fn = unwrap(op.spec.function) if op.spec.function is not None else None
            for cid in completed:
                if hasattr(fn, "notify_checkpoint_complete"):
                    fn.notify_checkpoint_complete(cid)
            for cid in aborted:
                if hasattr(fn, "notify_checkpoint_aborted"):
                    fn.notify_checkpoint_aborted(cid)

    def begin_epoch(self, spec: UnitSpec, splits: list[int]) -> InputWatermarks | None:
        """Set the epoch's clocks; returns the head's input watermarks (None in a source stage,
        whose ``splits`` are the indexes this task reads)."""
        for _, w in self.writers:
            w.reset()
        for op in self.timestamp_ops:
            op.begin_epoch(self.partition, spec.generators)
        inputs = None
        if self.plan.source_reader is None:
            inputs = InputWatermarks(input_channels(self.plan, spec))
            start = inputs.watermark
        else:
            prefix = f"s:{self.plan.head_uid}:"
            marks = {prefix + str(i): spec.watermarks.get(prefix + str(i), (MIN_WATERMARK, False))[0] for i in splits}
            start = min(marks.values(), default=MIN_WATERMARK)
            for op in self.split_channel_ops:
                op.channel_marks = dict(marks)
        for op in self.ops.values():
            if start > op.watermark and not isinstance(op, (TimestampsOp, SourceOp)):
                op.watermark = start  # the epoch that reached it fired what it had to
        if inputs is not None:
            self._announce_watermarks()
        for op in self.ops.values():
            op.advance_processing_time(spec.processing_time)
        return inputs

    def _announce_watermarks(self) -> None:
        """Each exchange writer holds the watermark of the operator feeding it, which it sends
        on (before its next record, at the unit's end). A restored task needs this: a checkpoint
        restores each receiver's channel from a task to the lowest mark of the sending stage
        (``restored_watermarks``: the partitions may have changed), which may be below what this
        task had sent, and a task that starts at its mark never moves it again (a finished
        source sends nothing more): windows behind it would never fire, silently."""
        origin = (self.plan.head, -1, 0)
        for op in self.ops.values():
            if op.watermark <= MIN_WATERMARK:
                continue
            for out in op.outputs:
                if isinstance(out, ExchangeWriter):
                    channel = out.channel_of(origin)
                    if op.watermark > out.marks.get(channel, (MIN_WATERMARK, False))[0]:
                        out.process_watermark(origin, op.watermark)

    def end_epoch(self, ack: TaskAck) -> None:
        for ctx in self.contexts:
            if ctx.ttl_states:
                ctx.cleanup_expired_state()  # before the epoch's delta is taken
        if self.plan.source_reader is None:
            for op in self.timestamp_ops:
                op.end_split(())
        for op in self.timestamp_ops:
            ack.generators.update(op.snapshot_generators())
            ack.watermarks.update(op.marks())
        head = self.ops[self.plan.head]
        if isinstance(head, SourceOp):
            prefix = f"s:{self.plan.head_uid}:"
            ack.watermarks.update({prefix + str(i): (wm, False) for i, wm in head.split_watermarks.items()})
        for _, w in self.writers:
            w.flush()
            ack.watermarks.update(w.marks)
        for op in self.ops.values():
            if op.metrics:
                for name, n in op.metrics.items():
                    key = f"{op.spec.name}.{name}"
                    ack.metrics[key] = ack.metrics.get(key, 0) + n
                op.metrics = {}

    def end_split_read(self, end: tuple, finished: bool) -> None:
        """A source split's read ended at ``end`` (its last origin): periodic emit and idleness;
        a bounded split that finished sends +infinity."""
        for op in self.timestamp_ops:
            op.end_split(end)
        if finished:
            self.ops[self.plan.head].process_watermark(end, MAX_WATERMARK)

    def close(self) -> None:
        for op in self.ops.values():
            op.close()


def deliver_source_item(plan: StagePlan, head: Operator, origin: tuple, data: Any) -> int:
    """One item a source reader yielded (records, timestamped records, a watermark, a metric)
    to the chain's head; returns how many records it held."""
    if isinstance(data, TimestampedBatch):
        head.num_in += len(data.records)
        head.process(origin, data.records, data.timestamps)
        return len(data.records)
    if isinstance(data, Watermark):
        if not plan.batch or data.timestamp >= MAX_WATERMARK:  # BATCH: only the end of input
            head.process_watermark(origin, data.timestamp)
        return 0
    if isinstance(data, SourceMetric):
        head.count(data.name, data.n)
        return 0
    n = num_records(data)
    head.num_in += n
    head.process(origin, data)
    return n


def _channel_namer(source_uid: str | None, head_uid: str, partition: int) -> Any:
    """The watermark channel a record's origin belongs to (see ExchangeWriter)."""
    if source_uid is not None:
        prefix = f"s:{source_uid}:"
        return lambda origin: prefix + str(origin[1]) if len(origin) > 1 else f"t:{head_uid}:{partition}"
    name = f"t:{head_uid}:{partition}"
    return lambda origin: name


def input_channels(plan: StagePlan, spec: UnitSpec) -> dict[str, tuple[int, bool]]:
    """The head's input channels with their marks at the start of the epoch."""
    names: list[str] = []
    for e in plan.input_edges:
        if e.upstream_source_uid is not None:
            names += [f"s:{e.upstream_source_uid}:{i}" for i in range(spec.splits.get(e.upstream_source_uid, 0))]
        else:
            names += [f"t:{e.upstream_head_uid}:{p}" for p in range(e.upstream_parallelism)]
    return {c: spec.watermarks.get(c, (MIN_WATERMARK, False)) for c in names}


def keyed_uids(plan: StagePlan) -> list[str]:
    return [plan.ops[n].uid for n in plan.order if plan.ops[n].keyed]


def run_stage_task(plan: StagePlan, spec: UnitSpec, s: TaskSlice, attempt: int, token: str, inputs: Any) -> tuple[list, TaskAck]:
    """Run one epoch of a stage partition. Returns ``([(edge_id, dest, blob)], ack)``.

    Errors that a retry cannot fix come back in the ack: invalid keys, state misuse, missing
    state (the driver fails the job at once) and a user function's error (Spark does not retry
    it; the driver's restart strategy decides). Any other exception propagates and Spark retries.
    """
    started = time.perf_counter()
    partition = s.partition
    ack = TaskAck(plan.stage_id, partition, spec.unit, token, attempt)
    uids = keyed_uids(plan)
    backend = partition_backend(spec.location, plan.ops[plan.head].max_parallelism, stateful=bool(uids))
    ts: TaskState | None = None
    upload: _Upload | None = None
    try:
        backend.begin_task(s)
        ts, ack.fresh_state = backend.acquire(plan.stage_id, partition, s.chain, uids)
        ts.pending = (spec.unit, token)
        if uids and spec.checkpoint is not None:
            # the synchronous part of the checkpoint: the committed state this epoch starts from;
            # the asynchronous part (writing the parts) runs while the epoch's records are processed
            upload = _Upload(backend.snapshot(ts, uids, partition, spec.checkpoint, s.shared))
        if ts.operators is None:
            # a private copy of the functions: partitions sharing a worker never share fields
            ts.operators = ChainRuntime(cloudpickle.loads(cloudpickle.dumps(plan)), partition, ts, spec, s.operator_state)
        rt: ChainRuntime = ts.operators
        rt.set_attempt(attempt)
        rt.notify_checkpoints(spec.checkpoints_completed, spec.checkpoints_aborted)
        watermarks = rt.begin_epoch(spec, [item[0] for item in inputs] if plan.source_reader is not None else [])
        _process(plan, rt, inputs, watermarks, ack)

        def report() -> Any:
            out = rt.meter.report(plan.stage_id, partition, busy_ms=(time.perf_counter() - started) * 1000)
            add_process_figures(out, ts.backends)  # the worker's memory, RocksDB's figures: once per task
            return out

        end_unit(rt, plan, ts.backends, ack, spec.unit, spec.processing_time, report)
        if uids:
            ack.state = _end_keyed_state(plan, backend, ts, s, spec.unit, token)
        if upload is not None:
            try:
                ack.snapshot = upload.result()
            except Exception as e:  # noqa: BLE001 - the task declines the checkpoint; the epoch goes on
                ack.snapshot_error = f"{type(e).__name__}: {e}"
            upload = None
        outputs = [(edge_id, dest, payload) for edge_id, w in rt.writers for dest, payload in w.out]
        for _, w in rt.writers:
            w.out = []
        if spec.last:
            rt.close()
            ts.operators = None
    except FlowpointError as e:
        if getattr(e, "recoverable", True) and not isinstance(e, UserFunctionError):
            raise  # Spark retries the task
        # a retry would fail the same way (no restart can get past a non-recoverable error; a
        # user function fails again on the same record): the error goes to the driver in the
        # ack, whose restart strategy decides about a user function's error (docs/errors.md)
        if ts is not None:
            ts.operators = None
        ack.error = e
        return [], ack
    except BaseException:
        if ts is not None:
            ts.operators = None  # a retry re-opens the functions from scratch
        raise
    finally:
        if upload is not None:
            upload.abandon()
        if ts is not None:
            backend.release(ts)
    if spec.last:  # a stateless task's entry (its opened operators) goes too
        ack.discarded = _discard(backend, plan.stage_id, partition, spec.location.run_key)
    ack.seconds = time.perf_counter() - started
    return outputs, ack


def _discard(backend: Any, stage_id: int, partition: int, run_key: str) -> bool:
    """The job's last epoch succeeded here: the partition's cached state and this host's working
    files of it go (``PartitionBackend.discard``), so the driver need not run a Spark job to
    remove them. False (logged) when that failed: the driver then runs the removal job."""
    try:
        backend.discard(stage_id, partition)
    except Exception:  # noqa: BLE001 - the epoch's outcome stands; local files are a cache
        log.warning("stage %d partition %d of %s could not remove its working state", stage_id, partition, run_key, exc_info=True)
        return False
    return True


def _process(plan: StagePlan, rt: ChainRuntime, inputs: Any, watermarks: Any, ack: TaskAck) -> None:
    """The epoch's input through the chain: a source stage's split reads (each split's read
    ended, with whether the split finished), any other stage's input edges."""
    head = rt.ops[plan.head]
    if plan.source_reader is not None:
        reader = plan.source_reader
        for split_index, split, read_spec, finished in inputs:
            seq = 0
            if read_spec is not None:
                for seq, data in enumerate(reader.read(split, read_spec), 1):  # noqa: B007
                    ack.records_in += deliver_source_item(plan, head, (plan.head, split_index, seq), data)
            rt.end_split_read((plan.head, split_index, seq), finished)
    else:
        feed(plan, head, inputs, watermarks)
        ack.records_in = head.records_in
        head.records_in = 0


def _end_keyed_state(plan: StagePlan, backend: Any, ts: TaskState, s: TaskSlice, epoch: int, token: str) -> Any:
    """The epoch's keyed state written (a delta or a new base): its acknowledgement. A value that
    does not pickle fails naming the operator and state (SerializationError), not pickle's text."""
    try:
        return backend.end_epoch(ts, s, epoch, token)
    except Exception as e:
        unpicklable = None if isinstance(e, FlowpointError) else unpicklable_state_error(plan, ts)
        if unpicklable is None:
            raise
        raise unpicklable from e


class _Upload:
    """The asynchronous part of a task's checkpoint, in a thread of the task."""

    def __init__(self, write: Any) -> None:
        self._result: list[OperatorPart] | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, args=(write,), name="flowpoint-checkpoint-upload", daemon=True)
        self._thread.start()

    def _run(self, write: Any) -> None:
        try:
            self._result = write()
        except BaseException as e:  # noqa: BLE001 - re-raised in the task
            self._error = e

    def result(self) -> list[OperatorPart]:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._result or []

    def abandon(self) -> None:
        self._thread.join()


def feed(plan: StagePlan, head: Operator, inputs: Any, watermarks: InputWatermarks, ordered: bool = True) -> None:
    """Deliver exchange input to the head, watermarks in between: in (edge, origin) order (an
    epoch's input, whatever order Spark fetched it in), or as it arrived (``ordered=False``:
    the continuous runtime's frames, in channel order)."""
    received = sorted(inputs, key=lambda item: (item[0], item[1])) if ordered else inputs
    strip = {e.index for e in plan.input_edges if e.partitioning == "keyed"} if not plan.ops[plan.head].keyed else set()
    two_inputs = hasattr(head, "process_input")  # broadcast state: edge 0 broadcast, edge 1 main
    if plan.batch and plan.ops[plan.head].keyed and not two_inputs and not getattr(head, "order_free_columnar", False):
        received = _in_time_order(plan, received)
    for edge_index, origin, blob in received:
        if blob[0] == "wm":
            channel, wm, idle = blob[1]
            moved, status = watermarks.update(channel, wm, idle)
            if status is not None:
                head.process_watermark_status(origin, status)
            if moved is not None:
                head.process_watermark(origin, moved)
            continue
        data, ts = blob[1] if blob[0] == "decoded" else decode(blob)
        if two_inputs:
            if isinstance(data, KeyedBatch):
                options = plan.ops[plan.head].options
                types = options.get("input_types")  # connected streams, else broadcast's main input
                data = data.pairs(types[options["input_sides"][edge_index]] if types else options.get("main_type"))
            head.num_in += num_records(data)
            head.process_input(edge_index, origin, data, ts)
            continue
        if edge_index in strip:
            data = data.batch if isinstance(data, KeyedBatch) else [v for _, v in data]
        elif isinstance(data, KeyedBatch) and not getattr(head, "columnar_input", False):
            process_keyed = getattr(head, "process_keyed", None)
            if process_keyed is not None:  # keys and records side by side, no pairs built
                keys, rows = data.keys_and_row_iter(plan.ops[plan.head].input_type)
                n = len(data)
                head.num_in += n
                process_keyed(origin, keys, rows, ts, n)
                continue
            data = data.pairs(plan.ops[plan.head].input_type)
        head.num_in += num_records(data)
        head.process(origin, data, ts)


def _in_time_order(plan: StagePlan, received: list) -> list:
    """BATCH: a keyed operator sees its whole input in timestamp order (stable), as Flink's batch
    execution sorts keyed input by key and timestamp; the watermarks (the end of input) follow."""
    data: list = []
    stamps: list = []  # None for a record of an input without timestamps
    first = None
    marks = []
    for edge_index, origin, blob in received:
        if blob[0] == "wm":
            marks.append((edge_index, origin, blob))
            continue
        batch, ts = decode(blob)
        if isinstance(batch, KeyedBatch):
            batch = batch.pairs(plan.ops[plan.head].input_type)
        first = first or (edge_index, origin)
        data.extend(batch)
        stamps.extend(ts if ts is not None else [None] * len(batch))
    if first is None:
        return marks
    if None not in stamps:
        order = sorted(range(len(data)), key=stamps.__getitem__)
        data = [data[i] for i in order]
        stamps = [stamps[i] for i in order]
    elif all(t is None for t in stamps):
        stamps = None  # type: ignore[assignment]
    return [(*first, ("decoded", (data, stamps))), *marks]
