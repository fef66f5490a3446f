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
from connect_server import ServerFailed, connect_server

from flowpoint import (
    CollectSink,
    DataGeneratorSource,
    Encoder,
    FileSink,
    JobStatus,
    KeyedProcessFunction,
    MapFunction,
    OutputTag,
    RestartStrategies,
    RollingPolicy,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flowpoint.errors import ConfigurationError, JobCancelledError

pytestmark = pytest.mark.slow

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


@pytest.fixture(scope="module")
def connect_url(tmp_path_factory):
    """``sc://127.0.0.1:<port>`` of a Spark Connect server started for this module."""
    pytest.importorskip("grpc")
    try:
        with connect_server(tmp_path_factory.mktemp("connect")) as url:
            yield url
    except ServerFailed as e:
        pytest.fail(str(e))


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
    counts_before: dict = {}
    for k, n in before:
        counts_before[k] = max(n, counts_before.get(k, 0))
    assert dict(read) == counts_before
    if first == "connect":
        # state_reader(...).keyed_state() on Connect: a DataFrame of the Connect session, as the
        # classic session reads the same savepoint
        reader = state_reader(connect, path)
        by_classic = state_reader(spark, path).keyed_state_dict("counting")
        df = reader.keyed_state("counting", "count")
        assert type(df).__module__.startswith("pyspark.sql.connect"), type(df)
        assert df.columns == ["key", "namespace", "user_key", "value"]
        assert {r.key: r.value for r in df.collect()} == dict(by_classic["count"]) == counts_before
        digits = sorted((k, d, n) for k, m in by_classic["by_digit"].items() for d, n in m.items())
        assert sorted((r.key, r.user_key, r.value) for r in reader.keyed_state("counting", "by_digit").collect()) == digits
        everything = reader.keyed_state("counting")
        assert "state_name" in everything.columns
        assert Counter(r.state_name for r in everything.collect()) == {
            "count": len(counts_before), "by_digit": len(digits), "last": len(counts_before)}
    env = env_on(sessions[second], tmp_path / "b", max_records=300, execution_savepoint_path=path)
    sink = build(env, 2_000)
    result = env.execute("restored")
    assert sorted(before + list(sink.results)) == expected_outputs(2_000)
    assert dict(result.get_keyed_state("counting", "count")) == expected_state(2_000)["count"]


def _part_lines(out) -> Counter:
    lines: Counter = Counter()
    for root, dirs, files in os.walk(out):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith((".", "_")):
                with open(os.path.join(root, name), encoding="utf-8") as f:
                    lines.update(f.read().splitlines())
    return lines


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_the_continuous_runtime_on_connect_is_exact_through_an_injected_failure(connect, tmp_path, backend, capsys):
    """execution.runtime: continuous on a Connect session: the slots run as one barrier
    mapInArrow query once a probing task reached this process. A user function fails once;
    the run restarts from the last checkpoint (the failed run's query interrupted by its tag);
    FileSink's parts hold every result once and the keyed state is the uninterrupted job's."""
    out = tmp_path / "out"
    env = env_on(connect, tmp_path, execution_runtime="continuous", execution_progress_interval=0,
                 state_backend_type=backend, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(200)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS, rate_limit_per_second=2_000), source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting(fail_value=record(700), flag=flag)).uid("counting")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
                 .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build()).uid("files")
    )
    client = env.execute_async(f"continuous on connect ({backend})")
    result = client.wait(240)
    err = capsys.readouterr().err
    assert re.search(r"running continuously on Spark Connect server sc://127\.0\.0\.1:\d+", err), err[-2000:]
    assert os.path.exists(flag), "the injected failure never happened"
    assert client.progress().restarts == 1
    lines = _part_lines(out)
    expected = Counter(f"{k},{n}" for k, n in expected_outputs(EVENTS))
    assert lines == expected, f"duplicates: {sum((lines - expected).values())}, missing: {sum((expected - lines).values())}"
    assert dict(result.get_keyed_state("counting", "count")) == expected_state(EVENTS)["count"]
    assert any(s.status == "COMPLETED" for s in result.get_checkpoint_stats())


