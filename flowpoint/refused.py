"""PyFlink names flowpoint does not provide, refused with a message saying why and what to use.

flowpoint mirrors PyFlink's module tree (``flowpoint.datastream.window``,
``flowpoint.common.typeinfo``, ...) so that a PyFlink program ports by renaming ``pyflink`` to
``flowpoint``. A module of that tree lacking some of PyFlink's names ends with::

    __getattr__ = refusing(__name__, {"JdbcSink": JAVA_CONNECTOR.but("write a SinkFunction ...")})

and ``from flowpoint.datastream.connectors.jdbc import JdbcSink`` then raises
:class:`~flowpoint.errors.UnsupportedApiError` (an ``ImportError``): ``cannot import name
'JdbcSink' from 'flowpoint.datastream.connectors.jdbc': <why>; use <instead>``. ``getattr`` of
such a name raises the same. A name neither provided nor refused is an ``AttributeError`` as
usual, so ``hasattr`` keeps working for names PyFlink does not have either.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from flowpoint.errors import UnsupportedApiError


@dataclass(frozen=True)
class Refusal:
    """Why a PyFlink name cannot work on Spark, and what to use instead."""

    why: str
    instead: str = ""

    def but(self, instead: str) -> Refusal:
        """The same reason with this module's alternative."""
        return Refusal(self.why, instead)

    def message(self, name: str, module: str) -> str:
        if not self.instead:
            msg = f"the refusal of {name!r} in {module} names no alternative"
            raise ValueError(msg)
        return f"cannot import name {name!r} from {module!r}: {self.why}; use {self.instead}"


JAVA_CONNECTOR = Refusal("PyFlink's connector wraps Flink's Java connector, and flowpoint runs no JVM")
JAVA_WRAPPER = Refusal("in PyFlink it wraps a Java object of the Flink runtime, and flowpoint runs no JVM")
LEGACY = Refusal("a legacy PyFlink API flowpoint does not carry")


def refusing(module: str, refused: dict[str, Refusal]) -> Callable[[str], Any]:
    """A module ``__getattr__`` raising :class:`UnsupportedApiError` for the names of ``refused``."""
    for name, refusal in refused.items():
        refusal.message(name, module)  # every refusal names an alternative, checked at import

    def __getattr__(name: str) -> Any:
        refusal = refused.get(name)
        if refusal is None:
            msg = f"module {module!r} has no attribute {name!r}"
            raise AttributeError(msg, name=name)
        raise UnsupportedApiError(refusal.message(name, module), name=module)

    __getattr__.refused = dict(refused)  # type: ignore[attr-defined] - read by the docs and tests
    return __getattr__


# -- the reasons, one per kind of refused name ---------------------------------------------------

_SINK_FUNCTION = "a SinkFunction writing with {client}, on the stream's add_sink(...)"

CASSANDRA = JAVA_CONNECTOR.but(_SINK_FUNCTION.format(client="the Python cassandra-driver"))
ELASTICSEARCH = JAVA_CONNECTOR.but(_SINK_FUNCTION.format(client="the Python elasticsearch client"))
JDBC = JAVA_CONNECTOR.but(_SINK_FUNCTION.format(client="a Python DB-API driver"))
RABBITMQ = JAVA_CONNECTOR.but(_SINK_FUNCTION.format(client="a Python AMQP client (pika)") + "; there is no RabbitMQ source")
KINESIS = JAVA_CONNECTOR.but(_SINK_FUNCTION.format(client="boto3") + "; there is no Kinesis source")
PULSAR = JAVA_CONNECTOR.but("KafkaSource and KafkaSink (flowpoint.datastream.connectors.kafka), or " + _SINK_FUNCTION.format(client="the Python pulsar-client"))
DYNAMIC_KAFKA = JAVA_CONNECTOR.but("one KafkaSource per cluster (flowpoint.datastream.connectors.kafka) and union() of their streams")
HYBRID = JAVA_CONNECTOR.but("env.from_source(...) for each source and union() of their streams")

AVRO = Refusal("PyFlink's Avro formats wrap Flink's Java Avro format, and flowpoint runs no JVM",
               "FileFormat.json_lines(type_info) or BulkFormat.parquet(type_info) for files, "
               "JsonRowDeserializationSchema/JsonRowSerializationSchema for Kafka")
CSV_READ = Refusal("PyFlink's CSV reader wraps Flink's Java CSV format",
                   "FileSource.for_format(FileFormat.csv(Types.ROW_NAMED([...], [...])), path).build()")
CSV_WRITE = Refusal("PyFlink's CSV writer wraps Flink's Java CSV format",
                    "FileSink.for_row_format(path, Encoder.csv()).build()")
