"""A Spark standalone cluster on this machine that behaves like several hosts.

One master and ``workers`` workers (default 2), started with pyspark's own launcher
(``<pyspark>/sbin/spark-daemon.sh start org.apache.spark.deploy.{master.Master,worker.Worker}``,
what ``start-master.sh``/``start-worker.sh`` run; the pip package of pyspark ships no
``start-*.sh``), all on 127.0.0.1, with ``SPARK_HOME`` = the pyspark package directory and
``SPARK_NO_DAEMONIZE`` set so every daemon stays a tracked child of this process.

Each worker runs in its own mount and PID namespace (``unshare --mount --pid --fork
--kill-child --mount-proc --propagation private``, needs root): its private directory
``<base>/worker-<i>/private`` is bind-mounted over the common path :attr:`StandaloneCluster.working_dir`
(``<base>/working``), the path a driver names as ``state.working.dir``. So, as on hosts that
share no disk, every executor (a child of its worker, in the same namespaces) sees only its own
worker's files at that path, and the driver, outside every namespace, sees a third directory.
Each worker also has its own ``SPARK_WORKER_DIR``, ``SPARK_LOCAL_DIRS``, ``SPARK_PID_DIR`` and
``SPARK_LOG_DIR`` under ``<base>/worker-<i>/``, 1 core and 1g of memory (arguments
``cores``/``memory``). Killing a worker's namespace init kills every process in it (worker JVM,
executor JVM, Python daemon and workers, whatever their process group): that is
:meth:`~StandaloneCluster.kill_worker` (a host lost with everything on it) and teardown.
Web UIs bind to 127.0.0.1 (``SPARK_LOCAL_IP``), as do the RPC ports; all ports are free ones.
Executors run this Python (``PYSPARK_PYTHON=sys.executable``) with this process's import path
plus the ``tests`` folder on ``PYTHONPATH``, so test helper modules import on executors.

Use from pytest (session-scoped; skipped where namespaces are unavailable), marking the test slow::

    @pytest.mark.slow
    def test_on_two_hosts(standalone_cluster, tmp_path):
        conf = standalone_cluster.driver_conf()          # spark.master, one executor per worker, ...
        working = standalone_cluster.working_dir         # pass as state.working.dir
        ...run a driver in a subprocess (one SparkContext per process), e.g. with -D k=v of conf...
        standalone_cluster.kill_worker(1)                # host loss
        standalone_cluster.restart_worker(1)             # a host back (same disk unless wipe=True)

A test that kills a worker should restart it (or call :meth:`~StandaloneCluster.ensure_workers`)
before it ends: the cluster is shared by the whole session.

Use from a script or benchmark::

    sys.path.insert(0, "tests")
    from standalone_cluster import StandaloneCluster
    with StandaloneCluster() as cluster:                 # a temporary base directory, removed after
        spark = SparkSession.builder.config(map=cluster.driver_conf()).getOrCreate()

``python tests/standalone_cluster.py`` starts one and prints its URLs until Ctrl-C.

The daemons die with the thread that started them (``PR_SET_PDEATHSIG``), so a crashed test run
leaves no cluster behind: start the cluster from a thread that outlives its use (the main one).

The driver settings (:meth:`~StandaloneCluster.driver_conf`) give each worker exactly one
executor: ``spark.executor.cores=1`` on 1-core workers, ``spark.cores.max`` = the number of
workers, and ``spark.scheduler.minRegisteredResourcesRatio=1.0`` so the first job waits until
every executor has registered (standalone mode only waits when ``spark.cores.max`` is set).
``spark.executor.instances`` is not needed in standalone mode.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
_PR_SET_PDEATHSIG = 1


def spark_home() -> str:
    import pyspark

    return os.path.dirname(os.path.abspath(pyspark.__file__))


def unavailable_reason() -> str | None:
    """Why this machine cannot run the cluster (None: it can)."""
    if not sys.platform.startswith("linux"):
        return "needs Linux mount and PID namespaces"
    if os.geteuid() != 0:
        return "needs root for unshare --mount and bind mounts"
    if shutil.which("unshare") is None or shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        return "needs util-linux unshare and Java"
    if not os.path.isfile(os.path.join(spark_home(), "sbin", "spark-daemon.sh")):
        return "pyspark has no sbin/spark-daemon.sh"
    try:
        subprocess.run(["unshare", "--mount", "--pid", "--fork", "true"], check=True, capture_output=True, timeout=10)
    except (subprocess.SubprocessError, OSError) as e:
        return f"unshare --mount --pid does not work here: {e}"
    return None


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the thread that started it ends (no leaked clusters)."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort
        pass


def _children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def process_tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (host PIDs), parents first."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop(0)
        out.append(p)
        todo.extend(_children(p))
    return out


def process_alive(pid: int) -> bool:
    """``pid`` runs (exists and is not a zombie)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _kill(pids: list[int], sig: int) -> None:
    for p in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(p, sig)