def test_a_continuous_savepoint_on_connect_restores_on_classic_at_another_parallelism(spark, connect, tmp_path):
    env = env_on(connect, tmp_path / "a", execution_runtime="continuous")
    sink = build(env, 3_000, rate=1_500)
    client = env.execute_async("continuous, savepointed")
    deadline = time.monotonic() + 120
    while len(sink.results) < 300 and not client.is_done():
        assert time.monotonic() < deadline, "no output"
        time.sleep(0.05)
    assert not client.is_done(), "the job ended before the savepoint"
    path = client.stop_with_savepoint(str(tmp_path / "sp"))
    client.wait(60)
    import json

    local = path[len("file://"):] if path.startswith("file://") else path
    with open(os.path.join(local, "_metadata")) as f:
        n = json.load(f)["sinks"]["collect"]
    before = list(sink.results[:n])
    assert 0 < n < 3_000
    env = env_on(spark, tmp_path / "b", parallelism=1, execution_runtime="continuous", execution_savepoint_path=path)
    sink = build(env, 3_000)
    result = env.execute("restored on classic")
    assert sorted(before + list(sink.results)) == expected_outputs(3_000)
    assert dict(result.get_keyed_state("counting", "count")) == expected_state(3_000)["count"]


def test_cancelling_a_continuous_job_on_connect_interrupts_its_slots(connect, tmp_path):
    """The slots sleep in a map function and cannot answer the driver's cancel: after the
    grace period the run's query is interrupted by its tag, and the server's cores serve the
    next job."""
    env = env_on(connect, tmp_path / "a", execution_runtime="continuous")
    env.from_source(DataGeneratorSource(record, count=40), source_name="numbers").uid("numbers").rebalance() \
        .map(Sleeps()).uid("sleeps").sink_to(CollectSink())
    client = env.execute_async("sleeping slots")
    deadline = time.monotonic() + 60
    while client.get_job_status() != JobStatus.RUNNING:
        assert time.monotonic() < deadline and not client.is_done(), "the job did not start"
        time.sleep(0.1)
    time.sleep(3)  # the slots are in the map function now
    started = time.monotonic()
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    took = time.monotonic() - started
    assert took < 30, f"cancelling took {took:.1f} s"
    env = env_on(connect, tmp_path / "b", execution_runtime="continuous")
    sink = build(env, 400)
    env.execute("after the cancelled one")
    assert sorted(sink.results) == expected_outputs(400)


def test_a_control_host_the_tasks_cannot_reach_runs_in_epochs_or_is_refused_by_name(connect, tmp_path, capsys):
    """The Spark Connect client is not Spark's driver: before a continuous run, a Spark task
    must reach this process at the control host. An address it cannot use (here one this host
    does not have) makes auto run in epochs, saying why in one line, and continuous fail by name."""
    unreachable = {"execution_continuous_control-host": "192.0.2.1"}
    env = env_on(connect, tmp_path, execution_runtime="continuous", **unreachable)
    build(env, 50)
    with pytest.raises(ConfigurationError, match=r"continuous cannot run.*192\.0\.2\.1.*execution\.continuous\.control-host"):
        env.execute("continuous, unreachable")
    env = env_on(connect, tmp_path / "auto", execution_runtime="auto", execution_progress_interval=0, **unreachable)
    sink = build(env, 50)
    env.execute("auto, unreachable")
    said = [line for line in capsys.readouterr().err.splitlines() if "running in epochs:" in line]
    assert len(said) == 1 and "Spark Connect" in said[0] and "192.0.2.1" in said[0], said
    assert sorted(sink.results) == expected_outputs(50)


def test_a_classic_session_is_not_used_when_the_job_asks_for_spark_connect(spark, monkeypatch):
    from flowpoint.spark.session import get_spark_session

    with pytest.raises(ConfigurationError, match=r"spark.api.mode=connect asks for a Spark Connect session.*classic"):
        get_spark_session(None, "x", spark, {"spark.api.mode": "connect"})
    monkeypatch.setenv("SPARK_REMOTE", "sc://127.0.0.1:1")
    with pytest.raises(ConfigurationError, match=r"\$SPARK_REMOTE 'sc://127.0.0.1:1' asks for a Spark Connect session"):
        get_spark_session(None, "x", spark, {})


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


