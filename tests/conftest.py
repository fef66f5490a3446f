"""Shared fixtures: one local Spark session (2 cores, 4 attempts per task) for the whole run.

``FLOWPOINT_TEST_SPARK_REMOTE=sc://host:port``: that session is instead a Spark Connect session of
the server there (``spark``, ``make_env`` and ``build_env`` give it to every environment), and
``$SPARK_REMOTE`` is set to the same address for the whole run, so jobs a test starts as a
subprocess (``flowpoint run ...``, a job script) connect to it too. tests/test_connect_compat.py
runs the compatibility subset so (tests/connect_server.py starts a server by hand).
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # test helper modules import on executors too
# every job registers itself (flowpoint list): keep the suite's jobs out of the user's ~/.flowpoint
os.environ.setdefault("FLOWPOINT_HOME", tempfile.mkdtemp(prefix="flowpoint-tests-home-"))
# the suite starts some 300 Spark JVMs (its jobs' drivers, each `flowpoint run`), nearly all for
# seconds: with the client compiler only and the serial collector one starts and runs a short job
# in about 0.6 of the time on 2 busy cores (the standalone cluster's daemons run so too); what
# they compute is the same. The executors of local-cluster and standalone jobs too, through a
# spark-defaults.conf of the suite's own (Spark reads $SPARK_CONF_DIR's when a driver starts).
_FAST_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
for _var in ("SPARK_SUBMIT_OPTS", "SPARK_LAUNCHER_OPTS"):
    os.environ.setdefault(_var, _FAST_JVM)
if "SPARK_CONF_DIR" not in os.environ:
    _conf = tempfile.mkdtemp(prefix="flowpoint-tests-spark-conf-")
    with open(os.path.join(_conf, "spark-defaults.conf"), "w") as _f:
        _f.write(f"spark.executor.extraJavaOptions {_FAST_JVM}\n")
    os.environ["SPARK_CONF_DIR"] = _conf

import dataclasses  # noqa: E402

import background_shard  # noqa: E402
import compat_background  # noqa: E402

from flowpoint import StreamExecutionEnvironment  # noqa: E402
from flowpoint.api import config as _config  # noqa: E402

MASTER = os.environ.get("FLOWPOINT_TEST_MASTER", "local[2,4]")

# Jobs built in this process run in epochs unless a test chooses (most tests were written for
# the epoch runtime's timing and assert its epochs); FLOWPOINT_TEST_RUNTIME=continuous (or auto,
# the default users get) runs them on another runtime. Jobs a test starts as a subprocess
# (`flowpoint run ...`) get the user's default, `auto`.
TEST_RUNTIME = os.environ.get("FLOWPOINT_TEST_RUNTIME", "epoch")
_config.OPTIONS["execution.runtime"] = dataclasses.replace(_config.OPTIONS["execution.runtime"], default=TEST_RUNTIME)
OTHER_USER = "flowpoint-other"

SPARK_REMOTE = os.environ.get("FLOWPOINT_TEST_SPARK_REMOTE") or None
if SPARK_REMOTE:
    os.environ["SPARK_REMOTE"] = SPARK_REMOTE  # subprocesses' jobs connect to the same server


def ensure_other_user() -> tuple[int, bool]:
    """``(uid of OTHER_USER, whether this call created it)``: created with useradd (root only),
    nobody (65534) where it cannot be."""
    try:
        return pwd.getpwnam(OTHER_USER).pw_uid, False
    except KeyError:
        pass
    created = False
    if shutil.which("useradd"):
        created = subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", OTHER_USER],
                                 capture_output=True, check=False).returncode == 0
    try:
        return pwd.getpwnam(OTHER_USER).pw_uid, created
    except KeyError:
        return 65534, False


def remove_other_user() -> None:
    if shutil.which("userdel"):
        subprocess.run(["userdel", OTHER_USER], capture_output=True, check=False)


@pytest.fixture(scope="session")
def other_uid(request):
    """The uid of another OS user, who plants files and directories in the security tests:
    created with useradd when running as root (as CI does) and removed after the session if this
    session created it; else nobody (65534). Files owned by it need root (chown). The background
    shard's child (tests/background_shard.py) uses the one its parent made and never removes it."""
    if os.geteuid() != 0:
        pytest.skip("giving a directory to another user needs root (chown); run the suite as root, as CI does")
    made = getattr(request.config, "other_user", None)  # made at collection for the shard: removed at the session's end
    uid, created = made if made is not None else ensure_other_user()
    yield uid
    if created and made is None and not os.environ.get("FLOWPOINT_TEST_SHARD"):
        remove_other_user()


