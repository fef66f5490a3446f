"""The compatibility subset's runs (tests/compat_subset.py) on the other PySpark minors
(tests/test_pyspark_versions.py) and on a Spark Connect server (tests/test_connect_compat.py),
run in the background while the rest of the suite runs.

Each run is a pytest process of its own, whose Spark jobs leave the cores idle much of the time
(JVM start-up, checkpoints, restarts), as do the suite's. So, when the session's tests are
collected and some of those modules' tests are among them (tests/conftest.py):

- the two modules' tests move to the end of the session;
- one background thread builds the venvs it needs (tests/pyspark_venvs.py) and runs the subsets,
  one after another, the oldest PySpark first: 3.5, a Spark Connect server, 4.0, 4.1, 4.2;
- the thread runs at a lower priority (``nice`` 5: on Linux a thread's nice value is its own, and
  the processes it starts inherit it), so the suite's own timing is disturbed as little as can be.

The tests at the end then read each run's verdict (``result(name)``), waiting for it if it has
not finished. A test asking for a run nobody scheduled (a module run by hand with ``-k``) gets it
scheduled then. A whole suite on 2 cores has over half an hour of such idle time; run alone, the
two modules take about as long as the runs one after another.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from compat_subset import child_env, run_subset
from pyspark_venvs import ensure_venv

MODULES = ("test_pyspark_versions", "test_connect_compat")  # whose tests read these runs
VERSIONS = ("3.5.9", "4.0.5", "4.1.4", "4.2.1")  # the latest patch of every minor but the suite's own
NICE = 5
SUBSET_TIMEOUT = 1800  # seconds: one run at a low priority beside the suite
# what the suite's own Spark or test settings set: never for another PySpark or the Connect run
INHERITED_NOT = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET",
                 "SPARK_HOME", "PYTHONHOME", "VIRTUAL_ENV", "FLOWPOINT_TEST_RUNTIME", "FLOWPOINT_TEST_MASTER",
                 "SPARK_REMOTE", "SPARK_API_MODE", "SPARK_CONNECT_MODE_ENABLED", "FLOWPOINT_EXPECT_PYSPARK",
                 "FLOWPOINT_TEST_CPU_LOG", "PYTEST_ADDOPTS")


def version_env(version: str) -> dict:
    return child_env(INHERITED_NOT, FLOWPOINT_EXPECT_PYSPARK=version)


def _lower_priority() -> None:
    try:
        os.nice(NICE)
    except OSError:  # not allowed here: the runs then compete at the suite's priority
        pass


class BackgroundRuns:
    """Named background work, one item at a time in one low-priority thread: ``venv-<version>``
    -> ``(venv python, seconds to build)``; ``subset-<version>`` -> ``(venv seconds, subset seconds,
    finished process, junit xml)``; ``connect`` -> ``(url, subset seconds, finished process, junit
    xml)``, or a ServerFailed when no server started."""

    def __init__(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="compat-background", initializer=_lower_priority)
        self._futures: dict[str, Future] = {}
        self._lock = threading.Lock()
        self._root = Path(tempfile.mkdtemp(prefix="flowpoint-compat-"))

    def schedule(self, names: list[str]) -> None:
        for name in names:
            self._submit(name)

    @property
    def root(self) -> Path:
        """The runs' files (kept when the session failed)."""
        return self._root

    def schedule_call(self, name: str, work) -> None:
        """Run ``work()`` in the same thread after what is scheduled (tests/background_shard.py)."""
        with self._lock:
            if name not in self._futures:
                self._futures[name] = self._pool.submit(work)

    def result(self, name: str):
        """The run's outcome (above), waiting for it; a run that raised raises here."""
        return self._submit(name).result()

    def _submit(self, name: str) -> Future:
        with self._lock:
            if name not in self._futures:
                self._futures[name] = self._pool.submit(self._work(name))
            return self._futures[name]

    def _work(self, name: str):
        kind, _, version = name.partition("-")
        if kind == "venv":
            return lambda: ensure_venv(version)
        if kind == "subset":
            return lambda: self._subset(version)
        if kind == "connect":
            return self._connect
        msg = f"no background run named {name!r}"
        raise ValueError(msg)

    def _subset(self, version: str):
        venv = self._futures.get(f"venv-{version}")  # built before this item when it was scheduled before it
        python, built = venv.result() if venv is not None and venv.done() else ensure_venv(version)
        xml = self._root / f"compat-{version}.xml"
        took, proc = run_subset(python, xml, version_env(version), timeout=SUBSET_TIMEOUT, edges=version == VERSIONS[0])
        return built, took, proc, xml

    def _connect(self):
        # test-only helper modules, loaded when the Connect run starts (grpc may be missing)
        from connect_server import ServerFailed, connect_server

        log_dir = self._root / "connect"
        log_dir.mkdir()
        try:
            with connect_server(log_dir, name="flowpoint-connect-compat") as url:
                took, proc = run_subset(sys.executable, self._root / "compat-connect.xml",
                                        child_env(INHERITED_NOT, FLOWPOINT_TEST_SPARK_REMOTE=url), timeout=SUBSET_TIMEOUT)
        except ServerFailed as e:
            return e
        return url, took, proc, self._root / "compat-connect.xml"

    def close(self, keep: bool) -> None:
        """Stop taking work, wait for the running item; the runs' files go unless ``keep``."""
        self._pool.shutdown(wait=True, cancel_futures=True)
        if not keep:
            shutil.rmtree(self._root, ignore_errors=True)


def wanted(items) -> list[str]:
    """The runs the selected tests read, in the order they should run."""
    names = set()
    for item in items:
        module = item.module.__name__.rpartition(".")[2]
        if module == "test_connect_compat" and importlib.util.find_spec("grpc"):
            names.add("connect")
        elif module == "test_pyspark_versions":
            params = getattr(getattr(item, "callspec", None), "params", {})
            if "version" in params:
                names.update((f"venv-{params['version']}", f"subset-{params['version']}"))
            elif "venv_3_5" in getattr(item, "fixturenames", ()):
                names.add(f"venv-{VERSIONS[0]}")
    order = [f"venv-{VERSIONS[0]}", f"subset-{VERSIONS[0]}", "connect"]
    order += [f"{kind}-{v}" for v in VERSIONS[1:] for kind in ("venv", "subset")]
    return [n for n in order if n in names]


# the modules whose tests wait most (a rate held for a minute, backpressure, scrapes during a
# run, brokers, kill and restart): in a whole suite on 2 cores their tests leave 40-90% of both
# cores idle (tests/cpu_log.py's accounting of one run: some 9 core-minutes in 7.5 minutes),
# about what the runs above need. Run first, while the runs go on, they lend the runs that idle
# time; after them, the runs took a quarter of the cores from the busiest tests of the suite.
WHILE_RUNS = ("test_unaligned", "test_soak", "test_continuous_flow", "test_prometheus", "test_kafka_sink",
              "test_kafka_source", "test_terminal_output", "test_restart_contract", "test_notebook", "test_ui",
              "test_kafka_example", "test_shared_directories")


def last(items: list) -> None:
    """Move the tests that read the runs to the end of the session (in place), keeping their
    order; when there are any (the runs will start), the tests of WHILE_RUNS to its start."""
    def module(item) -> str:
        return item.module.__name__.rpartition(".")[2]

    reading = [i for i in items if module(i) in MODULES]
    rest = [i for i in items if module(i) not in MODULES]
    if reading:
        rest = [i for i in rest if module(i) in WHILE_RUNS] + [i for i in rest if module(i) not in WHILE_RUNS]
    items[:] = rest + reading
