"""``StreamExecutionEnvironment``: where a job is built and from where it runs.

Building a job needs no Spark; ``execute`` compiles the job graph, validates it, and runs it
through the coordinator on Spark (``local[*]`` unless a master or a SparkSession is given).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from flowpoint.api import cli_context
from flowpoint.api.checkpointing import (
    CheckpointConfig,
    CheckpointingMode,
    resolve_checkpoint_settings,
)
from flowpoint.api.config import Configuration
from flowpoint.api.config_file import job_path_from_argv, load_config_file
from flowpoint.api.datastream import DataStream
from flowpoint.api.execution_mode import RuntimeExecutionMode
from flowpoint.api.restart import (
    FallbackRestartStrategyConfiguration,
    RestartStrategyConfiguration,
    resolve_repeated_failure,
    resolve_restart_backoff,
    restart_strategy_from_config,
)
from flowpoint.api.state_backends import StateBackend, state_backend_from_config
from flowpoint.api.types import TypeInformation
from flowpoint.api.watermarks import WatermarkStrategy
from flowpoint.connectors.collection import CollectionSource
from flowpoint.connectors.datagen import NumberSequenceSource
from flowpoint.connectors.source import Source
from flowpoint.driver.description import JobDescription
from flowpoint.errors import ConfigurationError, JobGraphError
from flowpoint.graph.jobgraph import GraphOptions, JobGraph
from flowpoint.graph.transformation import Transformation

log = logging.getLogger("flowpoint")

class PlanPrinted(BaseException):  # noqa: N818 - not an error: stops the script like SystemExit
    """Raised by ``execute()``/``execute_async()`` under ``flowpoint info`` once the plan is
    printed: the script stops there, as Flink's ``info`` stops a program at its first execute.
    A BaseException so that a script's ``except Exception`` does not swallow it."""


