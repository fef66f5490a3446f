"""The Spark adapter's one interface: everything flowpoint asks of a Spark session.

Two implementations, chosen from the session (:func:`flowpoint.spark.adapter_choice.adapter_for`):

- ``classic`` (:mod:`flowpoint.spark.classic`): a SparkSession with a SparkContext: RDDs,
  ``partitionBy``, barrier mode, broadcast variables, accumulators, ``addPyFile``/``addArchive``;
- ``connect`` (:mod:`flowpoint.spark.connect`): a Spark Connect session (``remote(...)``,
  ``SPARK_REMOTE``, ``spark.api.mode=connect``): DataFrame operations only, ``mapInArrow`` over
  a DataFrame of task descriptions, ``repartitionById`` by the destination column,
  acknowledgements as result rows, ``addArtifacts``.

Nothing outside ``flowpoint/spark`` knows which one runs: the driver asks the adapter, and a
mode that cannot do something says so (:meth:`SparkAdapter.continuous_refusal`) before the job
starts, naming the mode and the alternative.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from flowpoint.spark.state_frames import rows_to_dataframe, values_dataframe


class SparkAdapter(ABC):
    """What the driver needs of Spark. ``spark`` is the session itself (for the user)."""

    mode: str = ""

    def __init__(self, spark: Any):
        self.spark = spark

    # -- the session ------------------------------------------------------------------------------

    @abstractmethod
    def describe(self) -> str:
        """Where the job runs, after "Spark " in the progress line: ``local[2,4]``, ``Connect server sc://...``."""

    @abstractmethod
    def master(self) -> str:
        """The master URL of the Spark application that runs the tasks ("" when unknown)."""

    @abstractmethod
    def default_parallelism(self) -> int:
        """Spark's default parallelism (the job's default parallelism when it sets none)."""

    @abstractmethod
    def on_a_cluster(self) -> bool:
        """Executors may be on other hosts than this process (no shared local disk)."""

    def ui_url(self) -> str | None:
        """The address of Spark's web UI, None when this process cannot know it."""
        return None

    def spark_job_ids(self, group: str) -> set[int]:
        """The Spark job ids of a flowpoint job (links to Spark's UI); empty when unknown."""
        return set()

    # -- running ----------------------------------------------------------------------------------

    @abstractmethod
    def start_job_group(self, job_id: str, description: str) -> None:
        """Mark the Spark work this thread starts as flowpoint job ``job_id``'s."""

    @abstractmethod
    def cancel_job_group(self, job_id: str) -> None:
        """Cancel the Spark work of flowpoint job ``job_id`` (from any thread)."""

    @abstractmethod
    def epoch_launcher(self, graph: Any, plans: dict, job_id: str) -> Any:
        """The executor of one job's epochs: ``run_epoch(spec, source_reads, slices) -> [TaskAck]``,
        ``spark_jobs``, ``close()``."""

    @abstractmethod
    def continuous_refusal(self, control_host: str) -> str | None:
        """Why the continuous runtime cannot run here at all, its tasks connecting to this
        process at ``control_host`` (None: it can, if the slots are there)."""

    @abstractmethod
    def continuous_launcher(self, job_id: str, description: str) -> Any:
        """The executor of a continuous job's runs: ``start(run, spec, plans, slices)`` runs every
        slot at once as one barrier Spark job, ``done``, ``error``, ``wait()``, ``cancel()``,
        ``close()``."""

    @abstractmethod
    def slots_available(self) -> int:
        """How many tasks Spark can run at once now (a barrier stage needs all of its at once)."""

    @abstractmethod
    def conf_value(self, key: str) -> str | None:
        """A Spark setting of the application that runs the tasks (None when unset or unknown)."""

    @abstractmethod
    def control_host(self) -> str:
        """The address of this process that a continuous run's tasks connect to, unless
        ``execution.continuous.control-host`` names another."""

    # -- state jobs -------------------------------------------------------------------------------

    @abstractmethod
    def write_savepoint_parts(self, location: Any, items: list, savepoint_uri: str) -> list:
        """``[(uid, SubtaskState, state counts)]``: each stateful partition writes its canonical part."""

    @abstractmethod
    def read_keyed_state(self, location: Any, items: list, uid: str) -> dict:
        """``{state name: {key: value}}`` of operator ``uid``'s committed state."""

    @abstractmethod
    def remove_local_state(self, location: Any, job_id: str) -> int:
        """The job's executor-local working files and cached state go, wherever tasks run."""

    @abstractmethod
    def savepoint_tables(self, access: Any, op: Any) -> dict:
        """``{state name: {key: value}}`` of a savepoint's operator, read by Spark tasks."""

    @abstractmethod
    def savepoint_dataframe(self, access: Any, op: Any, kinds: dict, state_name: str | None) -> Any:
        """A savepoint's operator state as a DataFrame of this session."""

    def rows_dataframe(self, rows: list[tuple], with_state_name: bool) -> Any:
        return rows_to_dataframe(self.spark, rows, with_state_name)

    def values_dataframe(self, rows: list[tuple], columns: tuple[str, ...]) -> Any:
        """Rows of Python values as a DataFrame, each column typed by its values."""
        return values_dataframe(self.spark, rows, columns)

    # -- shipping code ----------------------------------------------------------------------------

    @abstractmethod
    def ship_python_dependencies(self, config: Any) -> None:
        """``python.files``, ``python.requirements``, ``python.archives`` to every executor."""

    @abstractmethod
    def ship_python_files(self, files: str | None) -> None:
        """``add_python_file()``: comma-separated files, packages or zips to every executor."""


def is_connect_session(spark: Any) -> bool:
    """A Spark Connect session (no SparkContext in this process)."""
    return type(spark).__module__.startswith("pyspark.sql.connect")
