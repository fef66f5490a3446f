"""Event time inside a task: timestamp assignment, watermark generation and input combining.

* :class:`TimestampsOp` runs ``assign_timestamps_and_watermarks`` (and a source's
  ``WatermarkStrategy``): one :class:`WatermarkGenerator` per source split when it runs in the
  source stage, one per parallel instance after a shuffle (as Flink does). Generators live on
  the driver between epochs (pickled in the task's acknowledgement), so a retried task starts
  from the same generator state and a checkpoint records them.
* :class:`InputWatermarks` is a stage head's view of its input channels: the watermark is the
  minimum over the channels that are not idle, never decreasing (docs/architecture.md, section 8).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from flowpoint.api.time import MAX_WATERMARK, MIN_WATERMARK
from flowpoint.api.watermarks import (
    BoundedOutOfOrdernessWatermarks,
    FieldTimestampAssigner,
    GeneratorContext,
    Watermark,
    WatermarkOutput,
)
from flowpoint.checkpoint.integrity import decode
from flowpoint.errors import ConfigurationError
from flowpoint.pickles import dumps
from flowpoint.tasks.batches import as_rows, num_records
from flowpoint.tasks.operators import Operator, user_error

Mark = tuple[int, bool]  # (watermark, idle)


@dataclass
class GeneratorState:
    """A split's (or instance's) watermark generator and what it last emitted."""

    generator: Any
    watermark: int = MIN_WATERMARK
    idle: bool = False
    last_active_ms: int | None = None


class _Output(WatermarkOutput):
    """Collects what a generator emits; smaller watermarks than the current one are ignored."""

    __slots__ = ("current", "idle", "moved")

    def __init__(self, current: int, idle: bool) -> None:
        self.current = current
        self.idle = idle
        self.moved = False

    def emit_watermark(self, watermark: Watermark | int) -> None:
        ts = watermark.timestamp if isinstance(watermark, Watermark) else int(watermark)
        if ts > self.current:
            self.current = ts
            self.moved = True
        if self.idle:
            self.idle = False
            self.moved = True

    def mark_idle(self) -> None:
        if not self.idle:
            self.idle = True
            self.moved = True

    def mark_active(self) -> None:
        if self.idle:
            self.idle = False
            self.moved = True


class TimestampsOp(Operator):
    """Assigns event timestamps and emits watermarks per split (source stage) or per instance.

    Watermark granularity follows the generator: a watermark emitted in ``on_event`` applies
    from the next record on (the batch is cut there), ``on_periodic_emit`` runs after every
    batch and once per epoch for every split, also without records (idleness and
    processing-time generators need that). The built-in bounded out-of-orderness generator is
    advanced once per batch with the batch's maximum timestamp (same result, no Python call per
    record).
    """

    def __init__(self, spec: Any):
        super().__init__(spec)
        self.strategy = spec.options["watermark_strategy"]
        # pipeline.auto-watermark-interval 0: no periodic watermarks (Flink's meaning of 0)
        self.periodic = spec.options.get("periodic_watermarks", True)
        # BATCH: no watermark before the end of input (nothing is late; see api/execution_mode.py)
        self.batch = bool(spec.options.get("batch"))
        self.assigner = self.strategy.create_timestamp_assigner()
        self.in_source_stage = bool(spec.options.get("in_source_stage"))
        self.partition = 0
        self.states: dict[str, GeneratorState] = {}
        self.saved: dict[str, bytes] = {}  # generator states from the driver, by key
        self.touched: set[str] = set()
        self.channel_of: Any = None  # origin -> watermark channel (set by the chain)
        self.channels: dict[str, str] = {}  # generator key -> its watermark channel

    # -- generator state -----------------------------------------------------------------------

    def begin_epoch(self, partition: int, saved: dict[str, bytes]) -> None:
        self.partition = partition
        self.saved = saved
        self.states = {}
        self.touched = set()

    def _key(self, origin: tuple) -> str:
        part = f"s{origin[1]}" if self.in_source_stage and len(origin) > 1 else f"p{self.partition}"
        return f"{self.spec.uid}:{part}"

    def _state(self, key: str, origin: tuple = ()) -> GeneratorState:
        if self.channel_of is not None and key not in self.channels:
            self.channels[key] = self.channel_of(origin)
        st = self.states.get(key)
        if st is None:
            blob = self.saved.get(key)
            if blob is not None:
                st = decode(pickle.loads, blob, "the restored checkpoint's _metadata", self.spec.uid, f"the watermark generator state {key!r} from")
            else:
                split = key.rsplit(":", 1)[1]
                ctx = GeneratorContext(self.spec.name, split, self.partition)
                st = GeneratorState(self.strategy.create_watermark_generator(ctx))
            self.states[key] = st
        self.touched.add(key)
        return st

    def snapshot_generators(self) -> dict[str, bytes]:
        return {k: dumps(self.states[k]) for k in self.touched}

    def marks(self) -> dict[str, tuple[int, bool]]:
        """The watermark channels this operator drives, with their current marks."""
        return {self.channels[k]: (self.states[k].watermark, self.states[k].idle) for k in self.touched if k in self.channels}

    # -- records -------------------------------------------------------------------------------

    def _timestamps(self, data: Any, ts: list | None) -> tuple[list, list]:
        assigner = self.assigner
        if assigner is None:
            rows = as_rows(data, self.spec.input_type)
            if ts is None:
                # as in Flink: a record without a timestamp keeps Long.MIN_VALUE ("no timestamp");
                # an event-time window refuses it, saying to add a timestamp assigner
                return rows, [MIN_WATERMARK] * len(rows)
            return rows, ts
        if isinstance(assigner, FieldTimestampAssigner) and isinstance(data, pa.RecordBatch) and isinstance(assigner.field, str):
            return data, data.column(assigner.field).to_pylist()  # type: ignore[return-value]
        rows = as_rows(data, self.spec.input_type)
        extract = assigner.extract_timestamp
        out: list = []
        append = out.append
        x = None
        try:  # once per record: the record that failed is x, nothing is called again
            if ts is None:
                for x in rows:
                    append(extract(x, None))
            else:
                for x, t in zip(rows, ts, strict=True):
                    append(extract(x, t))
        except Exception as e:
            raise user_error(self.spec, e, x) from e
        for i, t in enumerate(out):
            if type(t) is not int:
                if isinstance(t, float) and t == t:
                    out[i] = int(t)
                    continue
                msg = (
                    f"the timestamp assigner of operator {self.spec.name!r} (uid {self.spec.uid!r}) returned {t!r} for "
                    f"{rows[i]!r:.200}; it must return epoch milliseconds as an int"
                )
                raise ConfigurationError(msg)
        return rows, out

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        n = num_records(data)
        self.records_in += n
        if n == 0:
            return
        key = self._key(origin)
        st = self._state(key, origin)
        rows, stamps = self._timestamps(data, ts)
        st.last_active_ms = self.processing_time
        out = _Output(st.watermark, st.idle)
        if st.idle:
            out.mark_active()
            self._publish(origin, st, out)
        gen = st.generator
        if not isinstance(rows, list) and type(gen) is not BoundedOutOfOrdernessWatermarks:
            rows = as_rows(data, self.spec.input_type)  # a custom generator sees each record
        if type(gen) is BoundedOutOfOrdernessWatermarks:
            top = max(stamps)
            if top > gen.max_timestamp:
                gen.max_timestamp = top
            self.emit(origin, rows, stamps)
        else:
            # punctuated: a watermark from on_event applies from the next record on, so the batch
            # is cut there; the piece number extends the origin, which orders the pieces (and
            # the watermarks between them) wherever they meet again after an exchange
            on_event = gen.on_event
            start = piece = 0
            for i, t in enumerate(stamps):
                on_event(rows[i], t, out)
                if out.moved:
                    self.emit((*origin, piece), _slice(rows, start, i + 1), stamps[start : i + 1])
                    start = i + 1
                    piece += 1
                    self._publish((*origin, piece), st, out)
            if start < n:
                self.emit((*origin, piece), _slice(rows, start, n), stamps[start:n])
        if self.periodic:
            gen.on_periodic_emit(out)
        self._publish(origin, st, out)

    def _publish(self, origin: tuple, st: GeneratorState, out: _Output) -> None:
        if not out.moved:
            return
        out.moved = False
        if self.batch:
            return
        if out.idle != st.idle:
            st.idle = out.idle
            self.emit_watermark_status(origin, st.idle)
        if out.current > st.watermark:
            st.watermark = out.current
            self.watermark = max(self.watermark, out.current)
            self.emit_watermark(origin, out.current)

    def end_split(self, origin: tuple) -> None:
        """The split (source stage) or the instance's input had its last records of the epoch:
        periodic emit and idleness, also when it had no records."""
        st = self._state(self._key(origin), origin)
        out = _Output(st.watermark, st.idle)
        if self.periodic:
            st.generator.on_periodic_emit(out)
        idleness = self.strategy.idleness_ms
        if idleness is not None and not out.idle:
            if st.last_active_ms is None:
                st.last_active_ms = self.processing_time
            elif self.processing_time - st.last_active_ms >= idleness:
                out.mark_idle()
        self._publish(origin, st, out)

    # -- upstream watermarks -------------------------------------------------------------------

    def process_watermark(self, origin: tuple, wm: int) -> None:
        """Upstream watermarks are replaced by this operator's own, except the end of input."""
        if wm >= MAX_WATERMARK:
            st = self._state(self._key(origin), origin)
            st.watermark = MAX_WATERMARK
            st.idle = False
            self.watermark = MAX_WATERMARK
            self.emit_watermark(origin, MAX_WATERMARK)

    def process_watermark_status(self, origin: tuple, idle: bool) -> None:
        pass


