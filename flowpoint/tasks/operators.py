"""Operators as they run inside a task: each takes a batch and pushes results downstream.

Per-record user code runs in tight loops over a batch; everything else (routing, key groups,
serialization) is per batch.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import mmh3
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flowpoint.api.functions import OutputTag
from flowpoint.api.row import Row, get_field
from flowpoint.api.state import ValueStateDescriptor
from flowpoint.api.time import MIN_WATERMARK
from flowpoint.api.typed_values import converter
from flowpoint.errors import FlowpointError, InvalidKeyError, SerializationError
from flowpoint.graph.transformation import describe_function
from flowpoint.state.keygroups import canonical_bytes, key_groups_of_columns, key_groups_of_keys
from flowpoint.tasks.batches import KeyedBatch, as_rows, encode, num_records
from flowpoint.tasks.context import ProcessContext
from flowpoint.tasks.pickling import unpicklable_record
from flowpoint.tasks.user_errors import user_function_error

Emit = Callable[[tuple, Any], None]


def user_error(spec: Any, e: BaseException, record: Any, key: Any = None) -> FlowpointError:
    if isinstance(e, FlowpointError):
        return e
    fn = describe_function(spec.function) if spec.function is not None else spec.kind
    of_key = "" if key is None else f" of key {key!r:.100}"
    msg = (
        f"operator {spec.name!r} (uid {spec.uid!r}, function {fn}) raised {type(e).__name__}: {e} "
        f"while processing {record!r:.200}{of_key}"
    )
    return user_function_error(msg, e, operator=spec.name, uid=spec.uid, function=fn, record=record)


# operators whose user function declares its output type (map(f, output_type=...), ...)
CONVERTING_KINDS = frozenset({
    "map", "flat_map", "process", "keyed_map", "keyed_flat_map", "keyed_process", "window", "reduce",
    "broadcast_process", "keyed_broadcast_process", "co_map", "co_flat_map", "co_process", "keyed_co_process", "async_wait",
})


class Operator:
    """Base of every operator in a task.

    The stream an operator sees is a sequence of calls, in stream order:

    * ``process(origin, data, ts)``: a batch of records. ``data`` is a list (keyed operators:
      a list of ``(key, value)`` pairs) or a ``pyarrow.RecordBatch``; ``ts`` is ``None`` (the
      stream has no timestamps) or a list of event timestamps (int ms) parallel to ``data``.
    * ``process_watermark(origin, wm)``: the operator's input watermark advanced to ``wm``
      (``MAX_WATERMARK`` at the end of input). After an exchange it is already the minimum
      over the input channels; in a source stage each split is a channel of its own (the
      origin's split index names it, see ``channel_of``) whose watermarks travel separately
      to the exchange, so a split that moves to another task keeps its watermark.
    * ``process_watermark_status(origin, idle)``: every input channel went idle, or one came
      back (idle inputs do not hold the watermark back; docs/architecture.md, section 8).
    * ``advance_processing_time(now)``: once per epoch, before any input, with the epoch's
      processing time (epoch ms, fixed by the coordinator, so a retried task sees the same).

    ``outputs`` receive the main output, ``side_outputs[tag_id]`` a side output; each target
    has the same ``process``/``process_watermark`` methods. ``self.watermark`` and
    ``self.processing_time`` hold the operator's current clocks.
    """

    def __init__(self, spec: Any):
        self.spec = spec
        self.outputs: list[Any] = []
        self.side_outputs: dict[str, list[Any]] = {}
        self.records_in = 0
        self.watermark = MIN_WATERMARK
        self.processing_time = 0
        self.metrics: dict[str, int] = {}  # counts committed with the epoch (reset by end_epoch)
        self.totals: dict[str, int] = {}  # the same counts since the operator opened (metric reports)
        self.num_in = 0  # records in and out since the operator opened (metric reports)
        self.num_out = 0
        # in a source stage: origin -> watermark channel (one per split), and each channel's
        # watermark this epoch (set by the chain); elsewhere None: one channel
        self.channel_of: Any = None
        self.channel_marks: dict[str, int] = {}
        # a user function's output_type shapes its values as in PyFlink (Row, tuple, float32)
        self.convert = converter(getattr(spec, "output_type", None)) if getattr(spec, "kind", None) in CONVERTING_KINDS else None

    def emit(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        n = num_records(data)
        if n == 0:
            return
        self.num_out += n
        if self.convert is not None and type(data) is list:
            try:
                data = list(map(self.convert, data))
            except (TypeError, ValueError) as e:
                msg = (f"operator {self.spec.name!r} (uid {self.spec.uid!r}) emitted a value its output_type "
                       f"{self.spec.output_type!r} cannot hold: {type(e).__name__}: {e}; return values of that type "
                       f"or change the output_type")
                raise SerializationError(msg) from e
        for out in self.outputs:
            out.num_in += n
            out.process(origin, data, ts)

    def emit_routed(self, origin: tuple, values: list, ts: list | None = None) -> None:
        """Emit a process function's outputs: ``(output_tag, value)`` pairs go to that side
        output (PyFlink's ``yield output_tag, value``), everything else to the main output."""
        tagged = tagged_indexes(values)
        if tagged:
            values, ts, side = split_tagged(values, ts, tagged)
            for tag_id, (side_values, side_ts) in side.items():
                self.emit_side(tag_id, origin, side_values, side_ts)
        self.emit(origin, values, ts)

    def emit_side(self, tag_id: str, origin: tuple, data: Any, ts: list | None = None) -> None:
        targets = self.side_outputs.get(tag_id)
        n = num_records(data) if targets else 0
        if n == 0:
            return
        self.num_out += n
        for out in targets:
            out.num_in += n
            out.process(origin, data, ts)

    def emit_watermark(self, origin: tuple, wm: int) -> None:
        for out in self.outputs:
            out.process_watermark(origin, wm)
        for targets in self.side_outputs.values():
            for out in targets:
                out.process_watermark(origin, wm)

    def emit_watermark_status(self, origin: tuple, idle: bool) -> None:
        for out in self.outputs:
            out.process_watermark_status(origin, idle)
        for targets in self.side_outputs.values():
            for out in targets:
                out.process_watermark_status(origin, idle)

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        raise NotImplementedError

    def process_watermark(self, origin: tuple, wm: int) -> None:
        if self.channel_of is None:
            if wm > self.watermark:
                self.watermark = wm
                self.emit_watermark(origin, wm)
            return
        # per split: another split's watermark, higher or lower, is not this one's
        channel = self.channel_of(origin)
        if wm > self.channel_marks.get(channel, MIN_WATERMARK):
            self.channel_marks[channel] = wm
            low = min(self.channel_marks.values())
            if low > self.watermark:
                self.watermark = low
            self.emit_watermark(origin, wm)

    def process_watermark_status(self, origin: tuple, idle: bool) -> None:
        """All of the operator's inputs became idle (or one became active again)."""
        self.emit_watermark_status(origin, idle)

    def advance_processing_time(self, now: int) -> None:
        if now > self.processing_time:
            self.processing_time = now

    def count(self, metric: str, n: int = 1) -> None:
        self.metrics[metric] = self.metrics.get(metric, 0) + n
        self.totals[metric] = self.totals.get(metric, 0) + n

    def finish(self, epoch: int) -> Any:
        return None

    def open(self, ctx: Any) -> None:
        fn = self.spec.function
        if fn is not None and hasattr(fn, "open"):
            fn.open(ctx)

    def close(self) -> None:
        fn = self.spec.function
        if fn is not None and hasattr(fn, "close"):
            fn.close()


class SourceOp(Operator):
    """A source's records enter the chain here, with the timestamps and watermarks the source
    itself gives (a ``WatermarkStrategy`` on the source runs a ``TimestampsOp`` instead).
    Watermarks are per split (the origin's split index), each never decreasing."""

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.split_watermarks: dict[int, int] = {}

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        self.emit(origin, data, ts)

    def process_watermark(self, origin: tuple, wm: int) -> None:
        split = origin[1]
        if wm > self.split_watermarks.get(split, MIN_WATERMARK):
            self.split_watermarks[split] = wm
            self.emit_watermark(origin, wm)


def apply_each(f: Any, rows: Any, failure: Callable[[Exception, Any], FlowpointError]) -> list:
    """``[f(x) for x in rows]``, calling ``f`` once per record: when ``f`` raises, the record it
    raised on is known without calling anything again, and ``failure(exception, record)`` is
    raised (a user function's side effects must happen once per record per attempt)."""
    out: list = []
    append = out.append
    x = None
    try:
        for x in rows:
            append(f(x))
    except Exception as e:
        raise failure(e, x) from e
    return out


def map_records(spec: Any, f: Any, rows: list) -> list:
    """``f(record)`` for each record (a map function, or one side of a CoMapFunction)."""
    return apply_each(f, rows, lambda e, x: user_error(spec, e, x))


def flat_map_records(spec: Any, f: Any, rows: list, ts: list | None) -> tuple[list, list | None]:
    """The records ``f(record)`` yields for each record, each with its input's timestamp (a
    flat-map function, or one side of a CoFlatMapFunction)."""
    out: list = []
    extend = out.extend
    x = None
    out_ts: list | None = None if ts is None else []
    try:
        if ts is None:
            for x in rows:
                r = f(x)
                if r is not None:
                    extend(r)
        else:
            for x, t in zip(rows, ts, strict=True):
                r = f(x)
                if r is not None:
                    n = len(out)
                    extend(r)
                    out_ts.extend([t] * (len(out) - n))  # type: ignore[union-attr]
    except Exception as e:
        raise user_error(spec, e, x) from e
    return out, out_ts


class MapOp(Operator):
    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        rows = as_rows(data, self.spec.input_type)
        self.records_in += len(rows)
        self.emit(origin, map_records(self.spec, self.spec.function.map, rows), ts)


class FlatMapOp(Operator):
    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        rows = as_rows(data, self.spec.input_type)
        self.records_in += len(rows)
        out, out_ts = flat_map_records(self.spec, self.spec.function.flat_map, rows, ts)
        self.emit(origin, out, out_ts)


class FilterOp(Operator):
    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        rows = as_rows(data, self.spec.input_type)
        self.records_in += len(rows)
        f = self.spec.function.filter
        mask = apply_each(f, rows, lambda e, x: user_error(self.spec, e, x))
        mask = [bool(m) for m in mask]
        kept_ts = None if ts is None else [t for t, keep in zip(ts, mask, strict=True) if keep]
        if isinstance(data, pa.RecordBatch):
            self.emit(origin, data.filter(pa.array(mask, pa.bool_())), kept_ts)
        else:
            self.emit(origin, [x for x, keep in zip(rows, mask, strict=True) if keep], kept_ts)


class ProcessOp(Operator):
    """``DataStream.process(ProcessFunction)``: per record, with the record's timestamp, the
    clocks and side outputs (timers need a keyed stream)."""

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.ctx = ProcessContext(self)

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        rows = as_rows(data, self.spec.input_type)
        self.records_in += len(rows)
        self.ctx.origin = origin
        out, out_ts = run_per_record(self.spec, self.spec.function.process_element, rows, ts, self.ctx)
        self.emit_routed(origin, out, out_ts)


def run_per_record(spec: Any, f: Any, rows: list, ts: list | None, ctx: Any, backend: Any = None) -> tuple[list, list | None]:
    """``f(record, ctx)`` for each record (``ctx.current_timestamp`` set to its timestamp); the
    records it yields, each with the timestamp of the record it came from. With a keyed
    ``backend``, ``rows`` are ``(key, value)`` pairs: the backend's current key is each record's
    key while ``f`` runs, and an error names the key."""
    out: list = []
    extend = out.extend
    out_ts: list | None = None if ts is None else []
    x = key = None
    try:
        for i, x in enumerate(rows):
            if backend is not None:
                key, x = x
                backend.current_key = key
            t = None if ts is None else ts[i]
            ctx.current_timestamp = t
            r = f(x, ctx)
            if r is not None:
                n = len(out)
                extend(r)
                if out_ts is not None:
                    out_ts.extend([t] * (len(out) - n))
    except Exception as e:
        raise user_error(spec, e, x, key) from e
    finally:
        if backend is not None:
            backend.current_key = None
    return out, out_ts


def tagged_indexes(values: list) -> list[int]:
    """Indexes of the ``(output_tag, value)`` pairs among a process function's outputs: PyFlink's
    way to write to a side output is to yield such a pair."""
    return [i for i, x in enumerate(values) if type(x) is tuple and len(x) == 2 and isinstance(x[0], OutputTag)]


def split_tagged(values: list, stamps: list | None, tagged: list[int]) -> tuple[list, list | None, dict[str, tuple[list, list | None]]]:
    """``(main values, main stamps, {tag_id: (values, stamps)})`` from outputs where ``tagged``
    (from :func:`tagged_indexes`, not empty) are ``(output_tag, value)`` pairs."""
    side: dict[str, tuple[list, list | None]] = {}
    skip = set(tagged)
    for i in tagged:
        tag, value = values[i]
        sv, st = side.setdefault(tag.tag_id, ([], None if stamps is None else []))
        sv.append(value)
        if st is not None:
            st.append(stamps[i])  # type: ignore[index]
    main = [x for i, x in enumerate(values) if i not in skip]
    main_ts = None if stamps is None else [t for i, t in enumerate(stamps) if i not in skip]
    return main, main_ts, side


# -- keyed operators: their input is a list of (key, value) pairs ----------------------------


class KeyedOp(Operator):
    def __init__(self, spec: Any, backend: Any):
        super().__init__(spec)
        self.backend = backend

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        self.records_in += len(data)
        backend = self.backend
        out: list = []
        try:
            self._run(data, backend, out)
        except Exception as e:
            raise user_error(self.spec, e, _failed_value(e, self._run), backend.current_key) from e
        finally:
            backend.current_key = None
        # map, filter, reduce and rolling aggregations keep one output per input record (a
        # filter's are matched by identity below); flat_map repeats its input's timestamp
        if ts is not None and len(out) != len(data):
            ts = self._out_timestamps(data, ts, out)
        self.emit(origin, out, ts)

    def _out_timestamps(self, pairs: list, ts: list, out: list) -> list | None:
        return None

    def _run(self, pairs: list, backend: Any, out: list) -> None:
        raise NotImplementedError


def _failed_value(e: BaseException, run: Any) -> Any:
    """The record a keyed loop failed on, read from the loop's frame (no cost per record)."""
    codes = {c.__dict__["_run"].__code__ for c in type(run.__self__).__mro__ if "_run" in c.__dict__}
    tb = e.__traceback__
    found = None
    while tb is not None:
        if tb.tb_frame.f_code in codes and "value" in tb.tb_frame.f_locals:
            found = tb.tb_frame.f_locals["value"]
        tb = tb.tb_next
    return found


class KeyedMapOp(KeyedOp):
    def _run(self, pairs: list, backend: Any, out: list) -> None:
        f = self.spec.function.map
        append = out.append
        for key, value in pairs:
            backend.current_key = key
            append(f(value))


class KeyedFlatMapOp(KeyedOp):
    def _run(self, pairs: list, backend: Any, out: list) -> None:
        f = self.spec.function.flat_map
        extend = out.extend
        counts = self._counts = []
        for key, value in pairs:
            backend.current_key = key
            r = f(value)
            n = len(out)
            if r is not None:
                extend(r)
            counts.append(len(out) - n)

    def _out_timestamps(self, pairs: list, ts: list, out: list) -> list | None:
        return [t for t, n in zip(ts, self._counts, strict=True) for _ in range(n)]


class KeyedFilterOp(KeyedOp):
    def _run(self, pairs: list, backend: Any, out: list) -> None:
        f = self.spec.function.filter
        append = out.append
        mask = self._mask = []
        for key, value in pairs:
            backend.current_key = key
            keep = bool(f(value))
            mask.append(keep)
            if keep:
                append(value)

    def _out_timestamps(self, pairs: list, ts: list, out: list) -> list | None:
        return [t for t, keep in zip(ts, self._mask, strict=True) if keep]


class ReduceOp(KeyedOp):
    """``KeyedStream.reduce``: emits the running reduction of each key."""

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.state = self.backend.get_partitioned_state(ValueStateDescriptor("_reduce"))

    def _run(self, pairs: list, backend: Any, out: list) -> None:
        f = self.spec.function.reduce
        state = self.state
        append = out.append
        convert = self.convert  # the stream's type, as PyFlink gives the reduction (and keeps it)
        for key, value in pairs:
            backend.current_key = key
            current = state.value()
            new = value if current is None else f(current, value)
            if convert is not None:
                new = self._typed(new, convert)
            state.update(new)
            append(new)

    def _typed(self, value: Any, convert: Any) -> Any:
        try:
            return convert(value)
        except (TypeError, ValueError) as e:
            msg = (f"reduce {self.spec.name!r} (uid {self.spec.uid!r}) returned a value the stream's type "
                   f"{self.spec.output_type!r} cannot hold: {type(e).__name__}: {e}; return values of the stream's type")
            raise SerializationError(msg) from e


def _with_field(record: Any, field: int | str, value: Any) -> Any:
    if isinstance(record, Row):
        i = record._fields.index(field) if isinstance(field, str) else field  # type: ignore[union-attr]
        values = list(record)
        values[i] = value
        return Row.of(record._fields, values)
    if isinstance(record, tuple) and hasattr(record, "_fields"):  # a namedtuple keeps its type
        name = record._fields[field] if isinstance(field, int) else field
        return record._replace(**{name: value})
    if isinstance(record, tuple):
        return record[:field] + (value,) + record[field + 1 :]  # type: ignore[operator]
    if isinstance(record, (list, dict)):
        copy = type(record)(record)
        copy[field] = value
        return copy
    if isinstance(field, str) and dataclasses.is_dataclass(record):
        return dataclasses.replace(record, **{field: value})
    return value


class RollingAggOp(KeyedOp):
    """``sum/min/max/min_by/max_by`` by field: Flink's rolling aggregations.

    ``sum``, ``min`` and ``max`` update only the field (other fields keep the key's first
    record); ``min_by`` and ``max_by`` keep the whole record holding the extreme value (the
    first such record on ties).
    """

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.state = self.backend.get_partitioned_state(ValueStateDescriptor("_aggregate"))
        self.agg = self.spec.options["agg"]
        self.field = self.spec.options["field"]

    def _run(self, pairs: list, backend: Any, out: list) -> None:
        state, agg, field = self.state, self.agg, self.field
        append = out.append
        for key, value in pairs:
            backend.current_key = key
            current = state.value()
            if current is None:
                new = value
            else:
                a, b = get_field(current, field), get_field(value, field)
                if agg == "sum":
                    new = _with_field(current, field, a + b)
                elif agg == "min":
                    new = current if a <= b else _with_field(current, field, b)
                elif agg == "max":
                    new = current if a >= b else _with_field(current, field, b)
                elif agg == "min_by":
                    new = current if a <= b else value
                else:  # max_by
                    new = current if a >= b else value
            state.update(new)
            append(new)


class SinkOp(Operator):
    def __init__(self, spec: Any, writer: Any):
        super().__init__(spec)
        self.writer = writer

    def open(self, ctx: Any) -> None:
        pass

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        rows = data if isinstance(data, list) or self.spec.accepts_arrow else as_rows(data, self.spec.input_type)
        self.records_in += num_records(rows)
        try:
            self.writer.write(rows)
        except Exception as e:
            raise user_error(self.spec, e, None) from e

    def finish(self, epoch: int) -> Any:
        return self.writer.finish(epoch)

    def close(self) -> None:
        self.writer.close()


KEYED_OPERATORS = {
    "keyed_map": KeyedMapOp,
    "keyed_flat_map": KeyedFlatMapOp,
    "keyed_filter": KeyedFilterOp,
    "reduce": ReduceOp,
    "rolling_agg": RollingAggOp,
}
STATELESS_OPERATORS = {"map": MapOp, "flat_map": FlatMapOp, "filter": FilterOp, "process": ProcessOp}


# -- exchange writers: the outputs that leave the task ---------------------------------------


class ExchangeWriter:
    """Collects the blobs this task sends over one edge: ``(dest, (edge index, origin, blob))``.

    Watermarks travel as ``("wm", (channel, watermark, idle))`` elements. A channel is a source
    split (``s:<source uid>:<split index>``) in a source stage and the sending task
    (``t:<stage head uid>:<partition>``) elsewhere. A receiver learns a channel's watermark
    just before the next record it gets from that channel, and every receiver gets each
    channel's final value when the task finishes (:meth:`flush`): a punctuated watermark thus
    decides lateness record by record even across a shuffle, and idle watermarks cost nothing.
    """

    num_in = 0  # records written to the edge (an operator's output counts them)

    def __init__(self, edge: Any, partition: int):
        self.edge = edge
        self.partition = partition
        self.out: list[tuple[int, tuple]] = []
        self.batches = 0
        self.channel_of: Any = None  # origin -> channel name (set by the chain)
        self.marks: dict[str, tuple[int, bool]] = {}  # channel -> current (watermark, idle)
        self.sent: dict[tuple[str, int], tuple[int, bool]] = {}  # (channel, dest) -> last sent
        self.last_origin: dict[str, tuple] = {}
        self.eager_marks = False  # the continuous runtime: every moved mark before the next record (_marks_before)

    def reset(self) -> None:
        self.out = []
        self.batches = 0
        self.sent = {}
        self.last_origin = {}

    def _mark_before(self, dest: int, origin: tuple) -> None:
        channel = self.channel_of(origin)
        mark = self.marks.get(channel)
        if mark is not None and self.sent.get((channel, dest)) != mark:
            self.sent[(channel, dest)] = mark
            self.out.append((dest, (self.edge.index, (*origin, self.partition), ("wm", (channel, *mark)))))
        self.last_origin[channel] = origin

    def _send(self, dest: int, origin: tuple, data: Any, ts: list | None = None) -> None:
        # the sending partition breaks ties: pieces of one source batch reach a task from
        # several upstream tasks after a keyed exchange, and must not be ordered by fetch order
        if self.channel_of is not None:
            self._before(dest, origin)
        self.out.append((dest, (self.edge.index, (*origin, self.partition), self._encode(data, ts))))

    def _encode(self, data: Any, ts: list | None) -> tuple[str, Any]:
        """``encode(data, ts)``; a record that cannot be pickled fails the job once, naming the
        operator and the record."""
        try:
            return encode(data, ts)
        except Exception as e:
            raise unpicklable_record(self.edge, data, e) from e

    def _before(self, dest: int, origin: tuple) -> None:
        """The watermarks ``dest`` must see before a record from ``origin``."""
        if self.eager_marks:
            self._marks_before(dest, origin)
        else:
            self._mark_before(dest, origin)

    def _marks_before(self, dest: int, origin: tuple) -> None:
        """The continuous runtime's order (no epoch to sort by origin): every channel's mark that
        moved since ``dest`` last heard of it goes before the record, so a receiver sees the marks
        of a source's splits in the order they were reached, as an epoch's sorted input does."""
        self.last_origin[self.channel_of(origin)] = origin
        for channel, mark in self.marks.items():
            if self.sent.get((channel, dest)) != mark:
                self.sent[(channel, dest)] = mark
                at = self.last_origin.get(channel, origin)
                self.out.append((dest, (self.edge.index, (*at, self.partition), ("wm", (channel, *mark)))))

    def process_watermark(self, origin: tuple, wm: int) -> None:
        channel = self.channel_of(origin)
        _, idle = self.marks.get(channel, (wm, False))
        self.marks[channel] = (wm, idle)
        self.last_origin.setdefault(channel, origin)

    def process_watermark_status(self, origin: tuple, idle: bool) -> None:
        channel = self.channel_of(origin)
        wm, _ = self.marks.get(channel, (MIN_WATERMARK, idle))
        self.marks[channel] = (wm, idle)
        self.last_origin.setdefault(channel, origin)

    def flush(self) -> None:
        """Send every channel's final watermark to every receiver that has not seen it."""
        for channel, mark in self.marks.items():
            origin = self.last_origin.get(channel)
            if origin is None:
                continue
            for dest in range(self.edge.parallelism):
                if self.sent.get((channel, dest)) != mark:
                    self.sent[(channel, dest)] = mark
                    self.out.append((dest, (self.edge.index, (*origin, self.partition), ("wm", (channel, *mark)))))


class ForwardWriter(ExchangeWriter):
    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        self._send(self.partition, origin, data, ts)


class RebalanceWriter(ExchangeWriter):
    """Spreads records evenly over the receiving tasks (Flink's rebalance is round robin per
    record): each batch is cut into contiguous slices, one per receiver, the first slice going
    to the next receiver in turn. A task often emits one batch per epoch, so sending whole
    batches round robin would feed only some receivers."""

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        p = self.edge.parallelism
        first = (self.partition + self.batches) % p
        self.batches += 1
        n = num_records(data)
        parts = min(p, n)
        if parts <= 1:
            self._send(first, origin, data, ts)
            return
        for j in range(parts):
            a, b = n * j // parts, n * (j + 1) // parts
            chunk = data[a:b] if isinstance(data, list) else data.slice(a, b - a)
            # the slice number extends the origin: where slices meet again (after a key_by),
            # they are ordered as in the batch, not by the order Spark fetched them
            self._send((first + j) % p, (*origin, j), chunk, None if ts is None else ts[a:b])


class KeyedWriter(ExchangeWriter):
    """Routes each record to the task owning its key group; ships ``(key, value)`` pairs, or,
    for a columnar batch keyed by field names, columnar slices (:class:`KeyedBatch`) with the
    key group computed once per distinct key."""

    def __init__(self, edge: Any, partition: int):
        super().__init__(edge, partition)
        self.selector = edge.key_selector
        fields = getattr(self.selector, "fields", None) if type(self.selector).__name__ == "FieldKeySelector" else None
        # a columnar batch's key is one column's value or the tuple of several: key_by(["id"]),
        # whose key is the 1-tuple, takes the row path, so that a record has one key either way
        one_tuple = fields is not None and len(fields) == 1 and isinstance(self.selector.field, tuple)
        self.columns = fields if fields and all(isinstance(f, str) for f in fields) and not one_tuple else None
        self.dest_cache: dict[Any, int] = {}

    def _dest(self, key: Any, value: Any) -> int:
        if type(key) is str:
            h = mmh3.hash(b"s" + key.encode(), 0, False)
        else:
            if key is None:
                raise _invalid_key(self.edge, "a key must not be None", value)
            try:
                h = mmh3.hash(canonical_bytes(key), 0, False)
            except InvalidKeyError as e:
                raise _invalid_key(self.edge, str(e), value) from None
        maxp = self.edge.max_parallelism
        return ((h & 0x7FFFFFFF) % maxp) * self.edge.parallelism // maxp

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        if self.columns is not None and isinstance(data, pa.RecordBatch) and all(f in data.schema.names for f in self.columns):
            self._process_columnar(origin, data, ts)
            return
        p = self.edge.parallelism
        rows = as_rows(data, self.edge.input_type)
        get_key = self.selector.get_key
        keys = apply_each(get_key, rows, lambda e, x: _key_error(self.edge, e, x))
        maxp = self.edge.max_parallelism
        groups = key_groups_of_keys(keys, maxp) if len(keys) >= 64 else None  # all str or all int: at once
        if groups is not None:
            dests: list[int] = (groups * p // maxp).tolist()
        else:
            dests = []
            append = dests.append
            hash_ = mmh3.hash
            dest_of = self._dest
            for key, value in zip(keys, rows, strict=True):
                if type(key) is str:
                    append(((hash_(b"s" + key.encode(), 0, False) & 0x7FFFFFFF) % maxp) * p // maxp)
                else:
                    append(dest_of(key, value))
        buckets: list[list] = [[] for _ in range(p)]
        for dest, key, value in zip(dests, keys, rows, strict=True):
            buckets[dest].append((key, value))
        bucket_ts: list[list] | None = None
        if ts is not None:
            bucket_ts = [[] for _ in range(p)]
            for dest, t in zip(dests, ts, strict=True):
                bucket_ts[dest].append(t)
        for dest, bucket in enumerate(buckets):
            if bucket:
                self._send_bucket(dest, origin, bucket, None if bucket_ts is None else bucket_ts[dest])

    def _send_bucket(self, dest: int, origin: tuple, bucket: Any, ts: list | None) -> None:
        if self.channel_of is not None:
            self._before(dest, origin)
        blob = self._encode(bucket, ts)
        self.out.append((dest, (self.edge.index, (*origin, self.partition), blob)))

    def _process_columnar(self, origin: tuple, data: pa.RecordBatch, ts: list | None) -> None:
        """Key groups of the whole batch at once where the key's columns allow it (strings,
        integers: ``key_groups_of_columns``), else per distinct key (dictionary encoding); then
        one ``take`` per receiver."""
        fields = self.columns
        assert fields is not None
        columns = [data.column(f) for f in fields]
        for f, col in zip(fields, columns, strict=True):
            if col.null_count:
                row = data.slice(col.to_pylist().index(None), 1).to_pylist()[0]
                raise _invalid_key(self.edge, f"a key must not be None (field {f!r} is null)", row)
        maxp = self.edge.max_parallelism
        groups = key_groups_of_columns(columns, maxp, as_tuple=False) if len(fields) == 1 else None
        if groups is not None:
            dests = groups * self.edge.parallelism // maxp
        else:
            dests = self._dests_by_distinct_key(columns, maxp)
        p = self.edge.parallelism
        ts_np = None if ts is None else np.asarray(ts, dtype=np.int64)
        if p == 1:
            self._send_bucket(0, origin, KeyedBatch(data, fields), ts)
            return
        order = np.argsort(dests, kind="stable")
        bounds = np.searchsorted(dests[order], np.arange(p + 1))
        for dest in range(p):
            a, b = int(bounds[dest]), int(bounds[dest + 1])
            if a == b:
                continue
            take = order[a:b]
            piece = data.take(pa.array(take))
            self._send_bucket(dest, origin, KeyedBatch(piece, fields), None if ts_np is None else ts_np[take].tolist())

    def _dests_by_distinct_key(self, columns: list, maxp: int) -> np.ndarray:
        """Each row's receiver, from the key group of each distinct key (dictionary encoding);
        many distinct keys of strings or integers are hashed all at once instead."""
        fields = self.columns
        assert fields is not None
        codes = None
        uniques: list[list] = []
        for col in columns:
            enc = pc.dictionary_encode(col)
            idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
            uniques.append(enc.dictionary.to_pylist())
            codes = idx if codes is None else codes * len(uniques[-1]) + idx
        assert codes is not None
        if len(fields) == 1:
            keys_u = uniques[0]
            inverse = codes
        else:
            present, inverse = np.unique(codes, return_inverse=True)
            if len(present) * 8 > len(codes):
                groups = key_groups_of_columns(columns, maxp, as_tuple=True)
                if groups is not None:
                    return groups * self.edge.parallelism // maxp
            keys_u = []
            for code in present.tolist():
                parts = []
                for values in reversed(uniques):
                    code, i = divmod(code, len(values))
                    parts.append(values[i])
                keys_u.append(tuple(reversed(parts)))
        cache = self.dest_cache
        if len(cache) > 100_000:
            cache.clear()
        dest_u = []
        for key in keys_u:
            d = cache.get(key)
            if d is None:
                d = cache[key] = self._dest(key, key)
            dest_u.append(d)
        return np.asarray(dest_u, dtype=np.int64)[inverse]


def _key_error(edge: Any, e: BaseException, x: Any) -> FlowpointError:
    if isinstance(e, FlowpointError):
        return e
    fn = describe_function(edge.key_selector)
    of_uid = f" (uid {edge.target_uid!r})" if edge.target_uid else ""
    msg = (
        f"the key selector ({fn}) of the key_by before operator "
        f"{edge.target_name!r}{of_uid} raised {type(e).__name__}: {e} on {x!r:.200}"
    )
    return user_function_error(msg, e, operator=edge.target_name, uid=edge.target_uid or None, function=fn, record=x)


def _invalid_key(edge: Any, reason: str, value: Any) -> InvalidKeyError:
    msg = (
        f"the key selector ({describe_function(edge.key_selector)}) of the key_by before operator "
        f"{edge.target_name!r} returned an invalid key for {value!r:.200}: {reason}. Keys must be "
        f"hashable and stable: str, int, float, bool, bytes, or tuples/Rows of those"
    )
    return InvalidKeyError(msg)


class BroadcastWriter(ExchangeWriter):
    """Sends every batch to every receiving task (broadcast state: the same records everywhere)."""

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        for dest in range(self.edge.parallelism):
            self._send(dest, origin, data, ts)


class CustomWriter(ExchangeWriter):
    """``partition_custom(partitioner, key_selector)``: ``partitioner.partition(key, n)`` picks
    each record's receiver (0 <= it < n); records keep their order per receiver."""

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        partitioner, selector = self.edge.key_selector
        n = self.edge.parallelism
        rows = as_rows(data, self.edge.input_type)
        by_dest: dict[int, list[int]] = {}
        value = None
        try:
            for i, value in enumerate(rows):
                dest = partitioner.partition(selector.get_key(value), n)
                if not isinstance(dest, int) or isinstance(dest, bool) or not 0 <= dest < n:
                    msg = (f"the custom partitioner of the exchange into {self.edge.target_name!r} returned {dest!r} for "
                           f"{value!r:.100}; it must return an int from 0 to {n - 1} (num_partitions {n})")
                    raise InvalidKeyError(msg)
                by_dest.setdefault(dest, []).append(i)
        except FlowpointError:
            raise
        except Exception as e:
            msg = f"the custom partitioner of the exchange into {self.edge.target_name!r} raised {type(e).__name__}: {e} for {value!r:.100}"
            raise user_function_error(
                msg, e, operator=self.edge.target_name, uid=self.edge.target_uid or None,
                function=describe_function(partitioner), record=value,
            ) from e
        for dest, idx in sorted(by_dest.items()):
            chunk = [rows[i] for i in idx]
            self._send(dest, (*origin, dest), chunk, None if ts is None else [ts[i] for i in idx])


EXCHANGE_WRITERS = {"forward": ForwardWriter, "rebalance": RebalanceWriter, "keyed": KeyedWriter, "broadcast": BroadcastWriter, "custom": CustomWriter}