# -- the session from flowpoint run: --remote, $SPARK_REMOTE, spark.api.mode=connect ------------------

# The job counts per key; its map function needs what -pyfs/-pyreq/-pyarch shipped (named on its
# command line) and says where it found it and in which process it ran.
CLI_JOB = '''
import json
import os
import sys

from flowpoint import KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

NEEDS = tuple(sys.argv[1:])


def tagged(v, needs=NEEDS):
    import importlib
    import os

    found = []
    if "pyfs" in needs:
        m = importlib.import_module("shippedmod")
        found.append([m.VALUE, os.path.abspath(m.__file__)])
    if "pyreq" in needs:
        m = importlib.import_module("reqmod")
        found.append([m.VALUE, os.path.abspath(m.__file__)])
    if "pyarch" in needs:
        with open(os.path.join("mydata", "table", "values.txt")) as f:  # unpacked under its alias
            found.append([f.read().strip(), os.getcwd()])
    return v, found, os.getpid()


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n, value[1], value[2]


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.set_epoch_max_records(100)
rows = (env.from_collection(list(range(200))).map(tagged).key_by(lambda t: t[0] % 7)
        .process(Count()).execute_and_collect())
from pyspark.sql.connect.session import SparkSession

session = SparkSession.getActiveSession()
conf = {k: session.conf.get(k, None) for k in ("spark.master", "spark.connect.grpc.binding.address")} if session else {}
print("RESULT " + json.dumps({"outputs": sorted([r[0], r[1]] for r in rows), "found": [r[2] for r in rows],
                              "pids": sorted({r[3] for r in rows}), "client_pid": os.getpid(),
                              "session": type(session).__module__ if session else None, "conf": conf}))
'''

CLI_EXPECTED = sorted([k, n] for k in range(7) for n in range(1, len(range(k, 200, 7)) + 1))