def _slice(rows: Any, a: int, b: int) -> Any:
    return rows[a:b] if isinstance(rows, list) else rows.slice(a, b - a)


class SideOutputOp(Operator):
    """``get_side_output(tag)``: receives its parent's side output and passes it on."""

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        self.records_in += num_records(data)
        self.emit(origin, data, ts)


class InputWatermarks:
    """A stage head's input channels: ``{channel: (watermark, idle)}``.

    The combined watermark is the minimum over channels that are not idle; it never decreases,
    and when every channel is idle the head is idle and keeps its watermark.
    """

    def __init__(self, channels: dict[str, Mark]):
        self.channels = dict(channels)
        self.watermark, self.idle = self._combine()

    def _combine(self) -> Mark:
        active = [wm for wm, idle in self.channels.values() if not idle]
        if active:
            return min(active), False
        known = [wm for wm, _ in self.channels.values()]
        return (min(known) if known else MIN_WATERMARK), True

    def update(self, channel: str, wm: int, idle: bool) -> tuple[int | None, bool | None]:
        """Record a channel's new mark; returns (new watermark or None, new idle status or None)."""
        old = self.channels.get(channel, (MIN_WATERMARK, False))
        self.channels[channel] = (max(old[0], wm), idle)
        combined, all_idle = self._combine()
        moved = None
        status = None
        if all_idle != self.idle:
            self.idle = all_idle
            status = all_idle
        if not all_idle and combined > self.watermark:
            self.watermark = combined
            moved = combined
        return moved, status