@pytest.fixture(scope="session")
def spark():
    """The run's session: classic on ``MASTER``, or a Spark Connect session of ``SPARK_REMOTE``."""
    if SPARK_REMOTE:
        from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

        session = RemoteSparkSession.builder.remote(SPARK_REMOTE).create()
        yield session
        session.stop()
        return
    from flowpoint.spark.session import get_spark_session

    session = get_spark_session(MASTER, "flowpoint-tests")
    yield session
    session.stop()


@pytest.fixture(scope="session")
def standalone_cluster(tmp_path_factory):
    """A Spark standalone master and two 1-core workers on loopback, each worker seeing a private
    directory at ``standalone_cluster.working_dir`` (see tests/standalone_cluster.py). Slow tests
    only; skipped where mount namespaces are unavailable."""
    from standalone_cluster import StandaloneCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"standalone cluster: {reason}")
    with StandaloneCluster(base_dir=tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster


def build_env(spark, working_dir, parallelism: int = 2, max_records: int | None = None, **config):
    """A quiet StreamExecutionEnvironment on the test session; ``config`` keys use ``_`` for ``.``."""
    settings = {"execution.progress.interval": -1, "state.working.dir": str(working_dir)}
    settings["execution.runtime"] = TEST_RUNTIME  # see TEST_RUNTIME above
    settings.update({k.replace("_", "."): v for k, v in config.items()})
    env = StreamExecutionEnvironment.get_execution_environment(settings, spark_session=spark)
    env.set_parallelism(parallelism)
    if max_records:
        env.set_epoch_max_records(max_records)
    return env


@pytest.fixture
def make_env(spark, tmp_path):
    """``make_env(parallelism=2, max_records=None, **config)`` -> a StreamExecutionEnvironment."""

    def factory(parallelism: int = 2, max_records: int | None = None, **config):
        return build_env(spark, tmp_path / "working", parallelism, max_records, **config)

    return factory


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """One embedded Tansu broker (memory storage, loopback, free port) for the whole run; tests
    create topics of their own names on it (``kafka_broker.create_topic(name, partitions)``)."""
    pytest.importorskip("confluent_kafka")
    from flowpoint.connectors.kafka.broker import EmbeddedKafka

    broker = EmbeddedKafka(log_dir=str(tmp_path_factory.mktemp("tansu")))
    broker.start()
    yield broker
    broker.stop()


pytest_plugins = ["cpu_log"]  # FLOWPOINT_TEST_CPU_LOG=<file>: each test's wall and the machine's CPU time


def pytest_collection_modifyitems(session, config, items):
    compat_background.last(items)  # their runs go on in the background meanwhile
    if compat_background.wanted(items):  # a whole suite: the background shard's tests go last but those
        shard = background_shard.items_of(items)
        reading = [i for i in items if background_shard.module_of(i) in compat_background.MODULES]
        items[:] = [i for i in items if i not in shard and i not in reading] + shard + reading


def pytest_collection_finish(session):
    config = session.config
    names = compat_background.wanted(session.items)
    if names and not config.option.collectonly:
        config.compat_background = compat_background.BackgroundRuns()
        config.compat_background.schedule(names)
        shard = background_shard.items_of(session.items)
        if shard:
            if any("other_uid" in getattr(i, "fixturenames", ()) for i in shard):
                config.other_user = ensure_other_user()  # made here, removed here: the child finds it
            run = config.background_shard = background_shard.ShardRun([i.nodeid for i in shard], config.compat_background.root)
            config.compat_background.schedule_call("shard", run.run)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    shard = getattr(item.config, "background_shard", None)
    if shard is None or item.nodeid not in shard.nodeids:
        return None
    background_shard.report_in_session(item, shard)
    return True


def pytest_sessionfinish(session, exitstatus):
    shard = getattr(session.config, "background_shard", None)
    if shard is not None:
        shard.stop()  # an interrupted session does not wait for it
    runs = getattr(session.config, "compat_background", None)
    if runs is not None:
        runs.close(keep=exitstatus != 0)
    _, created = getattr(session.config, "other_user", (None, False))
    if created:
        remove_other_user()


@pytest.fixture(scope="session")
def compat_runs(request) -> compat_background.BackgroundRuns:
    """The compatibility subset's background runs (tests/compat_background.py)."""
    runs = getattr(request.config, "compat_background", None)
    if runs is None:  # nothing was scheduled at collection: runs start when a test asks
        runs = request.config.compat_background = compat_background.BackgroundRuns()
    return runs
