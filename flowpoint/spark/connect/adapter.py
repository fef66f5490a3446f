"""The adapter of a Spark Connect session: DataFrame operations only (see the package doc).

This process is a Spark Connect client, not Spark's driver: it has no SparkContext, so no RDD,
broadcast variable, accumulator, job group, status tracker or web UI address. What differs from
the classic adapter:

- epochs: ``connect/epoch_launcher.py`` (``mapInArrow`` stages, ``repartitionById``
  exchanges, acknowledgements as rows); a stateful partition does not prefer the host that
  holds its state (Spark Connect has no way to ask for a task's location): on several hosts a
  partition that moves rebuilds its state from durable storage, correct at that cost;
- the continuous runtime runs its slots as one ``mapInArrow(..., barrier=True)`` query
  (``connect/continuous_launcher.py``), once a Spark task has shown that it reaches this process
  (``connect/reach.py``): a Connect client is not Spark's driver, and the server's executors
  need not reach it;
- state jobs (savepoints, ``get_keyed_state``, ``state_reader``) run one ``mapInArrow`` task
  per partition; a ``state_reader`` DataFrame is built from rows read here;
- ``python.files``/``python.requirements``/``python.archives`` go with ``addArtifacts``;
- cancelling a job interrupts the queries of its tag (``addTag``/``interruptTag``).
"""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

from flowpoint.python_deps import check_archives, executor_py_files
from flowpoint.spark.adapter import SparkAdapter
from flowpoint.spark.connect import frames
from flowpoint.spark.connect.continuous_launcher import ConnectContinuousLauncher
from flowpoint.spark.connect.epoch_launcher import ConnectEpochLauncher
from flowpoint.spark.connect.reach import local_address_towards, unreachable_reason
from flowpoint.spark.state_frames import _subtask_reader
from flowpoint.spark.state_jobs import merge_tables, read_state_task, remove_task, savepoint_task
from flowpoint.state.table_rows import state_rows


def _tag(job_id: str) -> str:
    return f"flowpoint-{job_id}"


