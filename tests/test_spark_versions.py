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
def test_the_spark_internals_the_adapter_uses_answer(spark, tmp_path):
    """maxNumConcurrentTasks (the continuous runtime's slots), the executors' hosts (locality)
    and makeRDD with location preferences (a stateful partition's host): py4j calls into
    Spark's Scala API, which may change between versions. On a Spark Connect session
    (FLOWPOINT_TEST_SPARK_REMOTE), the DataFrame API the Connect adapter relies on instead."""
    from flowpoint.spark.adapter import is_connect_session

    if is_connect_session(spark):
        the_connect_api_answers(spark, tmp_path)
        return
    from flowpoint.spark.continuous_launcher import max_concurrent_tasks
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


def _partition_and_module(iterator):
    """A ``mapInArrow`` function: ``(dest, this task's partition, the probe module's VALUE)``."""
    import importlib

    import pyarrow as pa
    from pyspark import TaskContext

    partition = TaskContext.get().partitionId()
    for batch in iterator:
        module = importlib.import_module(batch.column(1)[0].as_py()) if batch.num_rows else None
        yield pa.RecordBatch.from_arrays(
            [batch.column(0), pa.array([partition] * batch.num_rows, pa.int32()),
             pa.array([module.VALUE if module else 0] * batch.num_rows, pa.int64())],
            names=["dest", "partition", "value"])


def _sleeps(iterator):
    import time

    for batch in iterator:
        time.sleep(120)
        yield batch


def the_connect_api_answers(spark, tmp_path):
    """The Connect adapter's DataFrame operations on this session: a local Arrow DataFrame,
    ``repartitionById`` (each row in the partition it names), ``mapInArrow`` (in the server's
    Python workers), ``addArtifacts`` (a module they import), a query of one task per item
    (state jobs), ``addTag``/``interruptTag`` (cancelling a job) and the default parallelism."""
    import threading
    import time
    import uuid

    import pyarrow as pa
    from pyspark.sql.connect.dataframe import DataFrame

    from flowpoint.spark.adapter_choice import adapter_for
    from flowpoint.spark.connect import frames

    frames.check_repartition_by_id(DataFrame)  # (Spark 4.1 or later)
    adapter = adapter_for(spark)
    assert adapter.mode == "connect" and adapter.default_parallelism() >= 1
    name = f"flowpoint_probe_{uuid.uuid4().hex}"
    (tmp_path / f"{name}.py").write_text("VALUE = 7\n")
    spark.addArtifacts(str(tmp_path / f"{name}.py"), pyfile=True)  # session-scoped: no other session sees it
    table = pa.table({"dest": pa.array([2, 0, 1, 2, 0], pa.int32()), "module": [name] * 5})
    rows = (spark.createDataFrame(table).repartitionById(3, "dest")
            .mapInArrow(_partition_and_module, "dest int, partition int, value long").collect())
    assert sorted((r.dest, r.partition, r.value) for r in rows) == [(0, 0, 7), (0, 0, 7), (1, 1, 7), (2, 2, 7), (2, 2, 7)]
    assert frames.run_per_item(spark, ["a", "b", "c"], lambda item: [item * 2]) == ["aa", "bb", "cc"]
    # a tagged query, interrupted from another thread (tags belong to the thread that adds them)
    tag, failed = f"flowpoint-probe-{uuid.uuid4().hex}", []

    def tagged_query():
        spark.addTag(tag)
        try:
            spark.range(1).mapInArrow(_sleeps, "id long").collect()
        except Exception as e:  # noqa: BLE001 - the interruption, whatever PySpark calls it
            failed.append(e)
        finally:
            spark.removeTag(tag)

    query = threading.Thread(target=tagged_query, daemon=True)
    started = time.monotonic()
    query.start()
    interrupted = []
    while not interrupted and query.is_alive() and time.monotonic() - started < 60:
        time.sleep(0.2)
        interrupted = spark.interruptTag(tag)
    query.join(60)
    assert interrupted and failed, (interrupted, failed)
    assert time.monotonic() - started < 60
