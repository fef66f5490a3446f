"""flowpoint: Flink's stateful stream processing model in Python, executing on Apache Spark."""

from flowpoint.api.aggregates import Aggregates
from flowpoint.api.async_io import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryPredicate,
    AsyncRetryStrategy,
)
from flowpoint.api.broadcast import (
    BaseBroadcastProcessFunction,
    BroadcastConnectedStream,
    BroadcastProcessFunction,
    BroadcastState,
    BroadcastStream,
    KeyedBroadcastProcessFunction,
    ReadOnlyBroadcastState,
)
from flowpoint.api.checkpointing import (
    CheckpointConfig,
    CheckpointingMode,
    ExternalizedCheckpointCleanup,
    ExternalizedCheckpointRetention,
)
from flowpoint.api.co_functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
)
from flowpoint.api.config import Configuration
from flowpoint.api.connected_streams import ConnectedStreams
from flowpoint.api.datastream import DataStream, DataStreamSink, KeyedStream
from flowpoint.api.environment import ExecutionConfig, StreamExecutionEnvironment
from flowpoint.api.execution_mode import RuntimeExecutionMode
from flowpoint.api.functions import (
    AggregateFunction,
    AllWindowFunction,
    CheckpointListener,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    KeySelector,
    MapFunction,
    OutputTag,
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
from flowpoint.api.operator_state import (
    CheckpointedFunction,
    FunctionInitializationContext,
    FunctionSnapshotContext,
    OperatorStateStore,
)
from flowpoint.api.restart import RestartStrategies, RestartStrategyConfiguration
from flowpoint.api.row import Row, RowKind
from flowpoint.api.serializer import TypeSerializer
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
from flowpoint.api.state_backends import (
    CheckpointStorage,
    EmbeddedRocksDBStateBackend,
    FileSystemCheckpointStorage,
    HashMapStateBackend,
    JobManagerCheckpointStorage,
    StateBackend,
)
from flowpoint.api.state_ttl import StateTtlConfig
from flowpoint.api.time import Duration, Instant, Time, TimeDomain
from flowpoint.api.types import TypeInformation, Types
from flowpoint.api.watermarks import (
    TimestampAssigner,
    Watermark,
    WatermarkGenerator,
    WatermarkOutput,
    WatermarkStrategy,
)
from flowpoint.api.windowed_stream import AllWindowedStream, WindowedStream
from flowpoint.api.windows import (
    ContinuousEventTimeTrigger,
    ContinuousProcessingTimeTrigger,
    CountEvictor,
    CountSlidingWindowAssigner,
    CountTrigger,
    CountTumblingWindowAssigner,
    CountWindow,
    CountWindowSerializer,
    DeltaEvictor,
    DynamicEventTimeSessionWindows,
    DynamicProcessingTimeSessionWindows,
    EventTimeSessionWindows,
    EventTimeTrigger,
    Evictor,
    GlobalWindow,
    GlobalWindows,
    GlobalWindowSerializer,
    MergingWindowAssigner,
    NeverTrigger,
    ProcessingTimeSessionWindows,
    ProcessingTimeTrigger,
    PurgingTrigger,
    SessionWindowTimeGapExtractor,
    SlidingEventTimeWindows,
    SlidingProcessingTimeWindows,
    TimeEvictor,
    TimestampedValue,
    TimeWindow,
    TimeWindowSerializer,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    TumblingProcessingTimeWindows,
    Window,
    WindowAssigner,
)
from flowpoint.connectors.clicks import ClickEventGenerator
from flowpoint.connectors.collection import CollectionSource
from flowpoint.connectors.datagen import (
    DataGeneratorSource,
    NumberSequenceSource,
    RateLimiterStrategy,
)
from flowpoint.connectors.file_sink import (
    BucketAssigner,
    Encoder,
    FileSink,
    OutputFileConfig,
    RollingPolicy,
)
from flowpoint.connectors.files import BulkFormat, FileFormat, FileSource, StreamFormat
from flowpoint.connectors.kafka import (
    ByteArraySchema,
    DeliveryGuarantee,
    JsonRowDeserializationSchema,
    JsonRowSerializationSchema,
    KafkaOffsetResetStrategy,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    KafkaTopicPartition,
    KafkaTopicSelector,
    RowFieldExtractorSchema,
    SimpleStringSchema,
)
from flowpoint.connectors.sinks import CollectSink, PrintSink, Sink
from flowpoint.driver.job import JobClient
from flowpoint.driver.job_status import JobExecutionResult, JobStatus
from flowpoint.errors import ConfigurationError, FlowpointError
from flowpoint.state_io import StateReader, StateWriter, state_reader, state_writer
from flowpoint.version import __version__ as __version__

__all__ = [
    "CheckpointConfig", "CheckpointListener", "CheckpointStorage", "CheckpointingMode", "ConfigurationError",
    "EmbeddedRocksDBStateBackend", "ExternalizedCheckpointCleanup", "ExternalizedCheckpointRetention",
    "FileSystemCheckpointStorage", "HashMapStateBackend", "JobManagerCheckpointStorage",
    "RestartStrategies", "RestartStrategyConfiguration", "StateBackend",
    "BulkFormat", "Encoder", "FileFormat", "FileSink", "FileSource", "StreamFormat",
    "AggregateFunction", "AggregatingState", "AggregatingStateDescriptor", "ClickEventGenerator",
    "CollectSink", "CollectionSource", "Configuration", "DataGeneratorSource", "DataStream",
    "DataStreamSink", "Duration", "FilterFunction", "FlatMapFunction", "FlowpointError", "JobClient",
    "JobExecutionResult", "JobStatus", "KeySelector", "KeyedProcessFunction", "KeyedStream",
    "ListState", "ListStateDescriptor", "MapFunction", "MapState", "MapStateDescriptor",
    "NumberSequenceSource", "PrintSink", "ProcessFunction", "RateLimiterStrategy", "ReduceFunction",
    "ReducingState", "ReducingStateDescriptor", "Row", "RuntimeContext", "Sink", "SinkFunction",
    "StreamExecutionEnvironment", "Types", "ValueState", "ValueStateDescriptor", "WatermarkStrategy",
    "AllWindowFunction", "OutputTag", "ProcessAllWindowFunction", "ProcessWindowFunction", "Time", "TimeDomain",
    "TimerService", "TimestampAssigner", "Watermark", "WatermarkGenerator", "WatermarkOutput", "WindowFunction",
    "Aggregates", "AllWindowedStream", "ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger",
    "CountEvictor", "CountTrigger", "DeltaEvictor", "EventTimeSessionWindows", "EventTimeTrigger", "Evictor",
    "GlobalWindow", "GlobalWindows", "ProcessingTimeSessionWindows", "ProcessingTimeTrigger", "PurgingTrigger",
    "SlidingEventTimeWindows", "SlidingProcessingTimeWindows", "TimeEvictor", "TimeWindow", "TimestampedValue",
    "Trigger", "TriggerResult", "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "WindowAssigner",
    "WindowedStream", "StateReader", "StateWriter", "state_reader", "state_writer",
    "BroadcastProcessFunction", "BroadcastState", "BroadcastStream", "CheckpointedFunction",
    "FunctionInitializationContext", "FunctionSnapshotContext", "KeyedBroadcastProcessFunction",
    "OperatorStateStore", "ReadOnlyBroadcastState",
    "JsonRowDeserializationSchema", "KafkaOffsetResetStrategy", "KafkaOffsetsInitializer", "KafkaSource",
    "KafkaTopicPartition", "SimpleStringSchema", "DeliveryGuarantee", "KafkaRecordSerializationSchema", "KafkaSink",
    "CountWindow", "ExecutionConfig", "MergingWindowAssigner", "RuntimeExecutionMode", "SessionWindowTimeGapExtractor",
    "TypeInformation", "Window", "CoFlatMapFunction", "CoMapFunction", "CoProcessFunction", "ConnectedStreams",
    "KeyedCoProcessFunction", "BroadcastConnectedStream", "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows", "NeverTrigger", "StateTtlConfig",
    "BucketAssigner", "OutputFileConfig", "RollingPolicy",
    "AsyncDataStream", "AsyncFunction", "AsyncRetryPredicate", "AsyncRetryStrategy", "Partitioner", "RowKind",
    "BaseBroadcastProcessFunction", "ByteArraySchema", "CountSlidingWindowAssigner", "CountTumblingWindowAssigner",
    "Instant", "JsonRowSerializationSchema", "KafkaTopicSelector", "RowFieldExtractorSchema",
    "TypeSerializer", "TimeWindowSerializer", "CountWindowSerializer", "GlobalWindowSerializer",
]
