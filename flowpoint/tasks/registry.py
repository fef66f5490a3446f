"""Operator kind -> the class that runs it in a task."""

from __future__ import annotations

from typing import Any

from flowpoint.tasks.event_time import SideOutputOp, TimestampsOp
from flowpoint.tasks.operators import KEYED_OPERATORS, STATELESS_OPERATORS, KeyedOp

_STATELESS = {**STATELESS_OPERATORS, "timestamps": TimestampsOp, "side_output": SideOutputOp}


def _keyed() -> dict[str, Any]:
    try:  # TRANSITIONAL until keyed_process.py and window_operator.py land (helper-7)
        from flowpoint.tasks.keyed_process import KeyedProcessOp
        from flowpoint.tasks.window_operator import WindowOperator
    except ImportError:
        return {**KEYED_OPERATORS, "keyed_process": _TransitionalKeyedProcessOp}
    return {**KEYED_OPERATORS, "keyed_process": KeyedProcessOp, "window": WindowOperator}


class _TransitionalKeyedProcessOp(KeyedOp):
    def open(self, ctx: Any) -> None:
        super().open(ctx)
        backend = self.backend

        class Ctx:
            def get_current_key(self) -> Any:
                return backend.current_key

            def timestamp(self) -> None:
                return None

        self.ctx = Ctx()

    def _run(self, pairs: list, backend: Any, out: list) -> None:
        f = self.spec.function.process_element
        for key, value in pairs:
            backend.current_key = key
            r = f(value, self.ctx)
            if r is not None:
                out.extend(r)


def operator_class(kind: str, keyed: bool) -> Any:
    if keyed:
        return _keyed()[kind]
    return _STATELESS[kind]
