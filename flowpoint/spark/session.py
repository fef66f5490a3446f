"""Getting a SparkSession: an existing one, or one flowpoint creates (local Spark by default).

When flowpoint creates the session, every ``spark.*`` setting of the job's configuration
(``-D spark.executor.memory=4g`` on ``flowpoint run``, the same keys in ``flowpoint.yaml`` or in
the environment's Configuration) reaches the SparkSession builder as ``.config(key, value)``,
after flowpoint's own defaults, so the user's value wins (``spark.master`` is the master). For a
local master (``local``, ``local[...]``, ``local-cluster[...]``) the driver binds to 127.0.0.1
unless ``spark.driver.bindAddress`` / ``spark.driver.host`` say otherwise; for a cluster master
the driver keeps the address Spark would choose (executors on other hosts must reach it).

Spark's web UI binds to ``$SPARK_LOCAL_IP``, else to every interface. For the driver JVM it
starts, flowpoint sets ``SPARK_LOCAL_IP=127.0.0.1`` unless the user set ``SPARK_LOCAL_IP``
(then the UI, and Spark's default driver address, follow the user's value); since that variable
is also Spark's default driver address, a cluster master's ``spark.driver.host`` is then set to
the address Spark would have chosen without it (:func:`spark_default_driver_host`), unless the
user set it. ``spark.ui.enabled=false`` turns the UI off.

Under ``spark-submit`` the master and every ``--conf`` it was given stand: flowpoint's defaults
fill in only what it did not set, and the JVM it started keeps its environment.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from flowpoint.errors import ConfigurationError
from flowpoint.python_deps import DRIVER_ONLY_PATHS, check_archives, executor_py_files
from flowpoint.spark.adapter import is_connect_session
from flowpoint.spark.jvm_output import start_driver_jvm
from flowpoint.spark.versions import check_spark_version

log = logging.getLogger("flowpoint")

DEFAULT_MASTER = "local[*,4]"  # local[*] with up to 4 attempts per task, so Spark retries failed tasks
LOOPBACK = "127.0.0.1"


LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")

def _python_path() -> str:
    """The driver's import path, so executors' Python workers import the same modules (but not
    the driver's paths of python.files/python.requirements: executors import what Spark shipped)."""
    existing = [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x and x not in DRIVER_ONLY_PATHS]
    here = [p for p in sys.path if p and os.path.isdir(p) and p not in DRIVER_ONLY_PATHS]
    return os.pathsep.join(dict.fromkeys([*existing, *here]))


def default_master(slots: int) -> str:
    """``local[*,4]``, with more task threads than cores when the job needs more slots."""
    cores = os.cpu_count() or 1
    return DEFAULT_MASTER if slots <= cores else f"local[{slots},4]"


def is_local_master(master: str) -> bool:
    """``local``, ``local[4]``, ``local[*,4]``, ``local-cluster[2,1,1024]``: every process on this host."""
    return master.strip().startswith("local")


def _spark_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


# which session to create, not settings of it: handled by get_spark_session itself
SESSION_KEYS = ("spark.master", "spark.remote", "spark.api.mode")


def _items(settings: Any) -> dict:
    if settings is None:
        return {}
    return settings.to_dict() if hasattr(settings, "to_dict") else dict(settings)


def spark_settings(settings: Any) -> dict[str, str]:
    """The ``spark.*`` keys of a Configuration or dict (but ``spark.master``, ``spark.remote``
    and ``spark.api.mode``, which choose the session), as strings."""
    return {
        str(k): _spark_value(v)
        for k, v in _items(settings).items()
        if str(k).startswith("spark.") and str(k) not in SESSION_KEYS and v is not None
    }


def connect_choice(settings: Any) -> tuple[str, str] | None:
    """Spark Connect, when the job asks for it: ``("remote", url)`` for ``spark.remote``
    (``flowpoint run --remote sc://host:15002``), else ``$SPARK_REMOTE``; ``("api-mode", "")``
    for ``spark.api.mode=connect`` (else ``$SPARK_API_MODE``), which starts a Spark Connect
    server for the master in this process, as PySpark does. None: a classic session."""
    items = _items(settings)
    url = items.get("spark.remote") or os.environ.get("SPARK_REMOTE")
    if url:
        return ("remote", str(url))
    mode = str(items.get("spark.api.mode") or os.environ.get("SPARK_API_MODE") or "classic").lower()
    if mode == "connect":
        return ("api-mode", "")
    return None


def session_config(
    master: str, app_name: str, settings: Any = None, python_path: str | None = None,
    submitted: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Everything flowpoint gives the SparkSession builder for ``master``: its defaults, loopback
    addresses for a local master, then the user's ``spark.*`` settings (which win).

    ``submitted``: the settings ``spark-submit`` already gave the driver's JVM (``--master``,
    ``--conf``, ``--name``, ...); flowpoint's defaults do not override them."""
    submitted = submitted or {}
    defaults = {
        "spark.app.name": app_name,
        "spark.ui.showConsoleProgress": "false",
        "spark.executorEnv.PYTHONPATH": _python_path() if python_path is None else python_path,
        "spark.python.worker.reuse": "true",
        "spark.sql.shuffle.partitions": "8",
        # Spark's and Hadoop's log lines go to standard error, never into the job's output
        "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile={LOG4J2_CONFIG.as_uri()}",
    }
    if is_local_master(master):
        defaults["spark.driver.bindAddress"] = LOOPBACK
        defaults["spark.driver.host"] = LOOPBACK
    config = {"spark.master": master}
    config.update({k: v for k, v in defaults.items() if k not in submitted})
    config.update(spark_settings(settings))
    return config


def submitted_conf() -> dict[str, str] | None:
    """The settings of the JVM ``spark-submit`` started for this driver (None: not under
    ``spark-submit``, which hands its JVM to Python through ``$PYSPARK_GATEWAY_PORT``)."""
    if "PYSPARK_GATEWAY_PORT" not in os.environ:
        return None
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized()  # connects to spark-submit's JVM; starts none
    return dict(SparkConf().getAll())


UI_MARK = "FLOWPOINT_SPARK_LOCAL_IP"  # set beside SPARK_LOCAL_IP when flowpoint chose its value


def bind_ui_to_loopback(submitted: Mapping[str, str] | None) -> bool:
    """Set ``SPARK_LOCAL_IP=127.0.0.1`` for the driver JVM about to start, so that Spark's web UI
    binds to loopback (the JVM reads it when it starts). Not when the user set ``SPARK_LOCAL_IP``
    (their choice of address), nor under ``spark-submit`` (its JVM is running). True when the
    value is flowpoint's."""
    if submitted is not None:
        return False
    current = os.environ.get("SPARK_LOCAL_IP")
    if current is not None and os.environ.get(UI_MARK) != current:
        return False
    os.environ["SPARK_LOCAL_IP"] = LOOPBACK
    os.environ[UI_MARK] = LOOPBACK
    return True


def spark_default_driver_host(launch_conf: Mapping[str, str] | None = None) -> str:
    """The driver address Spark chooses when ``$SPARK_LOCAL_IP`` is unset (its
    ``Utils.localCanonicalHostName``): ``$SPARK_LOCAL_HOSTNAME``, else the canonical name of this
    host's address, where a name that resolves to loopback is replaced by the first address of
    the last network interface that has one that is neither loopback nor link-local (IPv4
    first). Asked of the driver JVM (started here with ``launch_conf``, the settings a new
    session's JVM starts with, if it is not running yet), so names resolve as Spark's do."""
    custom = os.environ.get("SPARK_LOCAL_HOSTNAME")
    if custom:
        return custom
    from pyspark import SparkConf, SparkContext

    SparkContext._ensure_initialized(conf=SparkConf(loadDefaults=False).setAll(list((launch_conf or {}).items())))
    jvm = SparkContext._jvm
    java_net, collections = jvm.java.net, jvm.java.util.Collections
    address = java_net.InetAddress.getLocalHost()
    if address.isLoopbackAddress():
        interfaces = list(collections.list(java_net.NetworkInterface.getNetworkInterfaces()))
        if os.name != "nt":
            interfaces.reverse()  # as Spark does on Unix
        for ni in interfaces:
            found = [a for a in collections.list(ni.getInetAddresses()) if not a.isLinkLocalAddress() and not a.isLoopbackAddress()]
            if found:
                v4 = [a for a in found if a.getClass().getSimpleName() == "Inet4Address"]
                address = java_net.InetAddress.getByAddress((v4 or found)[0].getAddress())
                break
    host = str(address.getCanonicalHostName())
    return f"[{host}]" if ":" in host and not host.startswith("[") else host


def get_spark_session(master: str | None, app_name: str, existing: Any = None, settings: Any = None, slots: int = 1) -> Any:
    """``existing``, else the active session, else a new one for ``master`` (default
    ``$FLOWPOINT_SPARK_MASTER``, else spark-submit's ``--master``, else ``local[*,4]``) with
    ``settings``' ``spark.*`` keys. The default local master runs at least ``slots`` tasks at
    once (the job's largest parallelism), as Flink's local mini cluster gives a job as many
    slots as it needs: ``local[max(cores, slots),4]``."""
    connect = connect_choice(settings)
    if connect is not None and connect[0] == "remote" and not connect[1].startswith("sc://"):
        msg = f"spark.remote {connect[1]!r} is not a Spark Connect address: give sc://host:port (a local master is spark.master, with spark.api.mode=connect)"
        raise ConfigurationError(msg)
    if existing is not None or (existing := _active_session()) is not None:
        _check_mode(existing, connect, settings)
        _check_versions(existing)
        _warn_unapplied(existing, spark_settings(settings))
        return existing
    if connect is not None and connect[0] == "remote":
        explicit_master = master or _items(settings).get("spark.master")
        if explicit_master:
            where = "spark.remote" if _items(settings).get("spark.remote") else "$SPARK_REMOTE"
            msg = (
                f"spark.master {explicit_master!r} and {where} {connect[1]!r} both say where Spark runs: a Spark Connect "
                f"server has its own master; drop spark.master (-m), or unset {where} for a classic session"
            )
            raise ConfigurationError(msg)
        return _remote_session(connect[1], app_name, settings)
    import pyspark
    from pyspark.sql import SparkSession

    check_spark_version(pyspark.__version__, pyspark.__version__)  # (before a JVM starts)

    submitted = submitted_conf()
    master = master or os.environ.get("FLOWPOINT_SPARK_MASTER") or (submitted or {}).get("spark.master") or default_master(slots)
    os.environ["PYTHONPATH"] = _python_path()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    config = session_config(master, app_name, settings, os.environ["PYTHONPATH"], submitted)
    if connect is not None:  # spark.api.mode=connect: PySpark starts a Connect server for the master here
        return _api_mode_connect_session(master, config)
    ui_on_loopback = bind_ui_to_loopback(submitted)  # (before the JVM starts: it reads SPARK_LOCAL_IP)
    if submitted is None:
        try:
            start_driver_jvm(config)  # without Java's incubator-module warning (spark/jvm_output.py)
        except Exception as e:
            raise _not_started(master, e) from e
    if ui_on_loopback and not is_local_master(master) and "spark.driver.host" not in config:
        # SPARK_LOCAL_IP would also be the driver's default address: keep the one executors reach
        config["spark.driver.host"] = spark_default_driver_host(config)
    builder = SparkSession.builder
    for key, value in config.items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
    except Exception as e:
        raise _not_started(master, e) from e
    spark.sparkContext.setLogLevel("ERROR")
    _check_versions(spark)
    log.info("started Spark %s with master %s", spark.version, master)
    return spark


def _check_mode(spark: Any, connect: tuple[str, str] | None, settings: Any) -> None:
    """The job asked for Spark Connect (``spark.remote``, ``spark.api.mode=connect`` or their
    environment variables) but runs on a classic session it was given or found active: say so
    rather than run where it was not asked to."""
    if connect is None or is_connect_session(spark):
        return
    items = _items(settings)
    if connect[0] == "remote":
        asked = f"spark.remote {connect[1]!r}" if items.get("spark.remote") else f"$SPARK_REMOTE {connect[1]!r}"
    else:
        asked = "spark.api.mode=connect" if items.get("spark.api.mode") else "$SPARK_API_MODE=connect"
    msg = (
        f"{asked} asks for a Spark Connect session, but the job's SparkSession is a classic one (passed as spark_session= "
        f"or active in this process): pass a Spark Connect session, stop the classic one first, or drop {asked.split(' ')[0].split('=')[0]}"
    )
    raise ConfigurationError(msg)


def _remote_session(url: str, app_name: str, settings: Any) -> Any:
    """A Spark Connect session to the server at ``url`` (``sc://host:port``), with the job's
    ``spark.*`` settings as session settings; the server is asked for its version here, so an
    unreachable one fails the submission by name."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    builder = RemoteSparkSession.builder.remote(url).config("spark.app.name", app_name)
    for key, value in spark_settings(settings).items():
        builder = builder.config(key, value)
    try:
        spark = builder.getOrCreate()
        version = spark.version
    except Exception as e:
        msg = f"could not reach the Spark Connect server at {url}: {type(e).__name__}: {e}"
        raise ConfigurationError(msg) from e
    log.info("connected to Spark Connect %s at %s", version, url)
    return spark


API_MODE_PORT = 15002  # where PySpark's client looks for the server it started (sc://localhost)


def _api_mode_connect_session(master: str, config: dict[str, str]) -> Any:
    """``spark.api.mode=connect``: PySpark starts a Spark Connect server for ``master`` in this
    process (with flowpoint's settings, an authentication token of its own, on loopback for a
    local master) and connects to it at ``sc://localhost``, port 15002 whatever the server's
    ``spark.connect.grpc.binding.port``. A port already taken there is refused: the client would
    reach that other server, or none."""
    import socket

    from pyspark.sql import SparkSession

    port = config.get("spark.connect.grpc.binding.port")
    if port is not None and str(port) != str(API_MODE_PORT):
        msg = (
            f"spark.api.mode=connect with spark.connect.grpc.binding.port={port}: PySpark's client connects to the "
            f"server it starts at port {API_MODE_PORT} whatever that setting says; drop it, or start a Spark Connect "
            "server on that port yourself and run with --remote sc://host:port"
        )
        raise ConfigurationError(msg)
    try:
        socket.create_connection(("localhost", API_MODE_PORT), timeout=1).close()
        taken = True
    except OSError:
        taken = False
    if taken:
        msg = (
            f"spark.api.mode=connect: port {API_MODE_PORT} on this host is taken (another Spark Connect server, or a job "
            f"in this mode?), and PySpark's client would connect there instead of to the server it starts for master "
            f"{master!r}; run one such job at a time, or give that server's address with --remote sc://host:port, "
            "or run without spark.api.mode=connect (a classic session)"
        )
        raise ConfigurationError(msg)
    if is_local_master(master):
        config = {"spark.connect.grpc.binding.address": LOOPBACK, **config}
    builder = SparkSession.builder.config("spark.api.mode", "connect")
    for key, value in config.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as e:
        raise _not_started(master, e) from e


def _not_started(master: str, e: Exception) -> ConfigurationError:
    return ConfigurationError(f"could not start Spark with master {master!r}: {e}. Is Java 17 installed and JAVA_HOME set?")


def _active_session() -> Any:
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


def _warn_unapplied(spark: Any, wanted: dict[str, str]) -> None:
    """Spark settings cannot change on a running session: say which ones differ."""
    if not wanted:
        return
    if hasattr(spark, "sparkContext"):
        conf = spark.sparkContext.getConf()
        differ = sorted(k for k, v in wanted.items() if conf.get(k, None) != v)
    else:  # Spark Connect: the session's settings, as the server reports them
        differ = []
        for k, v in wanted.items():
            try:
                if spark.conf.get(k, None) != v:
                    differ.append(k)
            except Exception:  # noqa: BLE001 - a setting the server does not show
                differ.append(k)
        differ.sort()
    if differ:
        log.warning(
            "the SparkSession already exists, so these settings were not applied: %s "
            "(set them where that session is created, or let flowpoint create it)", ", ".join(differ),
        )


def _check_versions(spark: Any) -> None:
    """The session's Spark and this PySpark: both within 3.5 to 4.3, of one minor (versions.py).
    A Spark Connect client talks to a server of another minor by design: there, each is checked
    against the range only."""
    import pyspark

    if is_connect_session(spark):
        check_spark_version(str(spark.version), str(spark.version))
        check_spark_version(pyspark.__version__, pyspark.__version__)
        return
    check_spark_version(str(spark.version), pyspark.__version__)


def ship_python_dependencies(spark: Any, config: Any) -> None:
    """``python.files`` (directories zipped), ``python.requirements`` (installed, zipped) and
    ``python.archives`` (``addArchive``: unpacked under their alias) to every executor."""
    if not hasattr(spark, "sparkContext"):
        return
    files, requirements = config.get("python.files"), config.get("python.requirements")
    shipped = executor_py_files(files, requirements) if (files or requirements) else []
    ship_python_files(spark, ",".join(shipped))
    sc = spark.sparkContext
    archives = getattr(sc, "_flowpoint_archives", set())
    for archive in check_archives(config.get("python.archives")):
        if archive not in archives:
            sc.addArchive(archive)
            archives.add(archive)
    sc._flowpoint_archives = archives


def ship_python_files(spark: Any, files: str | None) -> None:
    """``add_python_file()``: ship each file, package or zip to every executor (once per session)."""
    if not files or not hasattr(spark, "sparkContext"):
        return
    sc = spark.sparkContext
    shipped = getattr(sc, "_flowpoint_py_files", set())
    for path in (f for f in files.split(",") if f):
        if path not in shipped:
            sc.addPyFile(path)
            shipped.add(path)
    sc._flowpoint_py_files = shipped
