"""``DataStream`` and ``KeyedStream``: the PyFlink DataStream API, recorded as a job graph."""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, Any

from flowpoint.api import windowed_stream
from flowpoint.api.functions import (
    FieldKeySelector,
    FilterFunction,
    FilterFunctionWrapper,
    FlatMapFunction,
    FlatMapFunctionWrapper,
    KeyedProcessFunction,
    KeySelector,
    KeySelectorWrapper,
    MapFunction,
    MapFunctionWrapper,
    OutputTag,
    Partitioner,
    PartitionerWrapper,
    ProcessFunction,
    ReduceFunction,
    ReduceFunctionWrapper,
    SinkFunction,
    SinkFunctionWrapper,
    wrap,
)
from flowpoint.api.row import Row
from flowpoint.api.types import TupleType, TypeInformation
from flowpoint.api.watermarks import WatermarkStrategy
from flowpoint.connectors.sinks import CollectSink, FunctionSink, PrintSink
from flowpoint.connectors.sinks import Sink as SinkBase
from flowpoint.errors import ConfigurationError, JobGraphError
from flowpoint.graph.transformation import Transformation

if TYPE_CHECKING:
    from flowpoint.api.environment import StreamExecutionEnvironment
    from flowpoint.api.watermarks import WatermarkStrategy
    from flowpoint.connectors.sinks import Sink