def flowpoint_run(tmp_path, *args, env_extra: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``flowpoint run ...`` in a subprocess, from a directory where nothing of the job is importable."""
    script = tmp_path / "scripts" / "job.py"
    script.parent.mkdir(parents=True, exist_ok=True)
    script.write_text(CLI_JOB)
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_REMOTE", "SPARK_API_MODE", "FLOWPOINT_SPARK_MASTER")}
    env.update(FLOWPOINT_HOME=str(tmp_path / "home"), PIP_NO_INDEX="1", PYTHONPATH=ROOT, **(env_extra or {}))
    workdir = tmp_path / "elsewhere"
    workdir.mkdir(exist_ok=True)
    args = [a.replace("JOB", str(script)) for a in args]
    return subprocess.run([sys.executable, "-m", "flowpoint.cli", "run", *args], capture_output=True, text=True,
                          timeout=timeout, env=env, cwd=str(workdir))


def cli_result(proc: subprocess.CompletedProcess) -> dict:
    import json

    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    out = json.loads(line[len("RESULT "):])
    assert out["outputs"] == CLI_EXPECTED  # every record counted once, per key, over two epochs
    assert out["session"] == "pyspark.sql.connect.session"
    assert out["client_pid"] not in out["pids"]  # the map ran in the server's Python workers
    return out


def test_flowpoint_run_remote_ships_pyfs_pyreq_and_pyarch_with_add_artifacts(connect_url, tmp_path):
    """``flowpoint run --remote`` on the module's server: a module of a -pyfs directory, a package
    of a -pyreq requirements file (installed here, shipped zipped) and a file of a -pyarch archive
    (unpacked under its alias) are found by the map function on the server's workers, in what
    ``addArtifacts`` shipped: not on the server's path, not where they were written here."""
    import zipfile

    from test_python_deps import wheel

    mods = tmp_path / "src" / "mods"
    mods.mkdir(parents=True)
    (mods / "shippedmod.py").write_text("VALUE = 42\n")
    reqs = tmp_path / "src" / "reqs"
    name = wheel(reqs / "wheels", "reqmod", 21)
    (reqs / "requirements.txt").write_text(f"./wheels/{name}\n")
    archive = tmp_path / "src" / "data.zip"
    with zipfile.ZipFile(archive, "w") as z:
        z.writestr("table/values.txt", "from the archive\n")
    proc = flowpoint_run(tmp_path, "--remote", connect_url, "-pyfs", str(mods), "-pyreq", str(reqs / "requirements.txt"),
                         "-pyarch", f"{archive}#mydata", "JOB", "pyfs", "pyreq", "pyarch")
    out = cli_result(proc)
    assert f"on Spark Connect server {connect_url} (master local[2,4])" in proc.stderr
    for (mod_value, mod_file), (req_value, req_file), (text, cwd) in out["found"]:
        assert (mod_value, req_value, text) == (42, 21, "from the archive")
        assert ".zip" in mod_file and ".zip" in req_file, (mod_file, req_file)
        for path in (mod_file, req_file, cwd):
            assert not path.startswith(str(tmp_path)), path
    with pytest.raises(ModuleNotFoundError):  # nowhere on this process's path either
        __import__("shippedmod")


def test_spark_remote_in_the_environment_chooses_the_connect_server(connect_url, tmp_path):
    proc = flowpoint_run(tmp_path, "JOB", env_extra={"SPARK_REMOTE": connect_url})
    cli_result(proc)
    assert f"on Spark Connect server {connect_url} (master local[2,4])" in proc.stderr
    # and with a master as well, refused before any session exists, naming both
    proc = flowpoint_run(tmp_path, "-m", "local[2]", "JOB", env_extra={"SPARK_REMOTE": connect_url})
    assert proc.returncode != 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    assert "spark.master 'local[2]' and $SPARK_REMOTE" in proc.stderr and "drop spark.master" in proc.stderr


def test_spark_api_mode_connect_runs_the_job_on_a_connect_server_in_its_own_process(tmp_path):
    """``-D spark.api.mode=connect -m local[2]``: PySpark starts a Spark Connect server for the
    master inside the job's process (on loopback, with its own token) and the job is its client:
    it runs with the Connect adapter, continuously (``auto``: the probing task reached the job's
    process and local[2] offers its two slots), exactly."""
    from flowpoint.spark.session import API_MODE_PORT

    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", API_MODE_PORT)) == 0:
            pytest.skip(f"port {API_MODE_PORT} is taken on this host (the refusal is tested below)")
    proc = flowpoint_run(tmp_path, "-m", "local[2]", "-D", "spark.api.mode=connect", "JOB")
    out = cli_result(proc)
    assert out["conf"] == {"spark.master": "local[2]", "spark.connect.grpc.binding.address": "127.0.0.1"}
    assert f"running continuously on Spark Connect server sc://localhost:{API_MODE_PORT} (master local[2])" in proc.stderr


def test_spark_api_mode_connect_is_refused_when_its_port_is_taken_or_moved(monkeypatch):
    from flowpoint.spark import session
    from flowpoint.spark.session import API_MODE_PORT, get_spark_session

    monkeypatch.setattr(session, "_active_session", lambda: None)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))  # (get_spark_session sets it)
    with pytest.raises(ConfigurationError, match=r"spark.connect.grpc.binding.port=16000.*--remote sc://host:port"):
        get_spark_session("local[2]", "x", None, {"spark.api.mode": "connect", "spark.connect.grpc.binding.port": 16000})
    listener = socket.socket()
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind(("127.0.0.1", API_MODE_PORT))
        except OSError:
            pass  # taken already: the refusal holds all the same
        else:
            listener.listen(1)
        with pytest.raises(ConfigurationError, match=rf"spark.api.mode=connect: port {API_MODE_PORT} .* is taken.*--remote"):
            get_spark_session("local[2]", "x", None, {"spark.api.mode": "connect"})
    finally:
        listener.close()


# -- several consumers, cancelling, the state reader's DataFrame ---------------------------------------

ODD = OutputTag("odd")


