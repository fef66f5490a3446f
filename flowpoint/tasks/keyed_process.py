"""``KeyedStream.process(KeyedProcessFunction)``: per-record code with keyed state, timers and
side outputs (Flink's ``KeyedProcessOperator``).

Outputs of ``process_element`` carry the input record's timestamp; outputs of ``on_timer`` carry
the timer's timestamp for event-time timers and no timestamp for processing-time timers (Flink
erases it there; ``ctx.timestamp()`` and side outputs in ``on_timer`` have the timer's timestamp
in both domains). Event-time timers fire when the watermark reaches them, before the watermark
is forwarded; processing-time timers fire when the task's processing time reaches them (once per
epoch, before input).
"""

from __future__ import annotations

from collections.abc import Iterable
from itertools import repeat
from typing import Any

from flowpoint.api.functions import KeyedProcessFunction, TimerService
from flowpoint.api.time import MAX_WATERMARK, TimeDomain
from flowpoint.errors import FlowpointError, StateAccessError
from flowpoint.graph.transformation import describe_function
from flowpoint.state.key_identity import CurrentKey
from flowpoint.tasks.operators import KeyedOp, split_tagged, tagged_indexes, user_error
from flowpoint.tasks.timers import InternalTimerService
from flowpoint.tasks.user_errors import user_function_error


class OutputBuffer:
    """What an operator produced since it last emitted: main output values with their
    timestamps and side outputs per tag id, in production order."""

    __slots__ = ("values", "timestamps", "side")

    def __init__(self) -> None:
        self.values: list = []
        self.timestamps: list = []
        self.side: dict[str, tuple[list, list]] = {}

    def add_side(self, tag: Any, value: Any, timestamp: int | None) -> None:
        tag_id = getattr(tag, "tag_id", None)
        if not isinstance(tag_id, str):
            msg = f"output() needs an OutputTag as its first argument; got {tag!r:.80}"
            raise StateAccessError(msg)
        self.add_side_id(tag_id, value, timestamp)

    def add_side_id(self, tag_id: str, value: Any, timestamp: int | None) -> None:
        values, stamps = self.side.setdefault(tag_id, ([], []))
        values.append(value)
        stamps.append(timestamp)

    def flush(self, op: Any, origin: tuple) -> None:
        """Emit everything through ``op`` (runs with and without timestamps go separately);
        ``(output_tag, value)`` outputs go to that side output (PyFlink's idiom)."""
        if self.values:
            values, timestamps = self.values, self.timestamps
            self.values, self.timestamps = [], []
            tagged = tagged_indexes(values)
            if tagged:
                values, timestamps, side = split_tagged(values, timestamps, tagged)
                for tag_id, (side_values, side_ts) in side.items():
                    for v, t in zip(side_values, side_ts, strict=True):  # type: ignore[arg-type]
                        self.add_side_id(tag_id, v, t)
            for run_values, stamps in _runs(values, timestamps):
                op.emit(origin, run_values, stamps)
        if self.side:
            side, self.side = self.side, {}
            for tag_id, (values, stamps) in side.items():
                for run_values, run_stamps in _runs(values, stamps):
                    op.emit_side(tag_id, origin, run_values, run_stamps)


def _runs(values: list, stamps: list) -> list[tuple[list, list | None]]:
    """Split into maximal runs of records that all have, or all lack, a timestamp."""
    if None not in stamps:
        return [(values, stamps)]
    out: list[tuple[list, list | None]] = []
    start = 0
    for i in range(1, len(values) + 1):
        if i == len(values) or (stamps[i] is None) != (stamps[start] is None):
            out.append((values[start:i], None if stamps[start] is None else stamps[start:i]))
            start = i
    return out


