"""PyFlink's ``pyflink.common``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.api.config import Configuration
from flowpoint.api.environment import ExecutionConfig
from flowpoint.api.restart import RestartStrategies, RestartStrategyConfiguration
from flowpoint.api.row import Row, RowKind
from flowpoint.api.serializer import TypeSerializer
from flowpoint.api.time import Duration, Instant, Time
from flowpoint.api.types import TypeInformation, Types
from flowpoint.api.watermarks import WatermarkStrategy
from flowpoint.connectors.file_sink import Encoder
from flowpoint.connectors.kafka import (
    ByteArraySchema,
    DeserializationSchema,
    SerializationSchema,
    SimpleStringSchema,
)
from flowpoint.driver.job import JobClient
from flowpoint.driver.job_status import JobExecutionResult, JobStatus
from flowpoint.refused import (
    CONFIG_OPTION,
    FUTURE,
    INPUT_DEPENDENCY,
    JOB_ID,
    PERIODIC_ASSIGNER,
    refusing,
)

__all__ = [
    "ByteArraySchema",
    "Configuration",
    "DeserializationSchema",
    "Duration",
    "Encoder",
    "ExecutionConfig",
    "Instant",
    "JobClient",
    "JobExecutionResult",
    "JobStatus",
    "RestartStrategies",
    "RestartStrategyConfiguration",
    "Row",
    "RowKind",
    "SerializationSchema",
    "SimpleStringSchema",
    "Time",
    "TypeInformation",
    "TypeSerializer",
    "Types",
    "WatermarkStrategy",
]

__getattr__ = refusing(
    __name__,
    {
        "ConfigOption": CONFIG_OPTION,
        "ConfigOptions": CONFIG_OPTION,
        "CompletableFuture": FUTURE,
        "InputDependencyConstraint": INPUT_DEPENDENCY,
        "JobID": JOB_ID,
        "AssignerWithPeriodicWatermarksWrapper": PERIODIC_ASSIGNER,
    },
)
