"""Operator kind -> the class that runs it in a task.

The operator modules are imported in the functions below, when a task first builds its chain:
a Python worker loads only the operators its jobs run (asyncio only for async I/O, the window
operator only for windows)."""

from __future__ import annotations

from typing import Any

from flowpoint.tasks.event_time import SideOutputOp, TimestampsOp
from flowpoint.tasks.operators import KEYED_OPERATORS, STATELESS_OPERATORS


def _stateless() -> dict[str, Any]:
    # lazy: see the module's doc
    from flowpoint.tasks.async_wait import AsyncWaitOp
    from flowpoint.tasks.broadcast_process import BroadcastProcessOp
    from flowpoint.tasks.co_process import CoFlatMapOp, CoMapOp, CoProcessOp

    return {
        **STATELESS_OPERATORS, "timestamps": TimestampsOp, "side_output": SideOutputOp, "broadcast_process": BroadcastProcessOp,
        "co_map": CoMapOp, "co_flat_map": CoFlatMapOp, "co_process": CoProcessOp, "async_wait": AsyncWaitOp,
    }


def _keyed() -> dict[str, Any]:
    # lazy: see the module's doc
    from flowpoint.tasks.broadcast_process import KeyedBroadcastProcessOp
    from flowpoint.tasks.co_process import KeyedCoProcessOp
    from flowpoint.tasks.keyed_process import KeyedProcessOp
    from flowpoint.tasks.window_operator import WindowOperator

    return {
        **KEYED_OPERATORS, "keyed_process": KeyedProcessOp, "window": WindowOperator,
        "keyed_broadcast_process": KeyedBroadcastProcessOp, "keyed_co_process": KeyedCoProcessOp,
    }


def operator_class(kind: str, keyed: bool, batch: bool = False) -> Any:
    if keyed:
        if batch and kind in ("reduce", "rolling_agg"):  # final results only (execution_mode.py)
            # lazy: BATCH mode only
            from flowpoint.tasks.batch_reduce import BatchReduceOp, BatchRollingAggOp

            return BatchReduceOp if kind == "reduce" else BatchRollingAggOp
        return _keyed()[kind]
    return _stateless()[kind]
