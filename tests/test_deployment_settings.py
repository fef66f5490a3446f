"""Deployment settings: ``spark.*`` keys from -D, flowpoint.yaml or a Configuration reach the
SparkSession builder (the user's values win over flowpoint's defaults), local masters bind to
loopback while cluster masters keep Spark's driver address, and filesystem options (``s3.*``,
``hdfs.*``, ``gs.*``, ``fs.*``) are accepted, checked and collected by ``storage_options``."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import pytest

from flowpoint import StreamExecutionEnvironment
from flowpoint.api.cli_context import cli_context
from flowpoint.api.config import Configuration
from flowpoint.api.config_file import read_config_file
from flowpoint.api.storage_options import storage_options
from flowpoint.cli import _parser, _settings, script_context
from flowpoint.errors import ConfigurationError
from flowpoint.spark import session
from flowpoint.spark.session import get_spark_session, session_config, spark_settings

HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def cli_env():
    """``cli_env(*argv)``: the environment a job gets under ``flowpoint run <argv> job.py``."""

    def make(*argv: str, conf: str | None = None) -> StreamExecutionEnvironment:
        args = _parser().parse_args(["run", *argv, "job.py"])
        with cli_context(script_context(_settings(args), conf)):
            return StreamExecutionEnvironment.get_execution_environment()

    return make


# -- spark.* keys reach the session builder ---------------------------------------------------


def test_user_spark_keys_win_over_flowpoint_defaults():
    config = session_config("spark://h:7077", "job", {
        "spark.sql.shuffle.partitions": 64, "spark.executorEnv.PYTHONPATH": "/opt/job",
        "spark.executor.memory": "4g", "spark.dynamicAllocation.enabled": True,
        "state.backend.type": "rocksdb", "s3.endpoint": "http://minio:9000",
    }, python_path="/driver/path")
    assert config["spark.master"] == "spark://h:7077"
    assert config["spark.sql.shuffle.partitions"] == "64"
    assert config["spark.executorEnv.PYTHONPATH"] == "/opt/job"
    assert config["spark.executor.memory"] == "4g"
    assert config["spark.dynamicAllocation.enabled"] == "true"
    assert config["spark.python.worker.reuse"] == "true"  # a default the user left alone
    assert not any(k.startswith(("state.", "s3.")) for k in config)


def test_without_user_keys_executors_get_the_drivers_import_path():
    config = session_config("local[2]", "job", None, python_path="/a:/b")
    assert config["spark.executorEnv.PYTHONPATH"] == "/a:/b"
    assert config["spark.sql.shuffle.partitions"] == "8"


def test_spark_master_stays_the_master_argument():
    assert "spark.master" not in spark_settings({"spark.master": "yarn", "spark.executor.cores": 2})
    assert session_config("yarn", "job", {"spark.master": "local"})["spark.master"] == "yarn"


@pytest.mark.parametrize("master", ["local", "local[2]", "local[*,4]", "local-cluster[2,1,1024]"])
def test_a_local_master_binds_the_driver_to_loopback(master):
    config = session_config(master, "job")
    assert config["spark.driver.bindAddress"] == "127.0.0.1"
    assert config["spark.driver.host"] == "127.0.0.1"


@pytest.mark.parametrize("master", ["spark://host:7077", "yarn", "k8s://https://api:6443"])
def test_a_cluster_master_leaves_the_driver_address_to_spark(master):
    config = session_config(master, "job")
    assert "spark.driver.bindAddress" not in config
    assert "spark.driver.host" not in config


def test_a_configured_driver_address_wins_on_a_local_master():
    config = session_config("local[2]", "job", {"spark.driver.bindAddress": "0.0.0.0", "spark.driver.host": "10.0.0.5"})
    assert config["spark.driver.bindAddress"] == "0.0.0.0"
    assert config["spark.driver.host"] == "10.0.0.5"


def test_under_spark_submit_its_master_and_conf_stand_over_flowpoints_defaults():
    submitted = {"spark.master": "yarn", "spark.sql.shuffle.partitions": "200", "spark.app.name": "etl",
                 "spark.executorEnv.PYTHONPATH": "./deps"}
    config = session_config("yarn", "job", {"spark.executor.memory": "8g"}, python_path="/driver", submitted=submitted)
    assert config["spark.master"] == "yarn"
    for key in ("spark.sql.shuffle.partitions", "spark.app.name", "spark.executorEnv.PYTHONPATH"):
        assert key not in config  # the submitted value stays in effect
    assert config["spark.executor.memory"] == "8g"  # a flowpoint setting of the user's still applies
    assert config["spark.python.worker.reuse"] == "true"
    local = session_config("local[2]", "job", None, python_path="", submitted={"spark.driver.host": "10.1.1.1"})
    assert "spark.driver.host" not in local and local["spark.driver.bindAddress"] == "127.0.0.1"


def test_dash_d_spark_keys_reach_the_session_config(cli_env):
    env = cli_env("-m", "spark://h:7077", "-D", "spark.executor.memory=2g", "-D",
                  "spark.executorEnv.FOO=a=b", "-D", "s3.endpoint=http://minio:9000")
    conf = env.get_configuration()
    config = session_config(conf.get("spark.master"), "job", conf, python_path="")
    assert config["spark.master"] == "spark://h:7077"
    assert config["spark.executor.memory"] == "2g"
    assert config["spark.executorEnv.FOO"] == "a=b"
    assert storage_options(conf) == {"s3.endpoint": "http://minio:9000"}


def test_flowpoint_yaml_spark_keys_nested_or_flat_and_dash_d_wins(cli_env, tmp_path, caplog):
    path = tmp_path / "flowpoint.yaml"
    path.write_text(
        "spark:\n  executor:\n    memory: 3g\n    cores: 2\n  sql.shuffle.partitions: 16\n"
        "spark.submit.pyFiles: deps.zip\n"
        "s3:\n  endpoint: http://minio:9000\n  path.style.access: true\n"
        "fs.s3a.connection.maximum: 100\nhdfs.user: flink\ngs.project-id: p\n"
    )
    with caplog.at_level(logging.WARNING, logger="flowpoint"):
        env = cli_env("-D", "spark.executor.memory=5g", conf=str(path))
    assert not [r for r in caplog.records if "unknown key" in r.getMessage()]
    conf = env.get_configuration()
    config = session_config("spark://h:7077", "job", conf, python_path="")
    assert config["spark.executor.memory"] == "5g"  # -D over the file
    assert config["spark.executor.cores"] == "2"
    assert config["spark.sql.shuffle.partitions"] == "16"
    assert config["spark.submit.pyFiles"] == "deps.zip"
    assert storage_options(conf) == {
        "s3.endpoint": "http://minio:9000", "s3.path.style.access": "true",
        "fs.s3a.connection.maximum": "100", "hdfs.user": "flink", "gs.project-id": "p",
    }


def test_a_misspelt_filesystem_or_spark_key_is_still_warned_about(tmp_path, caplog):
    path = tmp_path / "flowpoint.yaml"
    path.write_text("s3.endpont: http://x\nspark.mastr: local\n")
    with caplog.at_level(logging.WARNING, logger="flowpoint"):
        read_config_file(str(path))
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "'s3.endpoint'" in messages and "'spark.master'" in messages


# -- get_spark_session applies the config (a recording builder, no JVM) -----------------------


class _Builder:
    def __init__(self):
        self.config_calls: dict[str, str] = {}

    def config(self, key, value):
        self.config_calls[key] = value
        return self

    def getOrCreate(self):  # noqa: N802 - pyspark's name
        return _FakeSpark({})


class _FakeConf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class _FakeSpark:
    version = "4.3.0"  # a real session's Spark version (checked against the supported range)

    def __init__(self, values):
        self.sparkContext = self
        self.values = values

    def getConf(self):  # noqa: N802
        return _FakeConf(self.values)

    def setLogLevel(self, level):  # noqa: N802
        pass


@pytest.fixture
def builder(monkeypatch):
    from pyspark.sql import SparkSession

    b = _Builder()
    monkeypatch.setattr(SparkSession, "builder", b)
    monkeypatch.setattr(session, "_active_session", lambda: None)
    monkeypatch.setattr(session, "submitted_conf", lambda: None)
    for var in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "SPARK_LOCAL_IP", session.UI_MARK):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored after the test
    monkeypatch.delenv("SPARK_LOCAL_IP")
    monkeypatch.delenv(session.UI_MARK)
    monkeypatch.setattr(session, "spark_default_driver_host", lambda conf=None: "10.1.2.3")  # no JVM here
    return b


def test_get_spark_session_gives_the_builder_the_config(builder):
    get_spark_session("spark://h:7077", "job", None, Configuration({"spark.executor.memory": "2g", "spark.sql.shuffle.partitions": 3}))
    assert builder.config_calls["spark.master"] == "spark://h:7077"
    assert builder.config_calls["spark.executor.memory"] == "2g"
    assert builder.config_calls["spark.sql.shuffle.partitions"] == "3"
    # the web UI binds to $SPARK_LOCAL_IP: loopback; the driver keeps the address Spark would choose
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert builder.config_calls["spark.driver.host"] == "10.1.2.3"
    assert "spark.driver.bindAddress" not in builder.config_calls


def test_a_cluster_driver_keeps_the_users_address_and_spark_local_ip(builder, monkeypatch):
    get_spark_session("spark://h:7077", "job", None, {"spark.driver.host": "driver.example"})
    assert builder.config_calls["spark.driver.host"] == "driver.example"
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"
    monkeypatch.setenv("SPARK_LOCAL_IP", "10.9.9.9")  # the user's choice: UI and driver follow it, as in Spark
    builder.config_calls.clear()
    get_spark_session("yarn", "job")
    assert os.environ["SPARK_LOCAL_IP"] == "10.9.9.9"
    assert "spark.driver.host" not in builder.config_calls


def test_a_local_session_binds_its_ui_to_loopback(builder):
    get_spark_session("local[2]", "job")
    assert builder.config_calls["spark.driver.bindAddress"] == "127.0.0.1"
    assert os.environ["SPARK_LOCAL_IP"] == "127.0.0.1"  # Spark's web UI binds to $SPARK_LOCAL_IP


def test_get_spark_session_takes_spark_submits_master(builder, monkeypatch):
    monkeypatch.setattr(session, "submitted_conf", lambda: {"spark.master": "spark://h:7077", "spark.sql.shuffle.partitions": "64"})
    get_spark_session(None, "job")
    assert builder.config_calls["spark.master"] == "spark://h:7077"
    assert "spark.sql.shuffle.partitions" not in builder.config_calls


def test_not_under_spark_submit_there_is_no_submitted_conf(monkeypatch):
    monkeypatch.delenv("PYSPARK_GATEWAY_PORT", raising=False)
    assert session.submitted_conf() is None


def test_an_existing_session_keeps_its_settings_and_says_which_were_not_applied(caplog):
    spark = _FakeSpark({"spark.executor.memory": "1g", "spark.sql.shuffle.partitions": "3"})
    with caplog.at_level(logging.WARNING, logger="flowpoint"):
        got = get_spark_session(None, "job", spark, {"spark.executor.memory": "4g", "spark.sql.shuffle.partitions": 3, "spark.master": "yarn"})
    assert got is spark
    messages = " ".join(r.getMessage() for r in caplog.records)
    assert "spark.executor.memory" in messages
    assert "spark.sql.shuffle.partitions" not in messages and "spark.master" not in messages


# -- filesystem options -----------------------------------------------------------------------


def test_storage_options_are_every_filesystem_key_as_strings():
    conf = Configuration({
        "s3.endpoint": "http://127.0.0.1:9000", "s3.access-key": "AK", "s3.secret.key": "SK",
        "s3.path-style-access": "TRUE", "s3.max-attempts": "5", "s3.connect-timeout": 2,
        "hdfs.kerberos.principal": "flink@REALM", "gs.token": "t", "fs.default.name": "hdfs://nn",
        "state.backend.type": "rocksdb", "spark.executor.memory": "2g", "s3x.other": "no", "s3.region": None,
    })
    assert storage_options(conf) == {
        "s3.endpoint": "http://127.0.0.1:9000", "s3.access-key": "AK", "s3.secret-key": "SK",
        "s3.path.style.access": "true", "s3.max-attempts": "5", "s3.connect-timeout": "2.0",
        "hdfs.kerberos.principal": "flink@REALM", "gs.token": "t", "fs.default.name": "hdfs://nn",
    }
    assert storage_options({"s3.access.key": "AK", "other": 1}) == {"s3.access-key": "AK"}
    assert storage_options(Configuration()) == {}


@pytest.mark.parametrize(("key", "value"), [
    ("s3.path.style.access", "maybe"), ("s3.max-attempts", "0"), ("s3.request-timeout", "-1"), ("s3.connect-timeout", "soon"),
])
def test_known_s3_options_are_checked(key, value):
    with pytest.raises(ConfigurationError, match=key.replace(".", r"\.")):
        Configuration({key: value})


# -- end to end: flowpoint run ----------------------------------------------------------------


@pytest.mark.slow
def test_flowpoint_run_settings_reach_spark_and_its_executors(tmp_path):
    conf = tmp_path / "flowpoint.yaml"
    conf.write_text("spark:\n  sql.shuffle.partitions: 5\n  executorEnv.FLOWPOINT_PROBE: from-yaml\ns3.endpoint: http://127.0.0.1:1\n")
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    proc = subprocess.run(
        [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[1]", "--conf", str(conf),
         "-D", "spark.sql.shuffle.partitions=3", "-D", f"state.working.dir={tmp_path / 'w'}",
         os.path.join(HERE, "deployment_probe_job.py")],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "unknown key" not in proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["conf"]["spark.master"] == "local[1]"
    assert out["conf"]["spark.sql.shuffle.partitions"] == "3"  # -D over flowpoint.yaml over the default 8
    assert out["conf"]["spark.executorEnv.FLOWPOINT_PROBE"] == "from-yaml"
    assert out["executor"] == ["from-yaml"]  # reached the Python workers
    assert HERE in out["conf"]["spark.executorEnv.PYTHONPATH"].split(os.pathsep)
    assert out["conf"]["spark.driver.host"] == "127.0.0.1"
    assert out["listening"] and all(a in ("127.0.0.1", "::ffff:127.0.0.1", "::1") for a in out["listening"]), out["listening"]
    assert out["storage"] == {"s3.endpoint": "http://127.0.0.1:1"}


@pytest.mark.slow
def test_spark_submit_keeps_its_master_and_conf(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env["FLOWPOINT_CONF_DIR"] = str(tmp_path)
    (tmp_path / "flowpoint.yaml").write_text(f"state.working.dir: {tmp_path / 'w'}\ns3.region: eu-west-1\n")
    submit = os.path.join(os.path.dirname(pyspark_file()), "bin", "spark-submit")
    proc = subprocess.run(
        [submit, "--master", "local[1]", "--conf", "spark.sql.shuffle.partitions=7",
         "--conf", "spark.executorEnv.FLOWPOINT_PROBE=submitted", os.path.join(HERE, "deployment_probe_job.py")],
        capture_output=True, text=True, timeout=300, cwd=str(tmp_path), env=env,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["conf"]["spark.master"] == "local[1]"  # not flowpoint's default local[*,4]
    assert out["conf"]["spark.sql.shuffle.partitions"] == "7"  # not flowpoint's default 8
    assert out["executor"] == ["submitted"]
    assert out["storage"] == {"s3.region": "eu-west-1"}  # flowpoint settings from $FLOWPOINT_CONF_DIR


def pyspark_file() -> str:
    import pyspark

    return pyspark.__file__
