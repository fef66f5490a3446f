"""PyFlink 2.3's public module tree, imported from flowpoint: a program ports by renaming
``pyflink`` to ``flowpoint``.

``pyflink_modules.json`` is PyFlink's tree as recorded from the apache-flink 2.3.0 wheel by
``record_modules.py`` (every module of ``pyflink.datastream``, ``pyflink.common`` and
``pyflink.metrics``, its public names, the public classes nested in them, and ``Types``'s
factories). Every module imports under ``flowpoint``; every name either works or raises an
ImportError saying why it cannot work on Spark and what to use instead.
"""

from __future__ import annotations

import importlib
import json
from pathlib import Path

import pytest

from flowpoint.errors import UnsupportedApiError

TREE = json.loads((Path(__file__).resolve().parent / "pyflink_modules.json").read_text())
MODULES = sorted(TREE["modules"])


def renamed(pyflink_path: str) -> str:
    return "flowpoint" + pyflink_path[len("pyflink"):]


def lookup(module: str, name: str) -> tuple[object | None, ImportError | None]:
    try:
        return getattr(importlib.import_module(renamed(module)), name), None
    except ImportError as e:
        return None, e


# the names a DataStream program is made of: each must work, none may be refused
CORE = {
    "pyflink.datastream": [
        "StreamExecutionEnvironment", "DataStream", "KeyedStream", "WindowedStream", "ConnectedStreams", "BroadcastStream",
        "BroadcastConnectedStream", "DataStreamSink", "AsyncDataStream", "OutputTag", "RuntimeExecutionMode", "CheckpointingMode",
        "CheckpointConfig", "HashMapStateBackend", "EmbeddedRocksDBStateBackend", "FileSystemCheckpointStorage", "TimeDomain",
    ],
    "pyflink.datastream.functions": [
        "MapFunction", "FlatMapFunction", "FilterFunction", "ReduceFunction", "AggregateFunction", "KeySelector", "Partitioner",
        "SinkFunction", "ProcessFunction", "KeyedProcessFunction", "CoMapFunction", "CoFlatMapFunction", "CoProcessFunction",
        "KeyedCoProcessFunction", "WindowFunction", "AllWindowFunction", "ProcessWindowFunction", "ProcessAllWindowFunction",
        "BaseBroadcastProcessFunction", "BroadcastProcessFunction", "KeyedBroadcastProcessFunction", "AsyncFunction",
        "RuntimeContext", "TimerService",
    ],
    "pyflink.datastream.state": [
        "ValueStateDescriptor", "ListStateDescriptor", "MapStateDescriptor", "ReducingStateDescriptor",
        "AggregatingStateDescriptor", "ValueState", "ListState", "MapState", "ReducingState", "AggregatingState",
        "BroadcastState", "ReadOnlyBroadcastState", "StateTtlConfig", "OperatorStateStore",
    ],
    "pyflink.datastream.window": [
        "TumblingEventTimeWindows", "TumblingProcessingTimeWindows", "SlidingEventTimeWindows", "SlidingProcessingTimeWindows",
        "EventTimeSessionWindows", "ProcessingTimeSessionWindows", "DynamicEventTimeSessionWindows",
        "DynamicProcessingTimeSessionWindows", "GlobalWindows", "CountTumblingWindowAssigner", "CountSlidingWindowAssigner",
        "TimeWindow", "CountWindow", "GlobalWindow", "Trigger", "TriggerResult", "EventTimeTrigger", "ProcessingTimeTrigger",
        "CountTrigger", "PurgingTrigger", "ContinuousEventTimeTrigger", "ContinuousProcessingTimeTrigger", "NeverTrigger",
        "WindowAssigner", "MergingWindowAssigner", "SessionWindowTimeGapExtractor",
    ],
    "pyflink.common": [
        "Types", "TypeInformation", "WatermarkStrategy", "Duration", "Time", "Instant", "Row", "RowKind", "Configuration",
        "ExecutionConfig", "SimpleStringSchema", "ByteArraySchema", "Encoder", "RestartStrategies", "JobClient", "JobStatus",
    ],
    "pyflink.common.watermark_strategy": ["WatermarkStrategy", "TimestampAssigner"],
    "pyflink.common.serialization": ["SimpleStringSchema", "RowFieldExtractorSchema", "SerializationSchema", "DeserializationSchema"],
    "pyflink.datastream.connectors.kafka": [
        "KafkaSource", "KafkaSink", "KafkaRecordSerializationSchema", "KafkaOffsetsInitializer", "KafkaOffsetResetStrategy",
        "KafkaTopicPartition", "KafkaTopicSelector", "KafkaSourceBuilder", "KafkaSinkBuilder",
    ],
    "pyflink.datastream.connectors": ["DeliveryGuarantee", "Source", "Sink"],
    "pyflink.datastream.connectors.file_system": [
        "FileSource", "FileSink", "OutputFileConfig", "RollingPolicy", "BucketAssigner", "StreamFormat", "BulkFormat",
    ],
    "pyflink.datastream.connectors.number_seq": ["NumberSequenceSource"],
    "pyflink.datastream.formats.json": ["JsonRowDeserializationSchema", "JsonRowSerializationSchema"],
    "pyflink.metrics": ["MetricGroup", "Metric", "Counter", "Meter", "Distribution"],
}