def _tail(path: str, n: int = 30) -> str:
    try:
        with open(path, errors="replace") as f:
            return "".join(f.readlines()[-n:])
    except OSError:
        return "(no log)"


class _Daemon:
    """One daemon: ``unshare`` (tracked Popen) -> namespace init -> spark-daemon.sh -> JVM."""

    def __init__(self, name: str, cmd: list[str], env: dict[str, str], log_path: str):
        self.name, self.log_path = name, log_path
        self.log = open(log_path, "ab")  # noqa: SIM115 - closed in kill()
        self.proc = subprocess.Popen(
            cmd, env=env, stdin=subprocess.DEVNULL, stdout=self.log, stderr=subprocess.STDOUT,
            start_new_session=True, preexec_fn=_die_with_parent,  # noqa: PLW1509
        )

    def alive(self) -> bool:
        return self.proc.poll() is None

    def pids(self) -> list[int]:
        return process_tree(self.proc.pid) if self.alive() else []

    def kill(self, timeout: float = 10.0) -> None:
        """SIGKILL every process of the daemon (its namespace init first: the kernel then kills
        everything in the PID namespace, whatever process group a process moved to)."""
        tree = self.pids()
        _kill(tree[1:2], signal.SIGKILL)  # the namespace init
        _kill(tree, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout)
        deadline = time.monotonic() + timeout
        while any(process_alive(p) for p in tree) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.log.close()