class KeyedTimerService(TimerService):
    """``ctx.timer_service()``: the clocks, and timers of the current key."""

    __slots__ = ("_timers",)

    def __init__(self, timers: InternalTimerService):
        self._timers = timers

    def current_processing_time(self) -> int:
        return self._timers.current_processing_time()

    def current_watermark(self) -> int:
        return self._timers.current_watermark()

    def register_event_time_timer(self, timestamp: int) -> None:
        self._timers.register_event_time_timer(None, int(timestamp))

    def register_processing_time_timer(self, timestamp: int) -> None:
        self._timers.register_processing_time_timer(None, int(timestamp))

    def delete_event_time_timer(self, timestamp: int) -> None:
        self._timers.delete_event_time_timer(None, int(timestamp))

    def delete_processing_time_timer(self, timestamp: int) -> None:
        self._timers.delete_processing_time_timer(None, int(timestamp))


class KeyedProcessContext(KeyedProcessFunction.OnTimerContext):
    """The ``ctx`` of ``process_element`` and ``on_timer`` (``time_domain()`` is None in
    ``process_element``)."""

    __slots__ = ("_backend", "_timer_service", "_buffer", "current_timestamp", "domain")

    def __init__(self, backend: Any, timer_service: KeyedTimerService, buffer: OutputBuffer):
        self._backend = backend
        self._timer_service = timer_service
        self._buffer = buffer
        self.current_timestamp: int | None = None
        self.domain: TimeDomain | None = None

    def timestamp(self) -> int | None:
        return self.current_timestamp

    def get_current_key(self) -> Any:
        return self._backend.current_key

    def timer_service(self) -> TimerService:
        return self._timer_service

    def output(self, output_tag: Any, value: Any) -> None:
        self._buffer.add_side(output_tag, value, self.current_timestamp)

    def time_domain(self) -> TimeDomain | None:
        return self.domain


class TimerOp(KeyedOp):
    """A keyed operator with timers (``self.timers``) and buffered output (``self.buffer``):
    a new watermark or processing time fires the due timers, flushes what they emitted, and
    (watermarks) is forwarded after them, as in Flink."""

    timers: InternalTimerService
    buffer: OutputBuffer

    def process_watermark(self, origin: tuple, wm: int) -> None:
        if wm <= self.watermark:
            return
        self.watermark = wm
        try:
            self.timers.advance_watermark(wm)
            if wm >= MAX_WATERMARK and self.spec.options.get("batch"):
                # BATCH: processing time did not advance; its timers fire at the end of input
                self.timers.advance_processing_time(MAX_WATERMARK)
        finally:
            self.backend.current_key = None
        self.buffer.flush(self, origin)
        self.emit_watermark(origin, wm)

    def advance_processing_time(self, now: int, origin: tuple = ()) -> None:
        if now <= self.processing_time:
            return
        self.processing_time = now
        if self.spec.options.get("batch"):
            return  # BATCH: no processing-time timer fires before the end of input
        try:
            self.timers.advance_processing_time(now)
        finally:
            self.backend.current_key = None
        self.buffer.flush(self, origin)


class FunctionTimers:
    """Timers of a user function with ``on_timer(timestamp, ctx)`` (KeyedProcessFunction,
    KeyedBroadcastProcessFunction), mixed into a :class:`TimerOp`: ``self.timer_ctx`` is the
    context ``on_timer`` gets; what it yields is buffered with the timer's timestamp (event time)
    or none (processing time)."""

    spec: Any
    backend: Any
    timers: InternalTimerService
    buffer: OutputBuffer
    timer_ctx: Any

    def _open_timers(self) -> KeyedTimerService:
        """The timers (rebuilt from the state) and the output buffer; the function's timer service."""
        self.timers = InternalTimerService(self.backend, self, self._on_event_time, self._on_processing_time)
        self.timers.open()
        self.buffer = OutputBuffer()
        return KeyedTimerService(self.timers)

    def _on_event_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._fire(key, timestamp, TimeDomain.EVENT_TIME, timestamp)

    def _on_processing_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._fire(key, timestamp, TimeDomain.PROCESSING_TIME, None)

    def _fire(self, key: Any, timestamp: int, domain: TimeDomain, out_ts: int | None) -> None:
        ctx = self.timer_ctx
        ctx.domain = domain
        ctx.current_timestamp = timestamp
        try:
            r = self.spec.function.on_timer(timestamp, ctx)
            if r is not None:
                values, stamps = self.buffer.values, self.buffer.timestamps
                for x in r:
                    values.append(x)
                    stamps.append(out_ts)
        except Exception as e:
            raise timer_error(self.spec, e, timestamp, domain, key) from e