def test_the_recording_is_pyflink_2_3s():
    assert "apache-flink==2.3.0" in TREE["recorded_from"]
    assert len(MODULES) > 50 and "pyflink.datastream.connectors.kafka" in MODULES and "pyflink.common.typeinfo" in MODULES


@pytest.mark.parametrize("module", MODULES)
def test_every_pyflink_module_imports_from_flowpoint(module):
    m = importlib.import_module(renamed(module))  # never ModuleNotFoundError
    assert m.__name__ == renamed(module)
    namespace: dict = {}
    exec(f"from {renamed(module)} import *", namespace)  # noqa: S102 - __all__ holds only names that work
    assert set(namespace) - {"__builtins__"} == set(getattr(m, "__all__", ()))


def test_every_pyflink_name_works_or_says_what_to_use_instead(capsys):
    works, refused = [], []
    for module, names in TREE["modules"].items():
        for name in names:
            obj, error = lookup(module, name)
            if error is None:
                works.append(f"{module}.{name}")
                continue
            assert isinstance(error, UnsupportedApiError), f"{module}.{name}: {error!r}"
            text = str(error)
            assert text.startswith(f"cannot import name {name!r} from {renamed(module)!r}: "), text
            why, _, instead = text.split(": ", 1)[1].partition("; use ")
            assert why.strip() and len(instead.strip()) > 10, f"{module}.{name} is refused without a reason and an alternative: {text}"
            refused.append(f"{module}.{name}")
    with capsys.disabled():
        print(f"\nPyFlink 2.3 names: {len(works)} work in flowpoint, {len(refused)} refused with an alternative")
    assert len(works) + len(refused) == sum(map(len, TREE["modules"].values()))


def test_the_from_import_statement_gives_the_reason():
    with pytest.raises(ImportError, match=r"cannot import name 'JdbcSink' .*no JVM; use a SinkFunction"):
        exec("from flowpoint.datastream.connectors.jdbc import JdbcSink")  # noqa: S102
    with pytest.raises(AttributeError):  # a name PyFlink does not have either stays an AttributeError
        importlib.import_module("flowpoint.datastream.window").NoSuchAssigner  # noqa: B018


@pytest.mark.parametrize("module", sorted(CORE))
def test_the_core_datastream_names_all_work(module):
    assert set(CORE[module]) <= set(TREE["modules"][module]), "a core name PyFlink 2.3 does not have"
    flat = importlib.import_module("flowpoint")
    for name in CORE[module]:
        obj, error = lookup(module, name)
        assert error is None, f"{module}.{name} is refused: {error}"
        assert obj is getattr(flat, name, obj), f"{module}.{name} is not flowpoint.{name}"  # one class under both paths


def test_the_nested_classes_of_working_classes_exist():
    missing = []
    for qualified, nested in TREE["nested_classes"].items():
        module, _, cls_name = qualified.rpartition(".")
        cls, error = lookup(module, cls_name)
        if error is not None:
            continue  # the class itself is refused (checked above)
        missing += [f"{qualified}.{n}" for n in nested if not isinstance(getattr(cls, n, None), type)]
    assert not missing


def test_every_types_factory_exists():
    from flowpoint.common.typeinfo import TypeInformation, Types

    one = Types.INT()
    for name in TREE["types"]:
        factory = getattr(Types, name)
        if name in ("ROW", "TUPLE"):
            made = factory([one])
        elif name == "ROW_NAMED":
            made = factory(["a"], [one])
        elif name == "MAP":
            made = factory(one, one)
        elif name in ("PRIMITIVE_ARRAY", "BASIC_ARRAY", "OBJECT_ARRAY", "LIST"):
            made = factory(one)
        else:
            made = factory()
        assert isinstance(made, TypeInformation), name


def test_the_table_api_is_refused_with_an_alternative():
    for path in ("flowpoint.table", "flowpoint.table.expressions"):
        with pytest.raises(UnsupportedApiError, match="not its Table API.*; use the DataStream API") as info:
            importlib.import_module(path)
        assert not isinstance(info.value, ModuleNotFoundError)