class StandaloneCluster:
    """A master and ``workers`` workers on 127.0.0.1, each worker seeing a private
    :attr:`working_dir` (see the module doc). A context manager; :meth:`start` / :meth:`stop` too.

    Attributes after :meth:`start`: ``master_url`` (``spark://127.0.0.1:<port>``),
    ``master_ui_url``, ``working_dir`` (the common path P; on the driver's side its own
    directory), ``base_dir``, ``workers`` (count).
    """

    def __init__(
        self,
        workers: int = 2,
        cores: int = 1,
        memory: str = "1g",
        base_dir: str | os.PathLike | None = None,
        python_path: list[str] | None = None,
        startup_timeout: float = 60.0,
        keep_base_dir: bool = False,
        distinct_hosts: bool = True,
    ):
        self.workers = workers
        self.distinct_hosts = distinct_hosts
        self.cores = cores
        self.memory = memory
        self._own_base = base_dir is None
        self.base_dir = os.path.abspath(os.fspath(base_dir)) if base_dir else tempfile.mkdtemp(prefix="flowpoint-standalone-")
        self.working_dir = os.path.join(self.base_dir, "working")
        self.python_path = python_path
        self.startup_timeout = startup_timeout
        self.keep_base_dir = keep_base_dir or bool(os.environ.get("FLOWPOINT_KEEP_CLUSTER_DIR"))
        self.master_port = self.master_ui_port = 0
        self.master_url = self.master_ui_url = ""
        self._master: _Daemon | None = None
        self._workers: list[_Daemon | None] = [None] * workers
        self._worker_ports: list[int] = [0] * workers

    # -- paths ---------------------------------------------------------------------------------

    def worker_dir(self, i: int) -> str:
        """Worker ``i``'s own directory (work, local, pids, logs, private)."""
        return os.path.join(self.base_dir, f"worker-{i}")

    def worker_host(self, i: int) -> str:
        """The address worker ``i`` and its executors bind to and are known by: 127.0.0.<i+2>
        (loopback, but a host of its own to Spark's scheduler) unless ``distinct_hosts=False``."""
        return f"127.0.0.{i + 2}" if self.distinct_hosts else "127.0.0.1"

    def private_dir(self, i: int) -> str:
        """Where the files worker ``i`` (and its executors) see at :attr:`working_dir` really are."""
        return os.path.join(self.worker_dir(i), "private")

    def worker_log(self, i: int) -> str:
        return os.path.join(self.worker_dir(i), "logs", "worker.out")

    @property
    def master_log(self) -> str:
        return os.path.join(self.base_dir, "master", "logs", "master.out")

    # -- settings ------------------------------------------------------------------------------

    def driver_conf(self) -> dict[str, str]:
        """Spark settings for a driver on this machine: one executor per worker, waiting for all
        of them before the first job, driver on loopback."""
        return {
            "spark.master": self.master_url,
            "spark.executor.cores": str(self.cores),
            "spark.cores.max": str(self.cores * self.workers),
            "spark.executor.memory": self.memory,
            "spark.scheduler.minRegisteredResourcesRatio": "1.0",
            "spark.scheduler.maxRegisteredResourcesWaitingTime": f"{int(self.startup_timeout)}s",
            "spark.driver.host": "127.0.0.1",
            "spark.driver.bindAddress": "127.0.0.1",
            "spark.ui.enabled": "false",
        }

    def _env(self, role_dir: str) -> dict[str, str]:
        path = self.python_path
        if path is None:
            path = [HERE, *(p for p in sys.path if p and os.path.isdir(p))]
        existing = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("SPARK_", "PYSPARK_"))}
        env.update(
            SPARK_HOME=spark_home(),
            SPARK_CONF_DIR=os.path.join(self.base_dir, "conf"),
            SPARK_NO_DAEMONIZE="1",
            SPARK_LOCAL_IP="127.0.0.1",
            SPARK_MASTER_HOST="127.0.0.1",
            SPARK_LOG_DIR=os.path.join(role_dir, "logs"),
            SPARK_PID_DIR=os.path.join(role_dir, "pids"),
            SPARK_IDENT_STRING=os.path.basename(role_dir),
            PYSPARK_PYTHON=sys.executable,
            PYTHONPATH=os.pathsep.join(dict.fromkeys([*existing, *path])),
            # a short-lived daemon: start fast (C1 only), small heap
            SPARK_DAEMON_MEMORY="256m",
            SPARK_DAEMON_JAVA_OPTS="-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
        )
        return env

    def _daemon_cmd(self, cls: str, instance: int, args: list[str]) -> list[str]:
        return [os.path.join(spark_home(), "sbin", "spark-daemon.sh"), "start", cls, str(instance), *args]

    # -- life cycle ----------------------------------------------------------------------------

    def start(self) -> StandaloneCluster:
        t0 = time.monotonic()
        os.makedirs(os.path.join(self.base_dir, "conf"), exist_ok=True)
        os.makedirs(self.working_dir, exist_ok=True)
        master_dir = os.path.join(self.base_dir, "master")
        for sub in ("logs", "pids"):
            os.makedirs(os.path.join(master_dir, sub), exist_ok=True)
        self.master_port, self.master_ui_port = free_port(), free_port()
        self.master_url = f"spark://127.0.0.1:{self.master_port}"
        self.master_ui_url = f"http://127.0.0.1:{self.master_ui_port}"
        # the master in a PID namespace too: killing its init leaves nothing behind
        cmd = ["unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", *self._daemon_cmd(
            MASTER_CLASS, 1, ["--host", "127.0.0.1", "--port", str(self.master_port), "--webui-port", str(self.master_ui_port)],
        )]
        try:
            env = self._env(master_dir)
            # no REST submission server (it would take the fixed port 6066)
            env["SPARK_MASTER_OPTS"] = "-Dspark.master.rest.enabled=false"
            self._master = _Daemon("master", cmd, env, self.master_log)
            # a worker that finds no master retries only after 5 to 15 s: start them once it listens
            self._wait_for_master()
            for i in range(self.workers):
                self._start_worker(i)
            self.wait_for_workers()
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - t0
        return self

    def _start_worker(self, i: int, wipe: bool = False) -> None:
        d = self.worker_dir(i)
        if wipe:
            shutil.rmtree(d, ignore_errors=True)
        for sub in ("work", "local", "pids", "logs", "private"):
            os.makedirs(os.path.join(d, sub), exist_ok=True)
        os.chmod(self.private_dir(i), 0o700)
        env = self._env(d)
        env.update(
            SPARK_WORKER_DIR=os.path.join(d, "work"),
            SPARK_LOCAL_DIRS=os.path.join(d, "local"),
            SPARK_WORKER_CORES=str(self.cores),
            SPARK_WORKER_MEMORY=self.memory,
            SPARK_LOCAL_IP=self.worker_host(i),
        )
        self._worker_ports[i] = port = free_port()
        spark = self._daemon_cmd(WORKER_CLASS, i + 1, [
            "--host", self.worker_host(i), "--port", str(port), "--webui-port", str(free_port()),
            "--cores", str(self.cores), "--memory", self.memory, "--work-dir", os.path.join(d, "work"),
            self.master_url,
        ])
        bind = 'src=$1; dst=$2; shift 2; mount --bind "$src" "$dst" && exec "$@"'
        cmd = [
            "unshare", "--mount", "--pid", "--fork", "--kill-child", "--mount-proc", "--propagation", "private",
            "sh", "-c", bind, "sh", self.private_dir(i), self.working_dir, *spark,
        ]
        self._workers[i] = _Daemon(f"worker-{i}", cmd, env, self.worker_log(i))

    def stop(self) -> None:
        """Kill every worker (with its executors and Python workers) and the master; remove the
        base directory if this cluster created it (unless ``keep_base_dir`` or
        ``$FLOWPOINT_KEEP_CLUSTER_DIR``)."""
        for i, w in enumerate(self._workers):
            if w is not None:
                w.kill()
                self._workers[i] = None
        if self._master is not None:
            self._master.kill()
            self._master = None
        if self._own_base and not self.keep_base_dir:
            shutil.rmtree(self.base_dir, ignore_errors=True)

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- workers -------------------------------------------------------------------------------

    def worker_pids(self, i: int) -> list[int]:
        """Host PIDs of worker ``i``'s processes (unshare, namespace init, JVMs, Python), or []."""
        w = self._workers[i]
        return w.pids() if w is not None else []

    def worker_port(self, i: int) -> int:
        """Worker ``i``'s RPC port (the master lists workers by it; a restart takes a new one)."""
        return self._worker_ports[i]

    def kill_worker(self, i: int) -> None:
        """kill -9 of worker ``i`` and everything it started (executor JVM, Python workers), as
        when its host is lost. Returns once they are gone; the master and drivers notice at once
        (their connections close)."""
        w = self._workers[i]
        if w is not None:
            w.kill()
            self._workers[i] = None

    def restart_worker(self, i: int, wipe: bool = False) -> None:
        """Start worker ``i`` again (killing it first if it runs), with the same directories
        (``wipe=True``: empty ones, a new host), and wait until the master lists it ALIVE. A
        running application gets an executor on it again if it is short of its cores."""
        self.kill_worker(i)
        self._start_worker(i, wipe)
        self.wait_for_workers([i])

    def ensure_workers(self) -> None:
        """Restart any worker that is not running."""
        dead = [i for i, w in enumerate(self._workers) if w is None or not w.alive()]
        for i in dead:
            self.restart_worker(i)

    def master_state(self) -> dict:
        """The master's JSON state (workers, applications)."""
        with urllib.request.urlopen(self.master_ui_url + "/json/", timeout=5) as r:  # noqa: S310 - loopback
            return json.load(r)

    def alive_worker_ports(self) -> set[int]:
        return {w["port"] for w in self.master_state().get("workers", []) if w.get("state") == "ALIVE"}

    def _wait_for_master(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while True:
            if self._master is None or not self._master.alive():
                msg = f"standalone master exited while starting; end of {self.master_log}:\n{_tail(self.master_log)}"
                raise RuntimeError(msg)
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", self.master_port), timeout=1):
                return
            if time.monotonic() > deadline:
                msg = f"standalone master not listening after {self.startup_timeout} s:\n{_tail(self.master_log)}"
                raise RuntimeError(msg)
            time.sleep(0.05)

    def wait_for_workers(self, which: list[int] | None = None) -> None:
        which = list(range(self.workers)) if which is None else which
        deadline = time.monotonic() + self.startup_timeout
        while True:
            for name, d in [("master", self._master), *((f"worker-{i}", self._workers[i]) for i in which)]:
                if d is None or not d.alive():
                    log = d.log_path if d is not None else "?"
                    msg = f"standalone {name} exited while starting; end of {log}:\n{_tail(log)}"
                    raise RuntimeError(msg)
            with contextlib.suppress(OSError, ValueError):
                if {self._worker_ports[i] for i in which} <= self.alive_worker_ports():
                    return
            if time.monotonic() > deadline:
                msg = (f"standalone workers {which} not registered after {self.startup_timeout} s; "
                       f"master log:\n{_tail(self.master_log)}\nworker log:\n{_tail(self.worker_log(which[0]))}")
                raise RuntimeError(msg)
            time.sleep(0.1)


if __name__ == "__main__":
    with StandaloneCluster() as c:
        print(f"master {c.master_url} (UI {c.master_ui_url}), working dir {c.working_dir}, "
              f"started in {c.startup_seconds:.1f} s; base {c.base_dir}", flush=True)
        print("driver settings: " + " ".join(f"-D {k}={v}" for k, v in c.driver_conf().items()), flush=True)
        with contextlib.suppress(KeyboardInterrupt):
            while True:
                time.sleep(3600)
