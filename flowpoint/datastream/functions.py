"""PyFlink's ``pyflink.datastream.functions``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.api.async_io import AsyncFunction, AsyncRetryPredicate, AsyncRetryStrategy
from flowpoint.api.broadcast import (
    BaseBroadcastProcessFunction,
    BroadcastProcessFunction,
    KeyedBroadcastProcessFunction,
)
from flowpoint.api.co_functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
)
from flowpoint.api.functions import (
    AggregateFunction,
    AllWindowFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    Partitioner,
    ProcessAllWindowFunction,
    ProcessFunction,
    ProcessWindowFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    TimerService,
    WindowFunction,
)
from flowpoint.refused import ASYNC_DESCRIPTOR, SOURCE_FUNCTION, refusing

__all__ = [
    "AggregateFunction",
    "AllWindowFunction",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "BaseBroadcastProcessFunction",
    "BroadcastProcessFunction",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "FilterFunction",
    "FlatMapFunction",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "MapFunction",
    "Partitioner",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "SinkFunction",
    "TimerService",
    "WindowFunction",
]

__getattr__ = refusing(
    __name__, {"SourceFunction": SOURCE_FUNCTION, "AsyncFunctionDescriptor": ASYNC_DESCRIPTOR}
)
