"""Jobs on a Spark Connect session, in epochs: the same results, checkpoints, savepoints, restores
and exactly-once sinks as on a classic session; what Spark Connect cannot do is refused by name.

A Spark Connect server (PySpark's own, ``spark-submit --class ...SparkConnectServer``, master
``local[2,4]``) runs on loopback for the module and is stopped by its pid.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import time
from collections import Counter

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state, key_of, record

from flowpoint import (
    DataGeneratorSource,
    Encoder,
    FileSink,
    RestartStrategies,
    RollingPolicy,
    StreamExecutionEnvironment,
)
from flowpoint.errors import ConfigurationError

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    """``sc://127.0.0.1:<port>`` of a Spark Connect server started for this module."""
    import pyspark

    pytest.importorskip("grpc")
    spark_home = os.path.dirname(pyspark.__file__)
    port = _free_port()
    env = dict(os.environ, SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    log = open(tmp_path_factory.mktemp("connect") / "server.log", "wb")  # noqa: SIM115 - closed below
    server = subprocess.Popen(
        [os.path.join(spark_home, "bin", "spark-submit"), "--class", "org.apache.spark.sql.connect.service.SparkConnectServer",
         "--name", "flowpoint-connect-tests", "--master", "local[2,4]",
         "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
         "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.driver.host=127.0.0.1",
         "--conf", "spark.ui.enabled=false", "--conf", "spark.python.worker.reuse=true",
         "--conf", "spark.sql.shuffle.partitions=4"],
        env=env, stdout=log, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            if server.poll() is not None:
                pytest.fail(f"the Spark Connect server exited with {server.returncode} (log: {log.name})")
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"the Spark Connect server did not listen on port {port} within 120 s (log: {log.name})")
                time.sleep(0.3)
        yield f"sc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def connect(connect_url):
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    session = RemoteSparkSession.builder.remote(connect_url).create()
    yield session
    session.stop()


def env_on(session, tmp_path, parallelism=2, max_records=200, **config):
    settings = {"execution.progress.interval": -1, "state.working.dir": str(tmp_path / "working"), "execution.runtime": "epoch"}
    settings.update({k.replace("_", "."): v for k, v in config.items()})
    env = StreamExecutionEnvironment.get_execution_environment(settings, spark_session=session)
    env.set_parallelism(parallelism)
    env.set_epoch_max_records(max_records)
    return env


EVENTS = 1_000


def test_a_keyed_state_job_is_exact_at_parallelism_2_on_connect_and_classic(spark, connect, tmp_path):
    results = {}
    for name, session, backend in (("classic", spark, "hashmap"), ("connect", connect, "hashmap"), ("connect-rocksdb", connect, "rocksdb")):
        env = env_on(session, tmp_path / name, state_backend_type=backend, state_checkpoints_dir=str(tmp_path / name / "ck"))
        env.enable_checkpointing(1)
        sink = build(env, EVENTS)
        result = env.execute(f"keyed on {name}")
        state = result.get_keyed_state("counting")
        completed = [s for s in result.get_checkpoint_stats() if s.status == "COMPLETED"]
        assert completed, f"{name}: no checkpoint completed"
        results[name] = (sorted(sink.results), dict(state.get("count", {})), dict(state.get("by_digit", {})))
    want = expected_state(EVENTS)
    for name, (outputs, count, by_digit) in results.items():
        assert outputs == expected_outputs(EVENTS), name
        assert count == want["count"], name
        assert {k: dict(v) for k, v in by_digit.items()} == want["by_digit"], name


def test_a_restart_after_an_injected_failure_is_exact_and_file_sink_output_exactly_once(connect, tmp_path):
    """A user function fails once on one record; the job restarts from its last checkpoint on
    the Connect session. FileSink's finished part files hold every result once, and the keyed
    state is the uninterrupted job's."""
    out = tmp_path / "out"
    env = env_on(connect, tmp_path, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    keyed = (
        env.from_source(DataGeneratorSource(record, count=EVENTS), source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting(fail_value=record(700), flag=flag)).uid("counting")
    )
    keyed.map(lambda kv: f"{kv[0]},{kv[1]}").sink_to(
        FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
        .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build()
    ).uid("files")
    result = env.execute("restart on connect")
    assert os.path.exists(flag), "the injected failure never happened"
    lines = Counter()
    for root, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith((".", "_")):
                assert re.fullmatch(r"part-[0-9a-f-]{36}-\d+", name), name
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    lines.update(f.read().splitlines())
    expected = Counter(f"{k},{n}" for k, n in expected_outputs(EVENTS))
    assert lines == expected, f"duplicates: {sum((lines - expected).values())}, missing: {sum((expected - lines).values())}"
    assert dict(result.get_keyed_state("counting", "count")) == expected_state(EVENTS)["count"]


def _savepoint_mid_run(session, tmp_path, target):
    env = env_on(session, tmp_path, max_records=100)
    sink = build(env, 2_000, rate=1500)
    client = env.execute_async("savepointed")
    start = client.progress().epoch
    deadline = time.monotonic() + 120
    while client.progress().epoch < start + 3 and not client.is_done():
        assert time.monotonic() < deadline, "no epochs"
        time.sleep(0.05)
    assert not client.is_done(), "the job ended before the savepoint"
    path = client.stop_with_savepoint(str(target))
    client.wait(60)
    import json

    local = path[len("file://"):] if path.startswith("file://") else path
    with open(os.path.join(local, "_metadata")) as f:
        n = json.load(f)["sinks"]["collect"]
    return path, list(sink.results[:n])


@pytest.mark.parametrize("first,second", [("connect", "classic"), ("classic", "connect")])
def test_a_savepoint_moves_between_connect_and_classic(spark, connect, tmp_path, first, second):
    from flowpoint import state_reader

    sessions = {"connect": connect, "classic": spark}
    path, before = _savepoint_mid_run(sessions[first], tmp_path / "a", tmp_path / "sp")
    # the savepoint's state, read on the other session
    read = state_reader(sessions[second], path).keyed_state_dict("counting", "count")
    assert 0 < sum(read.values()) < 2_000
    env = env_on(sessions[second], tmp_path / "b", max_records=300, execution_savepoint_path=path)
    sink = build(env, 2_000)
    result = env.execute("restored")
    assert sorted(before + list(sink.results)) == expected_outputs(2_000)
    assert dict(result.get_keyed_state("counting", "count")) == expected_state(2_000)["count"]


def test_what_spark_connect_cannot_do_is_refused_by_name(connect, tmp_path, capsys):
    env = env_on(connect, tmp_path, execution_runtime="continuous")
    build(env, 50)
    with pytest.raises(ConfigurationError, match=r"continuous.*Spark Connect.*execution.runtime: epoch"):
        env.execute("continuous on connect")
    # auto runs a STREAMING job in epochs there, and says why in one line
    env = env_on(connect, tmp_path / "auto", execution_runtime="auto", execution_progress_interval=0)
    sink = build(env, 50)
    env.execute("auto on connect")
    said = [line for line in capsys.readouterr().err.splitlines() if "running in epochs:" in line]
    assert len(said) == 1 and "Spark Connect" in said[0], said
    assert sorted(sink.results) == expected_outputs(50)


def test_a_remote_address_must_be_a_spark_connect_one():
    from flowpoint.spark.session import get_spark_session

    with pytest.raises(ConfigurationError, match=r"sc://host:port"):
        get_spark_session(None, "x", None, {"spark.remote": "http://127.0.0.1:1"})


def test_flowpoint_run_remote_sets_the_spark_connect_address():
    from flowpoint.cli import _parser, _settings
    from flowpoint.errors import FlowpointError

    assert _settings(_parser().parse_args(["run", "--remote", "sc://h:15002", "job.py"]))["spark.remote"] == "sc://h:15002"
    with pytest.raises(FlowpointError, match="--remote"):
        _settings(_parser().parse_args(["run", "-m", "local[2]", "--remote", "sc://h:15002", "job.py"]))
