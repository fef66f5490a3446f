"""The classic adapter: a SparkSession with a SparkContext in this process (RDDs, barrier mode,
broadcast variables, accumulators; ``epoch_launcher.py``, ``continuous_launcher.py``,
``state_jobs.py``, ``state_frames.py``, ``locality.py``)."""

from __future__ import annotations

from typing import Any

from flowpoint.spark.adapter import SparkAdapter
from flowpoint.spark.continuous_launcher import SparkContinuousLauncher, max_concurrent_tasks
from flowpoint.spark.epoch_launcher import SparkEpochLauncher
from flowpoint.spark.session import ship_python_dependencies, ship_python_files
from flowpoint.spark.state_frames import keyed_state_dataframe, keyed_state_tables
from flowpoint.spark.state_jobs import read_keyed_state, remove_local_state, write_savepoint_parts
from flowpoint.spark.ui import group_job_ids, spark_ui_url


class ClassicAdapter(SparkAdapter):
    mode = "classic"

    @property
    def sc(self) -> Any:
        return self.spark.sparkContext

    def describe(self) -> str:
        return str(self.sc.master)

    def master(self) -> str:
        return str(self.sc.master)

    def default_parallelism(self) -> int:
        return int(self.sc.defaultParallelism)

    def on_a_cluster(self) -> bool:
        return not self.master().startswith("local")

    def ui_url(self) -> str | None:
        return spark_ui_url(self.spark)

    def spark_job_ids(self, group: str) -> set[int]:
        return group_job_ids(self.sc, group)

    def start_job_group(self, job_id: str, description: str) -> None:
        self.sc.setJobGroup(job_id, description, interruptOnCancel=True)

    def cancel_job_group(self, job_id: str) -> None:
        self.sc.cancelJobGroup(job_id)

    def epoch_launcher(self, graph: Any, plans: dict, job_id: str) -> Any:
        return SparkEpochLauncher(self.spark, graph, plans, job_id)

    def continuous_refusal(self, control_host: str) -> str | None:
        return None  # (Spark's executors reach its driver, which this process is)

    def continuous_launcher(self, job_id: str, description: str) -> Any:
        return SparkContinuousLauncher(self.spark, job_id, description)

    def slots_available(self) -> int:
        """``SparkContext.maxNumConcurrentTasks``: the number Spark's scheduler checks a barrier
        stage against (the cores of ``local[N]``, or of the executors registered now). Not
        ``defaultParallelism``, which is at least 2 on a cluster whatever its cores."""
        try:
            return max_concurrent_tasks(self.sc)
        except Exception:  # noqa: BLE001 - a Spark without it: its default parallelism
            return int(self.sc.defaultParallelism)

    def conf_value(self, key: str) -> str | None:
        value = self.sc.getConf().get(key, None)
        return None if value is None else str(value)

    def control_host(self) -> str:
        """127.0.0.1 for a local master (every task runs on this host), else ``spark.driver.host``,
        the address Spark's own executors reach this driver at."""
        if self.master().startswith("local"):
            return "127.0.0.1"
        return str(self.sc.getConf().get("spark.driver.host", "127.0.0.1"))

    def write_savepoint_parts(self, location: Any, items: list, savepoint_uri: str) -> list:
        return write_savepoint_parts(self.sc, location, items, savepoint_uri)

    def read_keyed_state(self, location: Any, items: list, uid: str) -> dict:
        return read_keyed_state(self.sc, location, items, uid)

    def remove_local_state(self, location: Any, job_id: str) -> int:
        return remove_local_state(self.sc, location, job_id, max(2, 2 * self.default_parallelism()))

    def savepoint_tables(self, access: Any, op: Any) -> dict:
        return keyed_state_tables(self.spark, access, op)

    def savepoint_dataframe(self, access: Any, op: Any, kinds: dict, state_name: str | None) -> Any:
        return keyed_state_dataframe(self.spark, access, op, kinds, state_name)

    def ship_python_dependencies(self, config: Any) -> None:
        ship_python_dependencies(self.spark, config)

    def ship_python_files(self, files: str | None) -> None:
        ship_python_files(self.spark, files)
