"""Operator kind -> the class that runs it in a task."""

from __future__ import annotations

from typing import Any

from flowpoint.tasks.async_wait import AsyncWaitOp
from flowpoint.tasks.batch_reduce import BatchReduceOp, BatchRollingAggOp
from flowpoint.tasks.broadcast_process import BroadcastProcessOp, KeyedBroadcastProcessOp
from flowpoint.tasks.co_process import CoFlatMapOp, CoMapOp, CoProcessOp, KeyedCoProcessOp
from flowpoint.tasks.event_time import SideOutputOp, TimestampsOp
from flowpoint.tasks.keyed_process import KeyedProcessOp
from flowpoint.tasks.operators import KEYED_OPERATORS, STATELESS_OPERATORS
from flowpoint.tasks.window_operator import WindowOperator

STATELESS: dict[str, Any] = {
    **STATELESS_OPERATORS, "timestamps": TimestampsOp, "side_output": SideOutputOp, "broadcast_process": BroadcastProcessOp,
    "co_map": CoMapOp, "co_flat_map": CoFlatMapOp, "co_process": CoProcessOp, "async_wait": AsyncWaitOp,
}
KEYED: dict[str, Any] = {
    **KEYED_OPERATORS, "keyed_process": KeyedProcessOp, "window": WindowOperator,
    "keyed_broadcast_process": KeyedBroadcastProcessOp, "keyed_co_process": KeyedCoProcessOp,
}


def operator_class(kind: str, keyed: bool, batch: bool = False) -> Any:
    if keyed:
        if batch and kind in ("reduce", "rolling_agg"):  # final results only (execution_mode.py)
            return BatchReduceOp if kind == "reduce" else BatchRollingAggOp
        return KEYED[kind]
    return STATELESS[kind]