CSV_ROW = Refusal("PyFlink's CSV row schemas wrap Flink's Java CSV format",
                  "JsonRowDeserializationSchema/JsonRowSerializationSchema or SimpleStringSchema with your own parsing in a map")
ORC = Refusal("PyFlink's ORC writer wraps Flink's Java ORC format",
              "FileSink.for_bulk_format(path, BulkFormat.parquet(Types.ROW_NAMED([...], [...]))).build()")
PARQUET_READ = Refusal("PyFlink's Parquet readers take the Table API's row types and wrap Flink's Java Parquet format",
                       "FileSource.for_format(BulkFormat.parquet(Types.ROW_NAMED([...], [...])), path).build()")
PARQUET_WRITE = Refusal("PyFlink's Parquet writers take the Table API's row types and wrap Flink's Java Parquet format",
                        "FileSink.for_bulk_format(path, BulkFormat.parquet(Types.ROW_NAMED([...], [...]))).build()")
BULK_WRITER = JAVA_WRAPPER.but("FileSink.for_bulk_format(path, BulkFormat.parquet(type_info))")

CONFIG_OPTION = Refusal("typed option objects are not provided; options are keys",
                        "Configuration.set(key, value) and Configuration.get(key) with the option's key string")
FUTURE = Refusal("JobClient's methods return their results, not Java futures",
                 "JobClient.get_job_status(), cancel() and wait_until_done() directly")
INPUT_DEPENDENCY = LEGACY.but("the default scheduling: Spark schedules the tasks (drop the call)")
JOB_ID = Refusal("job ids are strings in flowpoint", "JobClient.get_job_id(), a str")
PERIODIC_ASSIGNER = LEGACY.but("WatermarkStrategy.for_bounded_out_of_orderness(...).with_timestamp_assigner(...)")
INPUT_FORMAT = JAVA_WRAPPER.but("a Source with env.from_source(...): FileSource, NumberSequenceSource, DataGeneratorSource, KafkaSource")

CUSTOM_BACKEND = JAVA_WRAPPER.but("HashMapStateBackend() or EmbeddedRocksDBStateBackend()")
CUSTOM_STORAGE = JAVA_WRAPPER.but("FileSystemCheckpointStorage(path) or JobManagerCheckpointStorage()")
PREDEFINED_OPTIONS = JAVA_WRAPPER.but("EmbeddedRocksDBStateBackend() as it is (its settings: docs/state.md)")
SOURCE_FUNCTION = LEGACY.but("env.from_source(...) with a Source (NumberSequenceSource, DataGeneratorSource, FileSource, KafkaSource) "
                             "or env.from_collection(...)")
SLOT_SHARING = Refusal("Spark schedules the tasks, so slot sharing groups with resources do not apply",
                       "slot_sharing_group(name) with a name (accepted, without effect)")
TRANSFORMER = JAVA_WRAPPER.but("DataStream operators before sink_to(...)")
ASYNC_DESCRIPTOR = JAVA_WRAPPER.but("AsyncDataStream.unordered_wait(...) or ordered_wait(...) with an AsyncFunction")

COMPACTION = Refusal("Flink's file sink compacts with Java compactors; flowpoint's FileSink does not compact",
                     "a rolling policy that makes larger part files (RollingPolicy.default_rolling_policy(part_size=...))")
STREAMING_FILE_SINK = LEGACY.but("FileSink.for_row_format(...) or FileSink.for_bulk_format(...)")
FILE_SOURCE_PLUGIN = JAVA_WRAPPER.but("FileSource as it is: it lists every visible file in name order, one split per file")
KAFKA_CONSUMER = LEGACY.but("KafkaSource.builder()")
KAFKA_PRODUCER = LEGACY.but("KafkaSink.builder()")
KAFKA_SEMANTIC = LEGACY.but("DeliveryGuarantee with KafkaSink.builder().set_delivery_guarantee(...)")

HADOOP = JAVA_WRAPPER.but("local paths and file:// URIs (FileSource, FileSink)")
JAVA_PROPERTIES = JAVA_WRAPPER.but("a dict of properties (KafkaSource.builder().set_properties(...))")
JAVA_OBJECT = JAVA_WRAPPER.but("the flowpoint object itself")
JAVA_VALUES = JAVA_WRAPPER.but("the values themselves: flowpoint hands functions Python values")
TABLE_API = Refusal("flowpoint provides PyFlink's DataStream API, not its Table API or SQL",
                    "the DataStream API (flowpoint.datastream), with Row and Types.ROW_NAMED for structured records")
