"""Operator kind -> the class that runs it in a task."""

from __future__ import annotations

from typing import Any

from flowpoint.tasks.event_time import SideOutputOp, TimestampsOp
from flowpoint.tasks.operators import KEYED_OPERATORS, STATELESS_OPERATORS

_STATELESS = {**STATELESS_OPERATORS, "timestamps": TimestampsOp, "side_output": SideOutputOp}


def _keyed() -> dict[str, Any]:
    from flowpoint.tasks.keyed_process import KeyedProcessOp
    from flowpoint.tasks.window_operator import WindowOperator

    return {**KEYED_OPERATORS, "keyed_process": KeyedProcessOp, "window": WindowOperator}


def operator_class(kind: str, keyed: bool) -> Any:
    if keyed:
        return _keyed()[kind]
    return _STATELESS[kind]
