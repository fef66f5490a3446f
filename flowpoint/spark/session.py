"""Getting a SparkSession: an existing one, or the embedded default (local Spark)."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

from flowpoint.errors import ConfigurationError

log = logging.getLogger("flowpoint")

DEFAULT_MASTER = "local[*,4]"  # local[*] with up to 4 attempts per task, so Spark retries failed tasks


def _python_path() -> str:
    """The driver's import path, so executors' Python workers import the same modules."""
    existing = [x for x in os.environ.get("PYTHONPATH", "").split(os.pathsep) if x]
    here = [p for p in sys.path if p and os.path.isdir(p)]
    return os.pathsep.join(dict.fromkeys([*existing, *here]))


def get_spark_session(master: str | None, app_name: str, existing: Any = None) -> Any:
    if existing is not None:
        _check_classic(existing)
        return existing
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        _check_classic(active)
        return active
    master = master or os.environ.get("FLOWPOINT_SPARK_MASTER") or DEFAULT_MASTER
    os.environ["PYTHONPATH"] = _python_path()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
        .config("spark.python.worker.reuse", "true")
        .config("spark.sql.shuffle.partitions", "8")
        .config("spark.driver.extraJavaOptions", "-Dlog4j2.level=WARN")
    )
    try:
        spark = builder.getOrCreate()
    except Exception as e:
        msg = f"could not start Spark with master {master!r}: {e}. Is Java 17 installed and JAVA_HOME set?"
        raise ConfigurationError(msg) from e
    spark.sparkContext.setLogLevel("ERROR")
    log.info("started Spark %s with master %s", spark.version, master)
    return spark


def _check_classic(spark: Any) -> None:
    if not hasattr(spark, "sparkContext"):
        msg = "flowpoint needs a classic SparkSession (with a SparkContext), not a Spark Connect session"
        raise ConfigurationError(msg)
