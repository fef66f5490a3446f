"""Settings whose value makes no sense are refused with their name and allowed range (issue 17,
case 8), through ``flowpoint run -D`` as a user types them and through a Configuration."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flowpoint.api.config import Configuration
from flowpoint.errors import ConfigurationError

REFUSED = [
    ("parallelism.default", "0", "an integer >= 1"),
    ("parallelism.default", "-3", "an integer >= 1"),
    ("pipeline.max-parallelism", "0", "an integer from 1 to 32768"),
    ("pipeline.max-parallelism", "40000", "an integer from 1 to 32768"),
    ("execution.epoch.max-records", "0", "an integer >= 1"),
    ("execution.epoch.max-records", "-100", "an integer >= 1"),
    ("execution.epoch.interval", "-1", "at least 0 ms"),
    ("execution.epoch.idle-interval", "-1", "at least 0 ms"),
    ("execution.progress.interval", "-2", "an integer >= -1"),
    ("state.working.compaction-bytes", "-1", "an integer >= 0"),
    ("state.checkpoints.dir", "checkpoints", "an absolute path or a URI with a scheme"),
    ("state.checkpoints.dir", "./ck", "an absolute path or a URI with a scheme"),
    ("state.savepoints.dir", "savepoints/mine", "an absolute path or a URI with a scheme"),
    ("state.working.remote-dir", "durable", "an absolute path or a URI with a scheme"),
    ("execution.checkpointing.timeout", "-5", "at least 10 ms"),
    ("restart-strategy.fixed-delay.attempts", "-1", "an integer >= 0"),
    ("state.checkpoints.num-retained", "0", "an integer >= 1"),
]


@pytest.mark.parametrize(("key", "value", "allowed"), REFUSED, ids=[f"{k}={v}" for k, v, _ in REFUSED])
def test_a_configuration_refuses_the_value_naming_key_and_range(key, value, allowed):
    with pytest.raises(ConfigurationError) as info:
        Configuration({key: value})
    message = str(info.value)
    assert f"'{key}' must be " in message and allowed in message and message.endswith(f"got {value!r}")


def test_sensible_values_are_kept():
    conf = Configuration({
        "parallelism.default": "4", "pipeline.max-parallelism": "32768", "execution.epoch.max-records": "1",
        "execution.epoch.interval": "0", "execution.epoch.idle-interval": "2 s", "execution.progress.interval": "-1",
        "state.working.compaction-bytes": "0", "state.checkpoints.dir": "/data/ck", "state.savepoints.dir": "s3://b/sp",
        "state.working.remote-dir": "hdfs://nn:8020/durable",
    })
    assert conf.get("parallelism.default") == 4 and conf.get("execution.epoch.idle-interval") == 2000
    assert conf.get("state.checkpoints.dir") == "file:///data/ck" and conf.get("state.savepoints.dir") == "s3://b/sp"
    assert conf.get("state.working.remote-dir") == "hdfs://nn:8020/durable"
    assert Configuration({"state.checkpoints.dir": "~/ck"}).get("state.checkpoints.dir") == "file://" + os.path.expanduser("~/ck")


def test_the_relative_directory_error_says_where_it_would_have_gone(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigurationError) as info:
        Configuration({"state.checkpoints.dir": "ck"})
    assert f"(here {tmp_path}/ck)" in str(info.value)


JOB = """
from flowpoint import CollectSink, StreamExecutionEnvironment
env = StreamExecutionEnvironment.get_execution_environment()
env.from_collection([1, 2, 3]).map(lambda x: x + 1).sink_to(CollectSink())
env.execute("ranges")
"""

CLI_CASES = [
    ("parallelism.default", "0", "an integer >= 1"),
    ("execution.epoch.max-records", "0", "an integer >= 1"),
    ("execution.epoch.max-records", "-5", "an integer >= 1"),
    ("state.checkpoints.dir", "ck", "an absolute path or a URI with a scheme"),
    ("state.savepoints.dir", "sp", "an absolute path or a URI with a scheme"),
    ("state.working.compaction-bytes", "-1", "an integer >= 0"),
]


@pytest.mark.parametrize(("key", "value", "allowed"), CLI_CASES, ids=[f"{k}={v}" for k, v, _ in CLI_CASES])
def test_flowpoint_run_refuses_the_setting_before_the_job_starts(tmp_path, key, value, allowed):
    job = tmp_path / "job.py"
    job.write_text(JOB)
    proc = subprocess.run(
        [sys.executable, "-m", "flowpoint.cli", "run", "-D", f"{key}={value}", str(job)],
        capture_output=True, text=True, timeout=120, cwd=str(tmp_path),
    )
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("flowpoint: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert f"'{key}' must be " in errors[0] and allowed in errors[0] and errors[0].endswith(f"got '{value}'"), errors[0]
    assert " on Spark " not in proc.stderr
    assert not (tmp_path / value).exists()  # nothing written under the working directory
