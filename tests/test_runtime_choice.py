"""Which runtime a job runs on (``execution.runtime``, docs/execution.md): ``auto``, the default,
runs a STREAMING job continuously when Spark offers every slot it needs at once and in epochs
otherwise, saying why; ``continuous`` insists and fails by name; BATCH runs in epochs; the
default local master gives a job the slots it needs, as Flink's local mini cluster does."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flowpoint import DataGeneratorSource, RuntimeExecutionMode
from flowpoint.api.config import Configuration
from flowpoint.connectors.sinks import CollectSink
from flowpoint.errors import ConfigurationError
from flowpoint.spark.adapter_choice import adapter_for
from flowpoint.spark.session import DEFAULT_MASTER, default_master

EVENTS = 300


def counting(env, parallelism: int):
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(lambda i: (i % 7, i), count=EVENTS), source_name="numbers").uid("numbers")
        .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sum").set_parallelism(parallelism)
        .sink_to(sink).uid("out")
    )
    return sink


def final_sums(sink) -> dict[int, int]:
    out: dict[int, int] = {}
    for k, v in sink.results:
        out[k] = max(out.get(k, 0), v)
    return out


def expected_sums() -> dict[int, int]:
    return {k: sum(i for i in range(EVENTS) if i % 7 == k) for k in range(7)}


def test_the_default_is_auto():
    """As a user's process sees it (the tests' own process runs its jobs in epochs: conftest)."""
    code = "from flowpoint.api.config import Configuration; print(Configuration().get('execution.runtime'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, "FLOWPOINT_TEST_RUNTIME": ""})
    assert out.stdout.strip() == "auto"


def test_auto_runs_a_streaming_job_continuously_when_the_slots_are_there(make_env, spark):
    env = make_env(parallelism=2, **{"execution.runtime": "auto", "execution.buffer-timeout": 5})
    sink = counting(env, 2)
    client = env.execute_async("auto with enough slots")
    client.wait(120)
    assert client.progress().runtime == "continuous"
    assert final_sums(sink) == expected_sums()


def test_auto_falls_back_to_epochs_and_says_why(make_env, spark, capfd):
    slots = adapter_for(spark).slots_available()
    env = make_env(parallelism=2, **{"execution.runtime": "auto", "execution.progress.interval": 0})
    sink = counting(env, slots + 1)
    client = env.execute_async("auto short of slots")
    client.wait(120)
    assert client.progress().runtime == "epoch"
    assert final_sums(sink) == expected_sums()
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "running in epochs:" in ln]
    assert len(lines) == 1, err
    assert f"needs {slots + 1} task slots" in lines[0] and f"Spark offers {slots}" in lines[0]


class _Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


class _Session:
    """A stand-in SparkSession: its master and settings, what most_slots reads."""

    def __init__(self, master: str, **conf: str):
        self.sparkContext = type("SC", (), {"master": master, "getConf": lambda _: _Conf({k.replace("_", "."): v for k, v in conf.items()})})()


@pytest.mark.parametrize(("session", "most"), [
    (_Session("local-cluster[2,1,1024]"), 2),
    (_Session("local-cluster[3, 2, 512]", spark_task_cpus="2"), 3),
    (_Session("spark://h:7077", spark_cores_max="4"), 4),
    (_Session("spark://h:7077"), None),  # executors of any number may register
    (_Session("yarn", spark_executor_instances="3", spark_executor_cores="2"), 6),
    (_Session("yarn", spark_executor_instances="3", spark_executor_cores="2", spark_dynamicAllocation_enabled="true"), None),
    (_Session("k8s://https://api:6443", spark_executor_instances="2"), None),  # cores: the cluster's default
])
def test_auto_knows_when_a_cluster_can_never_offer_the_slots(session, most):
    """``auto`` waits up to 10 s for executors to register only when they could give the job
    its slots: not when the cluster's settings cap its cores below them."""
    from flowpoint.driver.slot_control import most_slots
    from flowpoint.spark.classic import ClassicAdapter

    assert most_slots(ClassicAdapter(session)) == most


def test_continuous_insists_and_fails_by_name(make_env, spark):
    slots = adapter_for(spark).slots_available()
    env = make_env(parallelism=2, **{"execution.runtime": "continuous"})
    counting(env, slots + 1)
    with pytest.raises(ConfigurationError, match=f"needs {slots + 1} task slots .* Spark offers {slots}"):
        env.execute("continuous short of slots")


def test_batch_runs_in_epochs_whatever_the_runtime_says(make_env):
    env = make_env(parallelism=2, **{"execution.runtime": "continuous"})
    env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    sink = counting(env, 2)
    client = env.execute_async("batch")
    client.wait(120)
    assert client.progress().runtime == "epoch"
    assert dict(sink.results) == expected_sums()  # BATCH: one final result per key


def test_the_default_local_master_has_a_slot_per_parallel_instance():
    cores = os.cpu_count() or 1
    assert default_master(1) == DEFAULT_MASTER
    assert default_master(cores) == DEFAULT_MASTER
    assert default_master(cores + 3) == f"local[{cores + 3},4]"


def test_an_unknown_runtime_is_refused_by_name():
    with pytest.raises(ConfigurationError, match="execution.runtime"):
        Configuration({"execution.runtime": "streaming"}).get("execution.runtime")
