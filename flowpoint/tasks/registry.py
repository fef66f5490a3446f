"""Operator kind -> the class that runs it in a task."""

from __future__ import annotations

from typing import Any

from flowpoint.tasks.event_time import SideOutputOp, TimestampsOp
from flowpoint.tasks.operators import KEYED_OPERATORS, STATELESS_OPERATORS


def _stateless() -> dict[str, Any]:
    from flowpoint.tasks.broadcast_process import BroadcastProcessOp

    return {**STATELESS_OPERATORS, "timestamps": TimestampsOp, "side_output": SideOutputOp, "broadcast_process": BroadcastProcessOp}


def _keyed() -> dict[str, Any]:
    from flowpoint.tasks.broadcast_process import KeyedBroadcastProcessOp
    from flowpoint.tasks.keyed_process import KeyedProcessOp
    from flowpoint.tasks.window_operator import WindowOperator

    return {**KEYED_OPERATORS, "keyed_process": KeyedProcessOp, "window": WindowOperator, "keyed_broadcast_process": KeyedBroadcastProcessOp}


def operator_class(kind: str, keyed: bool) -> Any:
    if keyed:
        return _keyed()[kind]
    return _stateless()[kind]