class ExecutionConfig:
    """PyFlink's ``ExecutionConfig`` (``env.get_config()``). Every setter writes the Flink
    configuration key behind it; the ones without meaning on Spark (Kryo, Avro, object reuse,
    closure cleaner, latency markers, cancellation) are kept and returned, and documented as such
    in ``docs/pyflink.md``."""

    PARALLELISM_DEFAULT = -1
    PARALLELISM_UNKNOWN = -2

    def __init__(self, env: StreamExecutionEnvironment):
        self._env = env
        self.global_job_parameters: dict[str, str] = {}

    def _set(self, key: str, value: Any) -> ExecutionConfig:
        self._env._config.set(key, value)
        return self

    def _get(self, key: str) -> Any:
        return self._env._config.get(key)

    def set_global_job_parameters(self, parameters: dict[str, str]) -> ExecutionConfig:
        self.global_job_parameters = dict(parameters)
        return self

    def get_global_job_parameters(self) -> dict[str, str]:
        return dict(self.global_job_parameters)

    def set_parallelism(self, parallelism: int) -> ExecutionConfig:
        self._env.set_parallelism(parallelism)
        return self

    def get_parallelism(self) -> int:
        return self._env.get_parallelism()

    def set_max_parallelism(self, max_parallelism: int) -> ExecutionConfig:
        self._env.set_max_parallelism(max_parallelism)
        return self

    def get_max_parallelism(self) -> int:
        return self._env.get_max_parallelism() or self.PARALLELISM_DEFAULT

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration) -> ExecutionConfig:
        self._env.set_restart_strategy(restart_strategy_configuration)
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration:
        return self._env.get_restart_strategy()

    def set_auto_watermark_interval(self, interval: int) -> ExecutionConfig:
        """0 turns periodic watermarks off (only ``on_event`` ones and the last one at the end of
        input); any other interval keeps them, emitted after every source batch."""
        return self._set("pipeline.auto-watermark-interval", interval)

    def get_auto_watermark_interval(self) -> int:
        return int(self._get("pipeline.auto-watermark-interval"))

    def enable_auto_generated_uids(self) -> ExecutionConfig:
        return self._set("pipeline.auto-generate-uids", True)

    def disable_auto_generated_uids(self) -> ExecutionConfig:
        """Every operator must then have a ``uid(...)``: building the job fails naming those without."""
        return self._set("pipeline.auto-generate-uids", False)

    def has_auto_generated_uids_enabled(self) -> bool:
        return bool(self._get("pipeline.auto-generate-uids"))

    def enable_object_reuse(self) -> ExecutionConfig:
        return self._set("pipeline.object-reuse", True)

    def disable_object_reuse(self) -> ExecutionConfig:
        return self._set("pipeline.object-reuse", False)

    def is_object_reuse_enabled(self) -> bool:
        return bool(self._get("pipeline.object-reuse"))

    def enable_closure_cleaner(self) -> ExecutionConfig:
        return self._set("pipeline.closure-cleaner-level", "RECURSIVE")

    def disable_closure_cleaner(self) -> ExecutionConfig:
        return self._set("pipeline.closure-cleaner-level", "NONE")

    def is_closure_cleaner_enabled(self) -> bool:
        return str(self._get("pipeline.closure-cleaner-level")).upper() != "NONE"

    def enable_generic_types(self) -> ExecutionConfig:
        return self._set("pipeline.generic-types", True)

    def disable_generic_types(self) -> ExecutionConfig:
        return self._set("pipeline.generic-types", False)

    def has_generic_types_disabled(self) -> bool:
        return not self._get("pipeline.generic-types")

    def enable_force_kryo(self) -> ExecutionConfig:
        return self._set("pipeline.force-kryo", True)

    def disable_force_kryo(self) -> ExecutionConfig:
        return self._set("pipeline.force-kryo", False)

    def is_force_kryo_enabled(self) -> bool:
        return bool(self._get("pipeline.force-kryo"))

    def enable_force_avro(self) -> ExecutionConfig:
        return self._set("pipeline.force-avro", True)

    def disable_force_avro(self) -> ExecutionConfig:
        return self._set("pipeline.force-avro", False)

    def is_force_avro_enabled(self) -> bool:
        return bool(self._get("pipeline.force-avro"))

    def set_latency_tracking_interval(self, interval: int) -> ExecutionConfig:
        return self._set("metrics.latency.interval", interval)

    def get_latency_tracking_interval(self) -> int:
        return int(self._get("metrics.latency.interval"))

    def set_task_cancellation_interval(self, interval: int) -> ExecutionConfig:
        return self._set("task.cancellation.interval", interval)

    def get_task_cancellation_interval(self) -> int:
        return int(self._get("task.cancellation.interval"))

    def set_task_cancellation_timeout(self, timeout: int) -> ExecutionConfig:
        return self._set("task.cancellation.timeout", timeout)

    def get_task_cancellation_timeout(self) -> int:
        return int(self._get("task.cancellation.timeout"))

    def set_use_snapshot_compression(self, use_snapshot_compression: bool) -> ExecutionConfig:
        return self._set("execution.checkpointing.snapshot-compression", use_snapshot_compression)

    def is_use_snapshot_compression(self) -> bool:
        return bool(self._get("execution.checkpointing.snapshot-compression"))

    def get_registered_kryo_types(self) -> list:
        return []

    def get_registered_pojo_types(self) -> list:
        return []

    def get_default_kryo_serializer_classes(self) -> dict:
        return {}