class DataStream:
    """A stream of records. Every method returns a new stream; nothing runs until ``execute``."""

    def __init__(self, env: StreamExecutionEnvironment, transformation: Transformation):
        self._env = env
        self._t = transformation

    # -- identity and parallelism ------------------------------------------------------------

    def get_name(self) -> str:
        return self._t.name

    def name(self, name: str) -> DataStream:
        self._t.name = name
        return self

    def uid(self, uid: str) -> DataStream:
        """Stable identity of this operator: state is matched to operators by uid on restore."""
        self._t.set_uid(uid)
        return self

    def set_description(self, description: str) -> DataStream:
        self._t.options["description"] = description
        return self

    def get_type(self) -> TypeInformation | None:
        return self._t.output_type

    def set_parallelism(self, parallelism: int) -> DataStream:
        if self._t.is_virtual:
            msg = f"cannot set the parallelism of {self._t.kind} {self._t.name!r}; set it on the operator that follows"
            raise ConfigurationError(msg)
        if self._t.kind == "source" and not self._t.source.is_parallel() and parallelism != 1:
            msg = f"source {self._t.name!r} is not parallel; its parallelism must be 1, got {parallelism}"
            raise ConfigurationError(msg)
        if not isinstance(parallelism, int) or parallelism < 1:
            msg = f"parallelism of {self._t.name!r} must be a positive int; got {parallelism!r}"
            raise ConfigurationError(msg)
        self._t.parallelism = parallelism
        return self

    def get_parallelism(self) -> int:
        return self._t.parallelism or self._env.get_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        if not isinstance(max_parallelism, int) or max_parallelism < 1:
            msg = f"max parallelism of {self._t.name!r} must be a positive int; got {max_parallelism!r}"
            raise ConfigurationError(msg)
        self._t.max_parallelism = max_parallelism
        return self

    def get_execution_environment(self) -> StreamExecutionEnvironment:
        return self._env

    def get_execution_config(self) -> Any:
        return self._env.get_config()

    def force_non_parallel(self) -> DataStream:
        """Run this operator with parallelism 1 (and max parallelism 1)."""
        self.set_parallelism(1)
        self._t.max_parallelism = 1
        return self

    def slot_sharing_group(self, slot_sharing_group: Any) -> DataStream:
        """Accepted for PyFlink programs: Spark schedules the tasks; there are no slots."""
        return self

    def set_buffer_timeout(self, timeout_millis: int) -> DataStream:
        """Accepted for PyFlink programs: records move between tasks at epoch boundaries."""
        return self

    def disable_chaining(self) -> DataStream:
        self._t.options["chaining"] = False
        return self

    def start_new_chain(self) -> DataStream:
        self._t.options["new_chain"] = True
        return self

    # -- transformations -----------------------------------------------------------------------

    def _add(self, kind: str, name: str, function: Any = None, output_type: TypeInformation | None = None, **kw: Any) -> Transformation:
        t = Transformation(kind=kind, name=name, inputs=[self._t], function=function, output_type=output_type, **kw)
        self._env._add_transformation(t)
        return t

    def map(self, func: MapFunction | Any, output_type: TypeInformation | None = None) -> DataStream:
        fn = wrap(func, MapFunction, MapFunctionWrapper, "map")
        return DataStream(self._env, self._add("map", "Map", fn, output_type))

    def flat_map(self, func: FlatMapFunction | Any, output_type: TypeInformation | None = None) -> DataStream:
        fn = wrap(func, FlatMapFunction, FlatMapFunctionWrapper, "flat_map")
        return DataStream(self._env, self._add("flat_map", "FlatMap", fn, output_type))

    def filter(self, func: FilterFunction | Any) -> DataStream:
        fn = wrap(func, FilterFunction, FilterFunctionWrapper, "filter")
        return DataStream(self._env, self._add("filter", "Filter", fn, self._t.output_type))

    def process(self, func: ProcessFunction, output_type: TypeInformation | None = None) -> DataStream:
        if isinstance(func, KeyedProcessFunction):
            msg = f"{type(func).__name__} is a KeyedProcessFunction: call key_by(...) before process(...)"
            raise JobGraphError(msg)
        if not isinstance(func, ProcessFunction):
            msg = f"process() needs a ProcessFunction; got {type(func).__name__}"
            raise JobGraphError(msg)
        return DataStream(self._env, self._add("process", "Process", func, output_type))

    def assign_timestamps_and_watermarks(self, watermark_strategy: WatermarkStrategy) -> DataStream:
        """Give records event timestamps and the stream watermarks (seed 000). Runs one watermark
        generator per source split when chained to the source, else one per parallel instance;
        watermarks from upstream are replaced, except the end of input."""
        if not isinstance(watermark_strategy, WatermarkStrategy):
            msg = (
                f"assign_timestamps_and_watermarks() needs a WatermarkStrategy (e.g. WatermarkStrategy"
                f".for_bounded_out_of_orderness(Duration.of_seconds(5))); got {type(watermark_strategy).__name__}"
            )
            raise JobGraphError(msg)
        t = self._add("timestamps", "Timestamps/Watermarks", None, self._t.output_type)
        t.options["watermark_strategy"] = watermark_strategy
        return DataStream(self._env, t)

    def get_side_output(self, output_tag: OutputTag) -> DataStream:
        """The records this operator emitted with ``ctx.output(output_tag, value)`` (or its late
        data, for a window with ``side_output_late_data(output_tag)``)."""
        if not isinstance(output_tag, OutputTag):
            msg = f"get_side_output() needs an OutputTag; got {type(output_tag).__name__}"
            raise JobGraphError(msg)
        if self._t.is_virtual or self._t.kind in ("sink", "source"):
            msg = f"get_side_output({output_tag.tag_id!r}) on {self._t.describe()}: only operators (process, window, ...) have side outputs"
            raise JobGraphError(msg)
        t = self._add("side_output", f"SideOutput({output_tag.tag_id})", None, output_tag.type_info)
        t.options["tag_id"] = output_tag.tag_id
        return DataStream(self._env, t)

    def window_all(self, window_assigner: Any) -> Any:
        """Non-keyed windows: all records in one task (parallelism 1), as in Flink (seed 003)."""
        return windowed_stream.window_all(self, window_assigner)

    def count_window_all(self, size: int, slide: int | None = None) -> Any:
        return windowed_stream.count_window_all(self, size, slide)

    def key_by(self, key_selector: KeySelector | Any, key_type: TypeInformation | None = None) -> KeyedStream:
        selector = _key_selector(key_selector, "key_by")
        t = Transformation(kind="key_by", name="KeyBy", inputs=[self._t], key_selector=selector, output_type=self._t.output_type)
        t.options["key_type"] = key_type
        self._env._add_transformation(t)
        return KeyedStream(self._env, t)

    def union(self, *streams: DataStream) -> DataStream:
        for s in streams:
            if s._env is not self._env:
                msg = "union() of streams from different environments"
                raise JobGraphError(msg)
        t = Transformation(kind="union", name="Union", inputs=[self._t, *(s._t for s in streams)], output_type=self._t.output_type)
        self._env._add_transformation(t)
        return DataStream(self._env, t)

    def broadcast(self, *broadcast_state_descriptors: Any) -> Any:
        """Without arguments: this stream with broadcast partitioning, every record going to
        every parallel instance of the next operator. With broadcast state descriptors
        (``MapStateDescriptor``s): a broadcast stream to use in ``other.connect(this)``."""
        # in the function: the stream classes import each other
        from flowpoint.api.broadcast import BroadcastStream

        if not broadcast_state_descriptors or broadcast_state_descriptors == (None,):
            t = Transformation(kind="broadcast", name="Broadcast", inputs=[self._t], output_type=self._t.output_type)
            self._env._add_transformation(t)
            return DataStream(self._env, t)
        return BroadcastStream(self, broadcast_state_descriptors)

    def connect(self, ds: Any) -> Any:
        """Connect another stream: ``map``/``flat_map``/``process`` with a two-input function
        (:class:`~flowpoint.api.connected_streams.ConnectedStreams`), or a broadcast stream:
        ``.process(BroadcastProcessFunction)`` (keyed stream: ``KeyedBroadcastProcessFunction``)."""
        # in the function: the stream classes import each other
        from flowpoint.api.broadcast import BroadcastConnectedStream, BroadcastStream
        from flowpoint.api.connected_streams import ConnectedStreams

        if isinstance(ds, BroadcastStream):
            return BroadcastConnectedStream(self, ds)
        if isinstance(ds, DataStream):
            return ConnectedStreams(self, ds)
        msg = f"connect() takes a DataStream or a broadcast stream (other.broadcast(MapStateDescriptor(...))); got {type(ds).__name__}"
        raise JobGraphError(msg)

    def rebalance(self) -> DataStream:
        t = Transformation(kind="rebalance", name="Rebalance", inputs=[self._t], output_type=self._t.output_type)
        self._env._add_transformation(t)
        return DataStream(self._env, t)

    shuffle = rebalance
    rescale = rebalance  # an even spread over the next operator's instances

    def forward(self) -> DataStream:
        """Keep records in the same parallel instance: the next operator must have this one's
        parallelism (it is chained to it)."""
        t = Transformation(kind="forward", name="Forward", inputs=[self._t], output_type=self._t.output_type)
        self._env._add_transformation(t)
        return DataStream(self._env, t)

    def partition_custom(self, partitioner: Partitioner | Any, key_selector: KeySelector | Any) -> DataStream:
        """Send each record to instance ``partitioner.partition(key_selector(record), n)`` of the
        next operator (``partitioner`` may be a ``(key, num_partitions) -> int`` callable)."""
        p = wrap(partitioner, Partitioner, PartitionerWrapper, "partition_custom")
        selector = _key_selector(key_selector, "partition_custom")
        t = Transformation(kind="partition_custom", name="PartitionCustom", inputs=[self._t], key_selector=selector, output_type=self._t.output_type)
        t.options["partitioner"] = p
        self._env._add_transformation(t)
        return DataStream(self._env, t)

    def project(self, *field_indexes: int) -> DataStream:
        """Tuples of the given fields of each tuple record (``project(0, 2)``)."""
        if not field_indexes or not all(isinstance(i, int) and not isinstance(i, bool) for i in field_indexes):
            msg = f"project() takes field positions (ints); got {field_indexes!r}"
            raise ConfigurationError(msg)

        in_type = self.get_type()
        out_type = TupleType([in_type.field_types[i] for i in field_indexes]) if isinstance(in_type, TupleType) else None
        return self.map(_Project(field_indexes), output_type=out_type).name("Projection")

    # -- sinks ---------------------------------------------------------------------------------

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        return self.sink_to(PrintSink(sink_identifier, type_info=self.get_type()), name="Print to Std. Out")

    def sink_to(self, sink: Sink, name: str | None = None) -> DataStreamSink:
        if not isinstance(sink, SinkBase):
            msg = f"sink_to() needs a flowpoint Sink (FileSink, CollectSink, ...); got {type(sink).__name__}"
            if hasattr(sink, "build"):
                msg += "; call .build() on the builder first"
            raise JobGraphError(msg)
        if hasattr(sink, "input_type"):
            sink.input_type = self.get_type()  # e.g. how FileSink's simple_string_encoder writes values
        t = self._add("sink", name or sink.default_name(), None, None, sink=sink)
        return DataStreamSink(self._env, t)

    def add_sink(self, sink_func: SinkFunction | Any) -> DataStreamSink:
        fn = wrap(sink_func, SinkFunction, SinkFunctionWrapper, "add_sink")
        return self.sink_to(FunctionSink(fn), name="Sink")

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None):
        """Run the job and iterate over this stream's records (PyFlink's ``execute_and_collect``);
        with ``limit``, as PyFlink: a list of the first ``limit`` records, the job cancelled once
        they came (or all of them, if the job ends first)."""
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            # PyFlink (Flink's DataStream.executeAndCollect) refuses 0 too: "Limit must be greater than 0"
            msg = f"Limit must be greater than 0: execute_and_collect(limit=...) of {self._t.name!r} needs a positive int; got {limit!r}"
            raise ConfigurationError(msg)
        sink = CollectSink(streaming=True)
        self.sink_to(sink, name="Collect")
        client = self._env.execute_async(job_execution_name or self._env._default_job_name())
        records = sink.iterator(client, limit)
        if limit is None:
            return records
        with records:
            return list(records)


