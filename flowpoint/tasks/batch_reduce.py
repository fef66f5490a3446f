"""BATCH mode's keyed ``reduce`` and rolling aggregations: one final record per key.

As Flink's ``BatchGroupedReduceOperator``: the running value is kept in keyed state as in
streaming, nothing is emitted per record, and an event-time timer at +infinity per key emits the
key's final value when the end of input arrives (timestamped +infinity). The timers are ordinary
keyed timers, so the operator is exact however the input is split into epochs.
"""

from __future__ import annotations

from typing import Any

from flowpoint.api.time import MAX_WATERMARK
from flowpoint.state.key_identity import state_key
from flowpoint.tasks.keyed_process import OutputBuffer, TimerOp
from flowpoint.tasks.operators import ReduceOp, RollingAggOp
from flowpoint.tasks.timers import InternalTimerService


class _FinalPerKey(TimerOp):
    state: Any

    def open(self, ctx: Any) -> None:
        super().open(ctx)
        self.timers = InternalTimerService(self.backend, self, self._emit_final, self._emit_final)
        self.timers.open()
        self.buffer = OutputBuffer()

    def _run(self, pairs: list, backend: Any, out: list) -> None:
        super()._run(pairs, backend, out)  # type: ignore[misc]  # the streaming update of the state
        out.clear()
        register = self.timers.register_event_time_timer
        for key in {state_key(k): None for k, _ in pairs}:  # each key once, by key identity
            backend.current_key = key
            register(None, MAX_WATERMARK)
        backend.current_key = None

    def _emit_final(self, key: Any, namespace: Any, timestamp: int) -> None:
        value = self.state.value()
        if value is not None:
            self.buffer.values.append(value)
            self.buffer.timestamps.append(MAX_WATERMARK)


class BatchReduceOp(_FinalPerKey, ReduceOp):
    pass


class BatchRollingAggOp(_FinalPerKey, RollingAggOp):
    pass