class StreamExecutionEnvironment:
    def __init__(self, configuration: Configuration | dict | None = None, spark_session: Any = None):
        if isinstance(configuration, dict):
            configuration = Configuration(configuration)
        self._config = configuration.copy() if configuration else Configuration()
        for k, v in cli_context.current().defaults.items():
            if not self._config.contains_key(k):
                self._config.put(k, v)  # -D keys were checked by flowpoint run
        self._spark = spark_session
        self._transformations: list[Transformation] = []
        self._execution_config = ExecutionConfig(self)
        self._checkpoint_config = CheckpointConfig(self._config)
        self._restart_strategy: RestartStrategyConfiguration | None = None

    @staticmethod
    def get_execution_environment(configuration: Configuration | dict | None = None, spark_session: Any = None) -> StreamExecutionEnvironment:
        """A new environment. Pass a Configuration/dict of settings, or an existing SparkSession.

        Settings come from, first to last: code (setters), ``configuration``, ``flowpoint run -D``,
        ``flowpoint.yaml`` (see :mod:`flowpoint.api.config_file`), the defaults.
        """
        file_settings = load_config_file(job_path_from_argv(), cli_context.current().conf_path)
        env = StreamExecutionEnvironment(configuration, spark_session)
        for k, v in file_settings.items():
            if not env._config.contains_key(k):
                env._config.put(k, v)  # checked when the file was read
        return env

    # -- settings ------------------------------------------------------------------------------

    def get_config(self) -> ExecutionConfig:
        return self._execution_config

    def get_configuration(self) -> Configuration:
        return self._config

    def configure(self, configuration: Configuration | dict) -> StreamExecutionEnvironment:
        items = configuration.to_dict() if isinstance(configuration, Configuration) else configuration
        for k, v in items.items():
            self._config.set(k, v)
        return self

    def set_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        if not isinstance(parallelism, int) or parallelism < 1:
            msg = f"parallelism must be a positive int; got {parallelism!r}"
            raise ConfigurationError(msg)
        self._config.set("parallelism.default", parallelism)
        return self

    def get_parallelism(self) -> int:
        p = self._config.get("parallelism.default")
        if p:
            return int(p)
        return default_parallelism(self._config.get("spark.master"), self._spark)

    def set_max_parallelism(self, max_parallelism: int) -> StreamExecutionEnvironment:
        if not isinstance(max_parallelism, int) or not 1 <= max_parallelism <= 32768:
            msg = f"max parallelism must be an int between 1 and 32768; got {max_parallelism!r}"
            raise ConfigurationError(msg)
        self._config.set("pipeline.max-parallelism", max_parallelism)
        return self

    def get_max_parallelism(self) -> int | None:
        return self._config.get("pipeline.max-parallelism")

    def set_spark_master(self, master: str) -> StreamExecutionEnvironment:
        """Run on this Spark master (``local[2]``, ``spark://host:7077``, ``yarn``, ...)."""
        self._config.set("spark.master", master)
        return self

    def set_spark_session(self, spark_session: Any) -> StreamExecutionEnvironment:
        """Run on an existing (classic, not Spark Connect) SparkSession."""
        self._spark = spark_session
        return self

    def set_runtime_mode(self, execution_mode: RuntimeExecutionMode) -> StreamExecutionEnvironment:
        """``RuntimeExecutionMode.STREAMING`` (default), ``BATCH`` (bounded sources, final results
        only) or ``AUTOMATIC`` (``BATCH`` when every source is bounded); ``execution.runtime-mode``."""
        if not isinstance(execution_mode, RuntimeExecutionMode):
            msg = f"set_runtime_mode() takes RuntimeExecutionMode.STREAMING, BATCH or AUTOMATIC; got {execution_mode!r}"
            raise ConfigurationError(msg)
        self._config.set("execution.runtime-mode", execution_mode.name)
        return self

    def set_epoch_max_records(self, records: int) -> StreamExecutionEnvironment:
        """Records read per epoch over all source splits (``execution.epoch.max-records``)."""
        if records < 1:
            msg = f"epoch max records must be >= 1; got {records}"
            raise ConfigurationError(msg)
        self._config.set("execution.epoch.max-records", records)
        return self

    # -- PyFlink settings without a Java side -----------------------------------------------------

    def add_jars(self, *jars_path: str) -> StreamExecutionEnvironment:
        """Accepted so PyFlink programs run: flowpoint has no JVM connectors, so jars (such as
        Flink's Kafka connector) are not needed and not loaded."""
        log.info("add_jars%s: flowpoint's connectors are Python; the jars are not loaded", jars_path)
        return self

    def add_classpaths(self, *classpaths: str) -> StreamExecutionEnvironment:
        """Accepted for PyFlink programs; nothing is added to a Java classpath (see add_jars)."""
        log.info("add_classpaths%s: flowpoint's connectors are Python; nothing is loaded", classpaths)
        return self

    def add_python_file(self, file_path: str) -> StreamExecutionEnvironment:
        """A Python file, package directory or zip the job's functions import, shipped to every
        executor (``SparkContext.addPyFile``) when the job starts."""
        if not os.path.exists(file_path):
            msg = f"add_python_file({file_path!r}): no such file or directory"
            raise ConfigurationError(msg)
        files = [f for f in str(self._config.get("python.files") or "").split(",") if f]
        self._config.set("python.files", ",".join([*files, os.path.abspath(file_path)]))
        return self

    def set_python_executable(self, python_exec: str) -> StreamExecutionEnvironment:
        """The Python the executors run (``spark.pyspark.python``); it applies when this
        environment starts Spark, not to a SparkSession that is already running."""
        self._config.set("spark.pyspark.python", python_exec)
        return self

    def get_default_local_parallelism(self) -> int:
        return self.get_parallelism()

    def set_default_local_parallelism(self, parallelism: int) -> StreamExecutionEnvironment:
        return self.set_parallelism(parallelism)

    def set_buffer_timeout(self, timeout_millis: int) -> StreamExecutionEnvironment:
        """Accepted for PyFlink programs: records move between tasks at epoch boundaries
        (``execution.epoch.*`` bounds the latency), there are no network buffers to flush."""
        self._buffer_timeout = int(timeout_millis)
        return self

    def get_buffer_timeout(self) -> int:
        return getattr(self, "_buffer_timeout", 100)

    def disable_operator_chaining(self) -> StreamExecutionEnvironment:
        """Every operator runs in a task of its own (an exchange between any two), as in Flink."""
        self._config.set("pipeline.operator-chaining.enabled", False)
        return self

    def is_chaining_enabled(self) -> bool:
        return bool(self._config.get("pipeline.operator-chaining.enabled"))

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return bool(self._config.get("execution.checkpointing.unaligned"))

    def is_force_unaligned_checkpoints(self) -> bool:
        return False

    def get_checkpointing_consistency_mode(self) -> CheckpointingMode:
        return self.get_checkpointing_mode()

    def close(self) -> None:
        """Nothing to release: each job's resources are released when it ends."""

    # -- checkpointing, state backend, restarts --------------------------------------------------

    def get_checkpoint_config(self) -> CheckpointConfig:
        return self._checkpoint_config

    def enable_checkpointing(self, interval: int, mode: CheckpointingMode | None = None) -> StreamExecutionEnvironment:
        """Checkpoint every ``interval`` ms (at the first epoch boundary after it); ``mode``
        defaults to EXACTLY_ONCE (state is exactly-once with AT_LEAST_ONCE too)."""
        self._checkpoint_config.set_checkpoint_interval(interval)
        if mode is not None:
            self._checkpoint_config.set_checkpointing_mode(mode)
        return self

    def get_checkpoint_interval(self) -> int:
        """The checkpoint interval in ms, or -1 when checkpointing is off."""
        return self._checkpoint_config.get_checkpoint_interval()

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return self._checkpoint_config.get_checkpointing_mode()

    def set_state_backend(self, state_backend: StateBackend) -> StreamExecutionEnvironment:
        """``HashMapStateBackend()`` or ``EmbeddedRocksDBStateBackend(incremental)``."""
        if not isinstance(state_backend, StateBackend):
            msg = f"set_state_backend() takes HashMapStateBackend() or EmbeddedRocksDBStateBackend(...); got {type(state_backend).__name__}"
            raise ConfigurationError(msg)
        for k, v in state_backend._config_items().items():
            self._config.set(k, v)
        return self

    def enable_changelog_state_backend(self, enabled: bool) -> StreamExecutionEnvironment:
        """Flink's changelog state backend (``state.backend.changelog.enabled``): RocksDB
        checkpoints upload the changes committed since the previous one on top of a periodic
        materialization (``state.backend.changelog.periodic-materialize.interval``)."""
        self._config.set("state.backend.changelog.enabled", bool(enabled))
        return self

    def is_changelog_state_backend_enabled(self) -> bool:
        return bool(self._config.get("state.backend.changelog.enabled"))

    def get_state_backend(self) -> StateBackend:
        """The state backend jobs of this environment use (set in code or configured)."""
        return state_backend_from_config(self._config)

    def set_default_savepoint_directory(self, directory: str) -> StreamExecutionEnvironment:
        """Where savepoints go unless a command names a directory (``state.savepoints.dir``)."""
        self._config.set("state.savepoints.dir", directory)
        return self

    def get_default_savepoint_directory(self) -> str | None:
        return self._config.get("state.savepoints.dir")

    def set_restart_strategy(self, restart_strategy_configuration: RestartStrategyConfiguration) -> StreamExecutionEnvironment:
        """A strategy from ``RestartStrategies``; it overrides ``restart-strategy.*`` settings
        (``RestartStrategies.fall_back_restart()`` uses them again)."""
        if not isinstance(restart_strategy_configuration, RestartStrategyConfiguration):
            msg = f"set_restart_strategy() takes a strategy from RestartStrategies (no_restart(), fixed_delay_restart(...), ...); got {type(restart_strategy_configuration).__name__}"
            raise ConfigurationError(msg)
        self._restart_strategy = restart_strategy_configuration
        return self

    def get_restart_strategy(self) -> RestartStrategyConfiguration:
        """The strategy set in code, else the configured one (``restart-strategy.type``), else
        ``FallbackRestartStrategyConfiguration``: the default applies (exponential delay with
        checkpointing, no restart without)."""
        if self._restart_strategy is not None and not isinstance(self._restart_strategy, FallbackRestartStrategyConfiguration):
            return self._restart_strategy
        return restart_strategy_from_config(self._config) or FallbackRestartStrategyConfiguration()

    # -- sources -------------------------------------------------------------------------------

    def _add_transformation(self, t: Transformation) -> None:
        self._transformations.append(t)

    def from_source(self, source: Source, watermark_strategy: WatermarkStrategy | None = None, source_name: str | None = None, type_info: TypeInformation | None = None) -> DataStream:
        t = source_transformation(source, watermark_strategy, source_name, type_info)
        self._add_transformation(t)
        return DataStream(self, t)

    def from_collection(self, collection: list | tuple | Any, type_info: TypeInformation | None = None) -> DataStream:
        """A bounded stream of the given elements, in order (a non-parallel source)."""
        return self.from_source(CollectionSource(list(collection), type_info), source_name="Collection Source", type_info=type_info)

    def from_sequence(self, start: int, end: int) -> DataStream:
        """The numbers ``start`` to ``end`` inclusive, read in parallel."""
        return self.from_source(NumberSequenceSource(start, end), source_name="Sequence Source")

    # -- running -------------------------------------------------------------------------------

    def _default_job_name(self) -> str:
        return self._config.get("pipeline.name") or "Flowpoint Streaming Job"

    def _pipeline(self) -> list[Transformation]:
        """What was defined since the last ``execute()``, with the streams it reads (a stream
        defined before an ``execute()`` and used after it is computed again, as in Flink)."""
        seen: dict[int, Transformation] = {}
        stack = list(self._transformations)
        while stack:
            t = stack.pop()
            if t.id not in seen:
                seen[t.id] = t
                stack.extend(t.inputs)
        return sorted(seen.values(), key=lambda t: t.id)

    def get_stream_graph(self, job_name: str | None = None, clear_transformations: bool = False):
        """The job graph of what was defined since the last ``execute()``; with
        ``clear_transformations`` the next job starts from nothing (as ``execute()`` does)."""
        graph = JobGraph.build(self._pipeline(), GraphOptions.of(self), job_name or self._default_job_name())
        if clear_transformations:
            self._transformations = []
        return graph

    def get_execution_plan(self) -> str:
        """The job graph as JSON in Flink's shape (operators, parallelism, exchanges); what was
        defined stays for the next ``execute()``."""
        return self.get_stream_graph().execution_plan()

    def execute_async(self, job_name: str | None = None):
        """Start the job in the background and return its :class:`~flowpoint.driver.job.JobClient`.
        Like PyFlink, the next ``execute`` runs only what is defined after this call."""
        graph = self.get_stream_graph(job_name, clear_transformations=True)
        if cli_context.current().print_plan:
            print(graph.execution_plan(), flush=True)
            raise PlanPrinted
        # lazy: the launcher starts Spark, Prometheus and the control endpoint (230 ms to import)
        from flowpoint.launcher import (
            submit,  # the launcher sits above the API (it starts the control plane)
        )

        return submit(job_description(self, graph), self._spark)

    def execute(self, job_name: str | None = None):
        """Run the job until its sources are exhausted (or it is cancelled); returns its result."""
        client = self.execute_async(job_name)
        try:
            return client.wait()
        except KeyboardInterrupt:
            client.cancel()
            raise


