"""Spark versions (DESIGN 10b): what flowpoint refuses before a job starts, and the Spark
internals the adapter reaches through py4j (no Python API for them), on the running PySpark.

The tests marked ``compat`` also run on every other PySpark minor from 3.5 on
(tests/test_pyspark_versions.py), where ``FLOWPOINT_EXPECT_PYSPARK`` names the version that
venv must be running.
"""

from __future__ import annotations

import os

import pytest

from flowpoint.errors import ConfigurationError
from flowpoint.spark.versions import check_spark_version, minor

SUPPORTED = ["3.5.0", "3.5.9", "4.0.5", "4.1.4", "4.2.1", "4.3.0", "4.3.7"]


@pytest.mark.compat
def test_the_pyspark_asked_for_is_the_one_running(spark):
    import pyspark

    expected = os.environ.get("FLOWPOINT_EXPECT_PYSPARK")
    if expected:
        assert pyspark.__version__ == expected, pyspark.__file__
    assert spark.version == pyspark.__version__


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_minor_from_3_5_to_4_3_is_accepted(version):
    check_spark_version(version, version)


@pytest.mark.parametrize(("spark", "pyspark", "words"), [
    ("3.4.4", "3.4.4", ["3.5 to 4.3", "Spark 3.4.4", "pyspark>=3.5,<4.4"]),
    ("3.5.9", "3.4.1", ["3.5 to 4.3", "PySpark 3.4.1", "pyspark>=3.5,<4.4"]),
    ("4.4.0", "4.4.0", ["3.5 to 4.3", "Spark 4.4.0", "newer flowpoint"]),
    ("3.5.9", "4.3.0", ["PySpark 4.3.0 drives Spark 3.5.9", "pyspark==3.5.*"]),
    ("4.3.0", "4.0.5", ["PySpark 4.0.5 drives Spark 4.3.0", "pyspark==4.3.*"]),
])
def test_another_version_or_a_mismatched_pair_is_refused_naming_both_and_what_to_install(spark, pyspark, words):
    with pytest.raises(ConfigurationError) as info:
        check_spark_version(spark, pyspark)
    for w in words:
        assert w in str(info.value)


def test_versions_are_read_by_their_minor():
    assert minor("3.5.2-SNAPSHOT") == (3, 5) and minor("4.1.0.dev1") == (4, 1) and minor("10.0") == (10, 0)
    with pytest.raises(ConfigurationError, match="cannot read"):
        minor("unknown")


def test_an_existing_session_of_an_unsupported_spark_is_refused_before_the_job_starts(make_env):
    from flowpoint import CollectSink
    from flowpoint.spark.session import get_spark_session

    class OldSession:  # what a session of Spark 3.4 answers (no JVM needed to refuse it)
        version = "3.4.4"
        sparkContext = object()

    with pytest.raises(ConfigurationError, match="not Spark 3.4.4"):
        get_spark_session(None, "old", existing=OldSession())
    env = make_env(parallelism=1)
    env.set_spark_session(OldSession())
    env.from_collection([1, 2]).sink_to(CollectSink())
    with pytest.raises(ConfigurationError, match="3.5 to 4.3"):
        env.execute("on Spark 3.4")


@pytest.mark.compat
def test_the_spark_internals_the_adapter_uses_answer(spark):
    """maxNumConcurrentTasks (the continuous runtime's slots), the executors' hosts (locality)
    and makeRDD with location preferences (a stateful partition's host): py4j calls into
    Spark's Scala API, which may change between versions."""
    from flowpoint.spark.continuous_executor import max_concurrent_tasks
    from flowpoint.spark.locality import live_executor_hosts, located_rdd

    sc = spark.sparkContext
    assert max_concurrent_tasks(sc) == int(sc.master.split("[")[1].split(",")[0].rstrip("]"))
    assert live_executor_hosts(sc) == []  # local mode: the driver is the only executor
    items = [(i, f"item {i}") for i in range(3)]
    rdd = located_rdd(sc, items, ["host-a", "host-b", "host-a"])
    assert rdd.getNumPartitions() == 3
    assert rdd.glom().collect() == [[x] for x in items]
    jrdd = rdd._jrdd.rdd()  # noqa: SLF001
    prefs = [str(jrdd.preferredLocations(p).mkString(",")) for p in jrdd.partitions()]  # a Scala Seq each
    assert prefs == ["host-a", "host-b", "host-a"]