class CountSplit(KeyedProcessFunction):
    """Counts per key: even counts to the main output, odd ones to the side output ``odd``."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield (ODD, (ctx.get_current_key(), n)) if n % 2 else (ctx.get_current_key(), n)


class Received(KeyedProcessFunction):
    """``(key, how many this key received so far, the value's count)``."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n, value[1]


class Touch(MapFunction):
    """Appends a line per record to ``path`` (the server is on this host): how often the stage
    it is chained into ran over each record."""

    def __init__(self, path: str):
        self.path = path

    def map(self, value):
        with open(self.path, "a") as f:
            f.write(f"{value}\n")
        return value


def test_stages_with_several_consumers_are_exact_on_connect(connect, tmp_path):
    """The source's stage feeds two keyed operators (two exchanges from one stage), and one of
    them sends its main output and its side output to two more stages: the source's stage runs
    once per epoch over each record (cached for its consumers), and every consumer receives each
    record once."""
    from flowpoint.graph.jobgraph import JobGraph

    events = 400
    touched = tmp_path / "touched"
    env = env_on(connect, tmp_path, max_records=150)
    keyed = (env.from_source(DataGeneratorSource(record, count=events), source_name="numbers").uid("numbers")
             .map(Touch(str(touched))).uid("touch").key_by(key_of))
    split = keyed.process(CountSplit()).uid("split")
    counted, evens, odds = CollectSink(), CollectSink(), CollectSink()
    keyed.process(Counting()).uid("counting").sink_to(counted).uid("counted")
    split.key_by(lambda kv: kv[0]).process(Received()).uid("evens").sink_to(evens).uid("evens-out")
    split.get_side_output(ODD).key_by(lambda kv: kv[0]).process(Received()).uid("odds").sink_to(odds).uid("odds-out")
    graph = JobGraph.build(env._pipeline(), env, "several consumers")
    fan_out = [s for s in graph.stages if len({e.stage_id for e in graph.consumers(s)}) > 1]
    assert len(fan_out) == 2, [(s.id, [e.stage_id for e in graph.consumers(s)]) for s in graph.stages]
    result = env.execute("several consumers")
    assert result.epochs >= 3  # the state and the exchanges carry across epochs
    per_key = Counter(key_of(record(i)) for i in range(events))
    assert sorted(counted.results) == expected_outputs(events)
    assert sorted(evens.results) == sorted((k, i, 2 * i) for k, n in per_key.items() for i in range(1, n // 2 + 1))
    assert sorted(odds.results) == sorted((k, i, 2 * i - 1) for k, n in per_key.items() for i in range(1, (n + 1) // 2 + 1))
    assert Counter(touched.read_text().split()) == Counter(str(record(i)) for i in range(events))


class Sleeps(MapFunction):
    def map(self, value):
        time.sleep(300)
        return value


def test_cancelling_a_running_job_interrupts_its_queries_and_the_server_serves_the_next(connect, tmp_path):
    """Both of the job's tasks sleep for 300 s inside an epoch; ``cancel()`` interrupts the
    job's tagged query: the job ends CANCELED within seconds, and the next job, which needs both
    of the server's cores, runs exactly (the sleeping tasks were killed, not left running)."""
    env = env_on(connect, tmp_path / "a", max_records=10)
    env.from_source(DataGeneratorSource(record, count=40), source_name="numbers").uid("numbers").rebalance() \
        .map(Sleeps()).uid("sleeps").sink_to(CollectSink())
    client = env.execute_async("sleeps")
    deadline = time.monotonic() + 60
    while client.progress().epoch < 1 and not client.is_done():  # the first epoch is running
        assert time.monotonic() < deadline, "the job did not start"
        time.sleep(0.1)
    time.sleep(3)  # its tasks are in the map function now
    assert client.get_job_status() == JobStatus.RUNNING
    started = time.monotonic()
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    took = time.monotonic() - started
    assert client.get_job_status() == JobStatus.CANCELED
    assert took < 30, f"cancelling took {took:.1f} s"
    env = env_on(connect, tmp_path / "b", max_records=200)
    sink = build(env, 400)
    started = time.monotonic()
    env.execute("after the cancelled one")
    assert sorted(sink.results) == expected_outputs(400)
    assert time.monotonic() - started < 60