def default_parallelism(master: str | None, spark: Any) -> int:
    if spark is not None:
        # lazy: the Spark adapter (60 ms), not for `import flowpoint`
        from flowpoint.spark.adapter_choice import adapter_for

        return adapter_for(spark).default_parallelism()
    master = master or cli_context.current().defaults.get("spark.master") or os.environ.get("FLOWPOINT_SPARK_MASTER") or "local[*]"
    if master.startswith("local"):
        inner = master[master.find("[") + 1 : master.find("]")] if "[" in master else "1"
        cores = inner.split(",")[0].strip()
        if cores == "*":
            return os.cpu_count() or 1
        try:
            return max(1, int(cores))
        except ValueError:
            return 1
    if master.startswith("local-cluster"):
        parts = master[master.find("[") + 1 : master.find("]")].split(",")
        return int(parts[0]) * int(parts[1])
    return os.cpu_count() or 1


# -- what the environment's methods build ----------------------------------------------------


def source_transformation(source: Source, watermark_strategy: WatermarkStrategy | None, source_name: str | None, type_info: TypeInformation | None) -> Transformation:
    """The transformation of ``from_source``: ``source`` read with ``watermark_strategy``."""
    if not isinstance(source, Source):
        msg = f"from_source() needs a flowpoint Source (NumberSequenceSource, DataGeneratorSource, FileSource, ...); got {type(source).__name__}"
        raise JobGraphError(msg)
    t = Transformation(
        kind="source",
        name=source_name or source.default_name(),
        source=source,
        output_type=type_info or source.output_type,
        parallelism=None if source.is_parallel() else 1,
    )
    t.options["watermark_strategy"] = watermark_strategy or WatermarkStrategy.no_watermarks()
    return t


def job_description(env: StreamExecutionEnvironment, graph: Any) -> Any:
    """The job as the driver runs it: the graph and ``env``'s settings, resolved."""
    description = JobDescription(graph, env.get_configuration(), None, None, None, env.get_config().get_global_job_parameters())
    try:
        description.checkpoints = resolve_checkpoint_settings(env)
        description.restart_backoff = resolve_restart_backoff(env, description.checkpoints.enabled)
        description.repeated_failure = resolve_repeated_failure(env)
    except Exception as e:  # noqa: BLE001 - the job fails with it when it runs, as before
        description.settings_error = e
    return description
