"""PyFlink's ``pyflink.datastream``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.api.async_io import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryPredicate,
    AsyncRetryStrategy,
)
from flowpoint.api.broadcast import (
    BroadcastConnectedStream,
    BroadcastProcessFunction,
    BroadcastStream,
    KeyedBroadcastProcessFunction,
)
from flowpoint.api.checkpointing import (
    CheckpointConfig,
    CheckpointingMode,
    ExternalizedCheckpointRetention,
)
from flowpoint.api.co_functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
)
from flowpoint.api.connected_streams import ConnectedStreams
from flowpoint.api.datastream import DataStream, DataStreamSink, KeyedStream
from flowpoint.api.environment import StreamExecutionEnvironment
from flowpoint.api.execution_mode import RuntimeExecutionMode
from flowpoint.api.functions import (
    AggregateFunction,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    OutputTag,
    Partitioner,
    ProcessFunction,
    ProcessWindowFunction,
    ReduceFunction,
    RuntimeContext,
    SinkFunction,
    TimerService,
    WindowFunction,
)
from flowpoint.api.state_backends import (
    CheckpointStorage,
    EmbeddedRocksDBStateBackend,
    FileSystemCheckpointStorage,
    HashMapStateBackend,
    JobManagerCheckpointStorage,
    StateBackend,
)
from flowpoint.api.time import TimeDomain
from flowpoint.api.windowed_stream import WindowedStream
from flowpoint.api.windows import (
    CountWindow,
    GlobalWindow,
    MergingWindowAssigner,
    TimeWindow,
    Trigger,
    TriggerResult,
    Window,
    WindowAssigner,
)
from flowpoint.refused import (
    CUSTOM_BACKEND,
    CUSTOM_STORAGE,
    PREDEFINED_OPTIONS,
    SLOT_SHARING,
    SOURCE_FUNCTION,
    refusing,
)

__all__ = [
    "AggregateFunction",
    "AsyncDataStream",
    "AsyncFunction",
    "AsyncRetryPredicate",
    "AsyncRetryStrategy",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "CheckpointConfig",
    "CheckpointStorage",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ConnectedStreams",
    "CountWindow",
    "DataStream",
    "DataStreamSink",
    "EmbeddedRocksDBStateBackend",
    "ExternalizedCheckpointRetention",
    "FileSystemCheckpointStorage",
    "FilterFunction",
    "FlatMapFunction",
    "GlobalWindow",
    "HashMapStateBackend",
    "JobManagerCheckpointStorage",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "MapFunction",
    "MergingWindowAssigner",
    "OutputTag",
    "Partitioner",
    "ProcessFunction",
    "ProcessWindowFunction",
    "ReduceFunction",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "SinkFunction",
    "StateBackend",
    "StreamExecutionEnvironment",
    "TimeDomain",
    "TimeWindow",
    "TimerService",
    "Trigger",
    "TriggerResult",
    "Window",
    "WindowAssigner",
    "WindowFunction",
    "WindowedStream",
]

__getattr__ = refusing(
    __name__,
    {
        "CustomStateBackend": CUSTOM_BACKEND,
        "PredefinedOptions": PREDEFINED_OPTIONS,
        "CustomCheckpointStorage": CUSTOM_STORAGE,
        "SourceFunction": SOURCE_FUNCTION,
        "SlotSharingGroup": SLOT_SHARING,
        "MemorySize": SLOT_SHARING,
    },
)
