"""The operators behind ``stream.connect(broadcast_stream).process(...)`` (see
:mod:`flowpoint.api.broadcast`). Input edge 0 is the broadcast stream, edge 1 the main stream;
the broadcast state is a dict per descriptor, kept with the operator state (mode "broadcast")."""

from __future__ import annotations

from typing import Any

from flowpoint.api.broadcast_state import BroadcastState, ReadOnlyBroadcastState
from flowpoint.api.functions import TimerService
from flowpoint.api.operator_state import BROADCAST, OperatorStateStore
from flowpoint.api.time import TimeDomain
from flowpoint.errors import StateAccessError
from flowpoint.tasks.batches import as_rows
from flowpoint.tasks.context import OperatorClocks
from flowpoint.tasks.keyed_process import FunctionTimers, TimerOp
from flowpoint.tasks.operators import Operator, run_per_record


class _Context:
    """``process_broadcast_element``'s ``Context`` (``writable``), ``process_element``'s
    ``ReadOnlyContext`` and, keyed, ``on_timer``'s ``OnTimerContext`` (``domain`` set)."""

    __slots__ = ("op", "writable", "current_timestamp", "origin", "domain")

    def __init__(self, op: Any, writable: bool):
        self.op = op
        self.writable = writable
        self.current_timestamp: int | None = None
        self.origin: tuple = ()
        self.domain: TimeDomain | None = None

    def get_broadcast_state(self, descriptor: Any) -> ReadOnlyBroadcastState:
        name = descriptor.name
        data = self.op.broadcast_states.get(name)
        if data is None:
            msg = (
                f"operator {self.op.spec.name!r} asked for broadcast state {name!r}, but its broadcast stream declares "
                f"{sorted(self.op.broadcast_states)}: pass the descriptor to broadcast(...)"
            )
            raise StateAccessError(msg)
        return BroadcastState(name, data) if self.writable else ReadOnlyBroadcastState(name, data)

    def timestamp(self) -> int | None:
        return self.current_timestamp

    def current_watermark(self) -> int:
        return self.op.watermark

    def current_processing_time(self) -> int:
        return self.op.processing_time

    def output(self, output_tag: Any, value: Any) -> None:
        ts = None if self.current_timestamp is None else [self.current_timestamp]
        self.op.emit_side(output_tag.tag_id, self.origin, [value], ts)

    # keyed variant
    def get_current_key(self) -> Any:
        return self.op.backend.current_key

    def timer_service(self) -> TimerService:
        """As in PyFlink, every context has one: in ``process_element`` and ``on_timer`` of a
        KeyedBroadcastProcessFunction the current key's timers and the clocks; elsewhere (the
        broadcast side, a non-keyed function) the clocks, and registering a timer is refused."""
        service = getattr(self.op, "timer_service", None)
        if service is None or self.writable:
            return BroadcastSideClocks(self.op, keyed=service is not None)
        return service

    def time_domain(self) -> TimeDomain | None:
        """The firing timer's domain in ``on_timer`` (None elsewhere)."""
        return self.domain

    def apply_to_keyed_state(self, descriptor: Any, function: Any) -> None:
        """Run ``function(key, state)`` for every key that has state ``descriptor`` (Flink's
        ``applyToKeyedState``), from ``process_broadcast_element``."""
        backend = self.op.backend
        state = backend.get_partitioned_state(descriptor)
        keys = [k for k, _ in backend.iter_entries(descriptor.name)]
        try:
            for key in keys:
                backend.current_key = key
                function(key, state)
        finally:
            backend.current_key = None


class BroadcastSideClocks(OperatorClocks):
    """The timer service of a broadcast function's context without a current key: the clocks
    work, a timer has no key to belong to."""

    __slots__ = ("_keyed",)

    def __init__(self, op: Any, keyed: bool):
        super().__init__(op)
        self._keyed = keyed

    def _no_timers(self, *_args: Any) -> None:
        if not self._keyed:
            super()._no_timers()
        msg = (
            f"operator {self._op.spec.name!r} registered or deleted a timer in process_broadcast_element, which has no "
            f"current key: register timers in process_element or on_timer of the KeyedBroadcastProcessFunction"
        )
        raise StateAccessError(msg)

    register_event_time_timer = _no_timers
    register_processing_time_timer = _no_timers
    delete_event_time_timer = _no_timers
    delete_processing_time_timer = _no_timers


class _BroadcastMixin:
    """Shared by the keyed and non-keyed variants."""

    spec: Any
    records_in: int

    def _init_broadcast(self) -> None:
        self.broadcast_states: dict[str, dict] = {n: {} for n in self.spec.options.get("broadcast_descriptors", [])}
        self.read_ctx = _Context(self, False)
        self.write_ctx = _Context(self, True)

    # operator state hooks (ChainRuntime): the broadcast maps are checkpointed with it
    def initialize_operator_state(self, store: OperatorStateStore, restored: bool) -> None:
        for name, (mode, items) in store.restored.items():
            if mode == BROADCAST and name in self.broadcast_states:
                self.broadcast_states[name] = dict(items)

    def snapshot_operator_state(self) -> dict[str, tuple[str, list]]:
        return {name: (BROADCAST, list(data.items())) for name, data in self.broadcast_states.items()}

    def process_input(self, edge_index: int, origin: tuple, data: Any, ts: list | None) -> None:
        if edge_index == 0:
            self._broadcast(origin, as_rows(data, None), ts)
        else:
            self.process(origin, data, ts)

    def _broadcast(self, origin: tuple, rows: list, ts: list | None) -> None:
        self.records_in += len(rows)
        self.write_ctx.origin = origin
        out, out_ts = run_per_record(self.spec, self.spec.function.process_broadcast_element, rows, ts, self.write_ctx)
        self.emit_routed(origin, out, out_ts)  # type: ignore[attr-defined]


class BroadcastProcessOp(_BroadcastMixin, Operator):
    def open(self, ctx: Any) -> None:
        super().open(ctx)
        if not hasattr(self, "broadcast_states"):
            self._init_broadcast()

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        rows = as_rows(data, self.spec.options.get("main_type"))
        self.records_in += len(rows)
        self.read_ctx.origin = origin
        out, out_ts = run_per_record(self.spec, self.spec.function.process_element, rows, ts, self.read_ctx)
        self.emit_routed(origin, out, out_ts)


class KeyedBroadcastProcessOp(_BroadcastMixin, FunctionTimers, TimerOp):
    """The keyed variant: keyed state and timers in ``process_element`` and ``on_timer`` (which
    see the broadcast state read-only), ``apply_to_keyed_state`` on the broadcast side. Timers
    fire as a KeyedProcessFunction's (tasks/keyed_process.py)."""

    def open(self, ctx: Any) -> None:
        self.timer_service = self._open_timers()
        super().open(ctx)
        if not hasattr(self, "broadcast_states"):
            self._init_broadcast()
        self.timer_ctx = _Context(self, False)

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        """Per record: the key, the record's timestamp in ``ctx.timestamp()``; each output keeps
        its input record's timestamp; ``(output_tag, value)`` outputs go to that side output."""
        self.records_in += len(data)
        self.read_ctx.origin = origin
        out, out_ts = run_per_record(self.spec, self.spec.function.process_element, data, ts, self.read_ctx, self.backend)
        self.emit_routed(origin, out, out_ts)