class DataStreamSink(DataStream):
    """Returned by sinks; supports ``name``, ``uid`` and ``set_parallelism``."""


class KeyedStream(DataStream):
    """A stream partitioned by key: keyed state and per-key aggregations are available."""

    class AccumulateType(Enum):
        """The rolling aggregations (PyFlink's names for ``min``, ``max``, ``min_by``, ``max_by``, ``sum``)."""

        MIN = 0
        MAX = 1
        MIN_BY = 2
        MAX_BY = 3
        SUM = 4

    def print(self, sink_identifier: str | None = None) -> DataStreamSink:
        """As PyFlink's ``KeyedStream.print``: the values, without the sink identifier (PyFlink
        drops it; docs/pyflink.md)."""
        return super().print()

    def execute_and_collect(self, job_execution_name: str | None = None, limit: int | None = None):
        """As PyFlink's on a keyed stream: each record as ``Row(f0=key, f1=value)`` (PyFlink's
        keyed stream carries its records so)."""
        class WithKey(KeyedProcessFunction):
            def process_element(self, value: Any, ctx: Any) -> Any:
                yield Row(f0=ctx.get_current_key(), f1=value)

        return self.process(WithKey()).name("KeyedStream values").execute_and_collect(job_execution_name, limit)

    # key_by is not an operator: naming it, giving it a uid or a parallelism is an error, as in
    # PyFlink (set them on the operator that follows)
    def _unsupported(self, what: str) -> Any:
        msg = f"{what} for KeyedStream is not supported (key_by is a partitioning, not an operator): call it on the operator that follows key_by(...)"
        raise JobGraphError(msg)

    def name(self, name: str) -> DataStream:
        return self._unsupported("Set name")

    def get_name(self) -> str:
        return self._unsupported("Get name")

    def uid(self, uid: str) -> DataStream:
        return self._unsupported("Set uid")

    def set_uid_hash(self, uid_hash: str) -> DataStream:
        return self._unsupported("Set uid hash")

    def set_parallelism(self, parallelism: int) -> DataStream:
        return self._unsupported("Set parallelism")

    def set_max_parallelism(self, max_parallelism: int) -> DataStream:
        return self._unsupported("Set max parallelism")

    def force_non_parallel(self) -> DataStream:
        return self._unsupported("Set force non-parallel")

    def set_buffer_timeout(self, timeout_millis: int) -> DataStream:
        return self._unsupported("Set buffer timeout")

    def start_new_chain(self) -> DataStream:
        return self._unsupported("Start new chain")

    def disable_chaining(self) -> DataStream:
        return self._unsupported("Disable chaining")

    def slot_sharing_group(self, slot_sharing_group: Any) -> DataStream:
        return self._unsupported("Setting slot sharing group")

    # a keyed stream is partitioned by its key: another partitioning is refused, as in Flink and
    # PyFlink: PyFlink's message exactly (str(e)), as a FlowpointError, which an ``except
    # Exception`` catches as it catches PyFlink's Exception; a note names the call and the way out
    def _partitioned(self, method: str) -> Any:
        error = JobGraphError("Cannot override partitioning for KeyedStream.")
        error.add_note(
            f"{method}() on the KeyedStream of key_by(...) after {self._t.inputs[0].name!r}: apply the keyed operation first "
            f"(process, reduce, window, ...) and partition its output, or call {method}() before key_by(...)"
        )
        raise error

    def shuffle(self) -> DataStream:
        return self._partitioned("shuffle")

    def rescale(self) -> DataStream:
        return self._partitioned("rescale")

    def rebalance(self) -> DataStream:
        return self._partitioned("rebalance")

    def forward(self) -> DataStream:
        return self._partitioned("forward")

    def broadcast(self, *args: Any) -> Any:
        return self._partitioned("broadcast")

    def partition_custom(self, partitioner: Partitioner | Any, key_selector: KeySelector | Any) -> DataStream:
        return self._partitioned("partition_custom")

    def _keyed(self, kind: str, name: str, function: Any, output_type: TypeInformation | None, **options: Any) -> DataStream:
        t = self._add(kind, name, function, output_type)
        t.options.update(options)
        return DataStream(self._env, t)

    def process(self, func: KeyedProcessFunction | ProcessFunction, output_type: TypeInformation | None = None) -> DataStream:  # type: ignore[override]
        if not isinstance(func, (KeyedProcessFunction, ProcessFunction)):
            msg = f"process() on a KeyedStream needs a KeyedProcessFunction; got {type(func).__name__}"
            raise JobGraphError(msg)
        return self._keyed("keyed_process", "KeyedProcess", func, output_type)

    def reduce(self, func: ReduceFunction | Any) -> DataStream:
        fn = wrap(func, ReduceFunction, ReduceFunctionWrapper, "reduce")
        return self._keyed("reduce", "Keyed Reduce", fn, self._t.output_type)

    def _rolling(self, agg: str, field: int | str) -> DataStream:
        if not isinstance(field, (int, str)):
            msg = f"{agg}() takes a field position (int) or name (str); got {field!r}"
            raise ConfigurationError(msg)
        return self._keyed("rolling_agg", agg.capitalize(), None, self._t.output_type, agg=agg, field=field)

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        return self._rolling("sum", position_to_sum)

    def min(self, position_to_min: int | str = 0) -> DataStream:
        return self._rolling("min", position_to_min)

    def max(self, position_to_max: int | str = 0) -> DataStream:
        return self._rolling("max", position_to_max)

    def min_by(self, position_to_min_by: int | str = 0) -> DataStream:
        return self._rolling("min_by", position_to_min_by)

    def max_by(self, position_to_max_by: int | str = 0) -> DataStream:
        return self._rolling("max_by", position_to_max_by)

    def window(self, window_assigner: Any) -> Any:
        """Keyed windows: ``.window(TumblingEventTimeWindows.of(Time.minutes(1)))``."""
        return windowed_stream.window(self, window_assigner)

    def count_window(self, size: int, slide: int | None = None) -> Any:
        """Windows of ``size`` records per key (sliding by ``slide`` records if given)."""
        return windowed_stream.count_window(self, size, slide)

    # map/flat_map/filter on a KeyedStream run keyed (their functions may use keyed state)
    def map(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        fn = wrap(func, MapFunction, MapFunctionWrapper, "map")
        return self._keyed("keyed_map", "Map", fn, output_type)

    def flat_map(self, func: Any, output_type: TypeInformation | None = None) -> DataStream:
        fn = wrap(func, FlatMapFunction, FlatMapFunctionWrapper, "flat_map")
        return self._keyed("keyed_flat_map", "FlatMap", fn, output_type)

    def filter(self, func: Any) -> DataStream:
        fn = wrap(func, FilterFunction, FilterFunctionWrapper, "filter")
        return self._keyed("keyed_filter", "Filter", fn, self._t.output_type)


class _Project(MapFunction):
    def __init__(self, fields: tuple[int, ...]):
        self.fields = fields

    def map(self, value: Any) -> tuple:
        return tuple(value[i] for i in self.fields)


def _key_selector(key_selector: Any, method: str) -> KeySelector:
    """A KeySelector from what PyFlink accepts: a field position or name (or a list of them), a
    KeySelector, or a callable."""
    if isinstance(key_selector, (int, str)) or (
        isinstance(key_selector, (list, tuple)) and key_selector and all(isinstance(f, (int, str)) for f in key_selector)
    ):
        return FieldKeySelector(key_selector)
    return wrap(key_selector, KeySelector, KeySelectorWrapper, method)