class ConnectAdapter(SparkAdapter):
    mode = "connect"

    def __init__(self, spark: Any):
        super().__init__(spark)
        self._parallelism: int | None = None
        self._reach: dict[str, str | None] = {}  # control host -> why a task cannot reach it (None: it can)

    # -- the session ------------------------------------------------------------------------------

    def url(self) -> str:
        builder = getattr(self.spark.client, "_builder", None)
        host = getattr(builder, "host", None) or "localhost"
        port = getattr(builder, "_port", None)
        return f"sc://{host}:{port}" if port else f"sc://{host}"

    def server_host(self) -> str:
        builder = getattr(self.spark.client, "_builder", None)
        return str(getattr(builder, "host", None) or "localhost")

    def describe(self) -> str:
        master = self.master()
        return f"Connect server {self.url()}" + (f" (master {master})" if master else "")

    def master(self) -> str:
        try:
            return str(self.spark.conf.get("spark.master", "") or "")
        except Exception:  # noqa: BLE001 - a server that does not show it
            return ""

    def default_parallelism(self) -> int:
        """Spark's default parallelism (:meth:`_ask_parallelism`), asked once."""
        if self._parallelism is None:
            self._parallelism = self._ask_parallelism()
        return self._parallelism

    def _ask_parallelism(self) -> int:
        """``spark.default.parallelism`` when the server sets it, else the partitions Spark gives
        a range without a count (Spark's default parallelism: the executors' cores)."""
        try:
            value = self.spark.conf.get("spark.default.parallelism", None)
        except Exception:  # noqa: BLE001
            value = None
        if value:
            return max(1, int(value))
        row = self.spark.range(0, 1 << 16).selectExpr("spark_partition_id() AS p").agg({"p": "max"}).collect()[0]
        return max(1, int(row[0]) + 1)

    def on_a_cluster(self) -> bool:
        """The server runs on another host, or its master is not a local one: its executors do
        not share this host's disk."""
        if not _loopback(self.server_host()):
            return True
        return not self.master().startswith("local")

    # -- running ----------------------------------------------------------------------------------

    def start_job_group(self, job_id: str, description: str) -> None:
        self.spark.addTag(_tag(job_id))  # (this thread's queries; description: Spark Connect has none)

    def cancel_job_group(self, job_id: str) -> None:
        self.spark.interruptTag(_tag(job_id))

    def epoch_launcher(self, graph: Any, plans: dict, job_id: str) -> Any:
        from pyspark.sql.connect.dataframe import DataFrame

        frames.check_repartition_by_id(DataFrame)
        return ConnectEpochLauncher(self.spark, graph, plans, job_id, _tag(job_id))

    def continuous_refusal(self, control_host: str) -> str | None:
        """None when a Spark task reached this process at ``control_host`` (measured once per
        session and address: ``connect/reach.py``); else why the server's executors cannot
        open the run's control channels here, and what to do."""
        if control_host not in self._reach:
            self._reach[control_host] = unreachable_reason(self.spark, control_host)
        reason = self._reach[control_host]
        if reason is None:
            return None
        return (
            f"the continuous runtime's tasks open control channels to this process, a Spark Connect client "
            f"(not Spark's driver), and the server {self.url()}'s executors cannot reach it at {control_host}: {reason}; "
            "give an address of this host they reach with execution.continuous.control-host, or run in epochs"
        )

    def continuous_launcher(self, job_id: str, description: str) -> Any:
        return ConnectContinuousLauncher(self.spark, job_id, description, _tag(job_id))

    def slots_available(self) -> int:
        """The partitions Spark gives a range without a count (its default parallelism: the
        cores of ``local[N]``, or of the executors registered now, at least 2 on a cluster),
        asked now; Spark Connect does not show the scheduler's free slots."""
        self._parallelism = self._ask_parallelism()
        return self._parallelism

    def conf_value(self, key: str) -> str | None:
        try:
            value = self.spark.conf.get(key, None)
        except Exception:  # noqa: BLE001 - a setting the server does not show
            return None
        return None if value is None else str(value)

    def control_host(self) -> str:
        """127.0.0.1 when the server and its tasks run on this host (a loopback server, a local
        master); the server's ``spark.driver.host`` when the server runs here but its executors
        elsewhere; else the address of this host on the route to the server."""
        if _loopback(self.server_host()):
            if self.master().startswith("local"):
                return "127.0.0.1"
            return self.conf_value("spark.driver.host") or socket.gethostname()
        return local_address_towards(self.server_host())

    # -- state jobs -------------------------------------------------------------------------------

    def _per_item(self, items: list, task: Any) -> list:
        def one(item: Any) -> list:
            return list(task(iter([item])))

        return frames.run_per_item(self.spark, items, one)

    def write_savepoint_parts(self, location: Any, items: list, savepoint_uri: str) -> list:
        return self._per_item(items, savepoint_task(location, savepoint_uri))

    def read_keyed_state(self, location: Any, items: list, uid: str) -> dict:
        return merge_tables(self._per_item(items, read_state_task(location, uid)))

    def remove_local_state(self, location: Any, job_id: str) -> int:
        tasks = max(2, 2 * self.default_parallelism())
        return sum(self._per_item(list(range(tasks)), remove_task(location, job_id)))

    def savepoint_tables(self, access: Any, op: Any) -> dict:
        read = _subtask_reader(access, op)
        return merge_tables(frames.run_per_item(self.spark, list(op.subtasks), lambda sub: [read(sub)]))

    def savepoint_dataframe(self, access: Any, op: Any, kinds: dict, state_name: str | None) -> Any:
        """Read by one Spark task per parallel instance; the rows come here and become a
        DataFrame of the session (classic sessions keep them on the executors)."""
        return self.rows_dataframe(state_rows(self.savepoint_tables(access, op), kinds, state_name), state_name is None)

    # -- shipping code ----------------------------------------------------------------------------

    def ship_python_dependencies(self, config: Any) -> None:
        """``python.files`` (directories zipped) and ``python.requirements`` (installed, zipped) as
        ``addArtifacts(pyfile=True)``, ``python.archives`` as ``addArtifacts(archive=True)``
        (unpacked under their ``#alias``); each once per session."""
        files, requirements = config.get("python.files"), config.get("python.requirements")
        shipped = executor_py_files(files, requirements) if (files or requirements) else []
        self.ship_python_files(",".join(shipped))
        done = self._shipped()
        for archive in check_archives(config.get("python.archives")):
            if ("archive", archive) not in done:
                self.spark.addArtifacts(archive, archive=True)
                done.add(("archive", archive))

    def ship_python_files(self, files: str | None) -> None:
        if not files:
            return
        done = self._shipped()
        for path in (f for f in files.split(",") if f):
            if ("pyfile", path) not in done:
                self.spark.addArtifacts(path, pyfile=True)
                done.add(("pyfile", path))

    def _shipped(self) -> set:
        done = getattr(self, "_artifacts", None)
        if done is None:
            done = self._artifacts = set()
        return done


def _loopback(host: str) -> bool:
    host = host.strip("[]").rstrip(".").lower()
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
