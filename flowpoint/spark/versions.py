"""Which Spark versions flowpoint runs on, checked before a job starts.

flowpoint declares ``pyspark>=3.5,<4.4`` (pyproject.toml) and its tests prove every minor of
that range (tests/test_pyspark_versions.py; docs/deployment.md's table says what ran on each). A
session outside the range, or a PySpark package that drives a Spark of another minor (a
``pip install`` that replaced the PySpark a cluster's ``spark-submit`` matches), is refused
before any job runs, naming both versions and what to install instead.
"""

from __future__ import annotations

import re

from flowpoint.errors import ConfigurationError

OLDEST = (3, 5)  # the oldest minor the tests prove
NEWEST = (4, 3)  # the newest
DECLARED = "pyspark>=3.5,<4.4"


def minor(version: str) -> tuple[int, int]:
    """``"3.5.9"`` -> ``(3, 5)``; also ``"4.1.0.dev1"``, ``"3.5.2-SNAPSHOT"``."""
    m = re.match(r"\s*(\d+)\.(\d+)", str(version))
    if not m:
        msg = f"cannot read the Spark version {version!r}"
        raise ConfigurationError(msg)
    return int(m.group(1)), int(m.group(2))


def _name(v: tuple[int, int]) -> str:
    return f"{v[0]}.{v[1]}"


def check_spark_version(spark_version: str, pyspark_version: str) -> None:
    """Refuse a Spark (the session's JVM, ``spark.version``) or a PySpark (the Python package,
    ``pyspark.__version__``) outside 3.5 to 4.3, and a PySpark of another minor than its Spark."""
    spark, pyspark = minor(spark_version), minor(pyspark_version)
    for what, version, v in (("Spark", spark_version, spark), ("PySpark", pyspark_version, pyspark)):
        if not OLDEST <= v <= NEWEST:
            msg = (
                f"flowpoint runs on Spark {_name(OLDEST)} to {_name(NEWEST)}, not {what} {version}: "
                + (f"use Spark {_name(OLDEST)} or later (pip install '{DECLARED}')" if v < OLDEST
                   else f"install a PySpark flowpoint supports (pip install '{DECLARED}') or a newer flowpoint")
            )
            raise ConfigurationError(msg)
    if spark != pyspark:
        msg = (
            f"the Python package PySpark {pyspark_version} drives Spark {spark_version}: their versions must "
            f"match; install pyspark=={_name(spark)}.* next to this Spark (flowpoint supports either), "
            "or run with the Spark of the installed PySpark"
        )
        raise ConfigurationError(msg)
