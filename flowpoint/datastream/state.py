"""PyFlink's ``pyflink.datastream.state``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.broadcast import BroadcastState, ReadOnlyBroadcastState
from flowpoint.api.operator_state import OperatorStateStore
from flowpoint.api.state import (
    AggregatingState,
    AggregatingStateDescriptor,
    ListState,
    ListStateDescriptor,
    MapState,
    MapStateDescriptor,
    ReducingState,
    ReducingStateDescriptor,
    ValueState,
    ValueStateDescriptor,
)
from flowpoint.api.state_ttl import StateTtlConfig

__all__ = [
    "AggregatingState",
    "AggregatingStateDescriptor",
    "BroadcastState",
    "ListState",
    "ListStateDescriptor",
    "MapState",
    "MapStateDescriptor",
    "OperatorStateStore",
    "ReadOnlyBroadcastState",
    "ReducingState",
    "ReducingStateDescriptor",
    "StateTtlConfig",
    "ValueState",
    "ValueStateDescriptor",
]