class KeyedProcessOp(FunctionTimers, TimerOp):
    """Runs a :class:`KeyedProcessFunction` with timers (see the module docstring)."""

    def open(self, ctx: Any) -> None:
        self.ctx = self.timer_ctx = KeyedProcessContext(self.backend, self._open_timers(), self.buffer)
        super().open(ctx)

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        self._process_with(self.spec.function.process_element, origin, data, ts)

    def process_keyed(self, origin: tuple, keys: Iterable, rows: Iterable, ts: list | None = None, n: int | None = None) -> None:
        """:meth:`process` of a keyed batch given as its keys and its records (``n`` of each;
        lists, or iterators that build them one at a time: ``KeyedBatch.keys_and_row_iter``): no
        list of ``(key, record)`` pairs is built for it."""
        if n is None:
            n = len(rows)  # type: ignore[arg-type]
        if type(self).process is not KeyedProcessOp.process:  # a subclass's own process() sees pairs
            self.process(origin, list(zip(keys, rows, strict=True)), ts)
            return
        self._process_with(self.spec.function.process_element, origin, zip(keys, rows, strict=True), ts, n)

    def _process_with(self, f: Any, origin: tuple, data: Any, ts: list | None, n: int | None = None) -> None:
        """``f`` over ``data``, ``(key, record)`` pairs (``n`` of them: any iterable; without
        ``n``, a list)."""
        self.records_in += len(data) if n is None else n
        backend = self.backend
        ctx = self.ctx
        ctx.domain = None
        values, stamps = self.buffer.values, self.buffer.timestamps
        key = value = None
        try:
            if type(backend).current_key is not CurrentKey.current_key:
                for i, (key, value) in enumerate(data):
                    backend.current_key = key
                    t = None if ts is None else ts[i]
                    ctx.current_timestamp = t
                    r = f(value, ctx)
                    if r is not None:
                        for x in r:
                            values.append(x)
                            stamps.append(t)
            else:
                # the per-record path: a str or int key is its own state key (CurrentKey's
                # setter, inlined); records without timestamps skip the timestamp's lookup
                stamps_of = repeat(None) if ts is None else ts
                for (key, value), t in zip(data, stamps_of, strict=False):  # repeat(None) never ends
                    tk = type(key)
                    if tk is str or tk is int:
                        backend._key = backend._sk = key
                    else:
                        backend.current_key = key
                    ctx.current_timestamp = t
                    r = f(value, ctx)
                    if r is not None:
                        for x in r:
                            values.append(x)
                            stamps.append(t)
        except Exception as e:
            raise user_error(self.spec, e, value, key) from e
        finally:
            backend.current_key = None
        self.buffer.flush(self, origin)


def timer_error(spec: Any, e: BaseException, timestamp: int, domain: TimeDomain, key: Any) -> FlowpointError:
    """A user function failed while a timer fired: name the operator, function, timer and key."""
    if isinstance(e, FlowpointError):
        return e
    fn = describe_function(spec.function) if spec.function is not None else spec.kind
    msg = (
        f"operator {spec.name!r} (uid {spec.uid!r}, function {fn}) raised {type(e).__name__}: {e} "
        f"in on_timer for the {domain.name.lower().replace('_', '-')} timer {timestamp} of key {key!r:.100}"
    )
    return user_function_error(msg, e, operator=spec.name, uid=spec.uid, function=fn)
