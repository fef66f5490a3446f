"""The CLI commands Flink users type (issue 20), run through subprocesses as a user types them:
help with examples, ``info``, ``run -d``, ``list -r/-s/-a``, ``checkpoint``."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

JOB = textwrap.dedent(
    """
    import sys
    from flowpoint import DataGeneratorSource, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment({"execution.epoch.interval": 50})
    env.set_parallelism(2)
    if sys.argv[2] != "none":
        env.enable_checkpointing(60000)  # far apart: only a triggered checkpoint happens
        env.get_checkpoint_config().set_checkpoint_storage(sys.argv[2])
    source = DataGeneratorSource(lambda i: i % 7, count=int(sys.argv[3]), rate_limit_per_second=100)
    env.from_source(source, source_name="numbers").uid("numbers") \\
       .key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sums").print()
    env.execute(sys.argv[1])
    print("AFTER EXECUTE")
    """
)


def flowpoint(home, *args, timeout: float = 180, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLOWPOINT_HOME=str(home), **(env_extra or {}))
    env["PYTHONPATH"] = os.pathsep.join([REPO, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return subprocess.run([sys.executable, "-m", "flowpoint.cli", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def test_help_of_flowpoint_and_every_command_shows_examples(tmp_path):
    r = flowpoint(tmp_path, "--help")
    assert r.returncode == 0 and "examples:" in r.stdout and "flowpoint run -d" in r.stdout
    for command in ("run", "info", "list", "checkpoint", "checkpoints", "savepoint", "stop", "cancel", "inspect", "ui"):
        r = flowpoint(tmp_path, command, "--help")
        assert r.returncode == 0, r.stderr
        assert re.search(rf"examples:\n\s+flowpoint {command}\b", r.stdout), (command, r.stdout)


def test_info_prints_the_plan_json_without_starting_spark(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(JOB)
    # no Java: starting Spark would fail, so exit 0 with the plan proves none was started
    r = flowpoint(tmp_path, "info", "-p", "3", str(script), "planned", "none", "10", timeout=60,
                  env_extra={"JAVA_HOME": "/nonexistent", "PATH": "/usr/bin:/bin"})
    assert r.returncode == 0, r.stderr
    assert "AFTER EXECUTE" not in r.stdout  # the script stops at execute()
    plan = json.loads(r.stdout)
    nodes = {n["contents"]: n for n in plan["nodes"]}
    assert set(nodes) == {"numbers", "Keyed Reduce", "Print to Std. Out"}
    assert nodes["numbers"]["pact"] == "Data Source" and nodes["numbers"]["parallelism"] == 2  # the script's own
    reduce = nodes["Keyed Reduce"]
    assert reduce["pact"] == "Operator"
    assert reduce["predecessors"] == [{"id": nodes["numbers"]["id"], "ship_strategy": "HASH", "side": "first"}]
    assert nodes["Print to Std. Out"]["predecessors"][0]["ship_strategy"] == "FORWARD"

    empty = tmp_path / "empty.py"
    empty.write_text("print('nothing')\n")
    r = flowpoint(tmp_path, "info", str(empty), timeout=60)
    assert r.returncode == 1 and "never called execute()" in r.stderr


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.slow
def test_run_detached_list_and_checkpoint(tmp_path):
    home = tmp_path / "home"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    started = time.monotonic()
    # 3000 records at 100/s: the job runs ~30 s after it starts (with 15 s, a loaded CI machine's
    # two checkpoint commands came after its end)
    r = flowpoint(home, "run", "-d", "-m", "local[1]", "-D", "execution.progress.interval=-1",
                  str(script), "detached-job", f"file://{tmp_path}/checkpoints", "3000", timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = re.search(r"^Job has been submitted with JobID ([0-9a-f]{32})$", r.stdout, re.M).group(1)
    assert time.monotonic() - started < 240
    log = re.search(r"output goes to (\S+);", r.stdout).group(1)

    # the CLI has returned; the job runs on
    out = flowpoint(home, "list", "-r").stdout
    assert re.search(rf"^{job_id}\s+detached-job\s+RUNNING\s", out, re.M), out
    assert flowpoint(home, "list").stdout == out  # plain list: running and scheduled
    assert flowpoint(home, "list", "-s").stdout.startswith("No scheduled jobs")

    # a checkpoint now (the interval is a minute): its path holds _metadata
    r = flowpoint(home, "checkpoint", job_id[:8])
    assert r.returncode == 0, r.stderr
    assert f"Triggering checkpoint for job {job_id}." in r.stdout
    m = re.search(r"^Checkpoint\((\d+)\) completed\. Path: (\S+)$", r.stdout, re.M)
    assert m, r.stdout
    assert os.path.isfile(os.path.join(m.group(2).removeprefix("file://"), "_metadata"))
    r = flowpoint(home, "checkpoint", "-full", job_id)
    assert r.returncode == 0, r.stderr
    m2 = re.search(r"^Checkpoint\((\d+)\) completed\. Path: (\S+)$", r.stdout, re.M)
    assert int(m2.group(1)) > int(m.group(1))
    assert os.path.isfile(os.path.join(m2.group(2).removeprefix("file://"), "_metadata"))

    # it finishes by itself; then only list -a shows it
    _wait(lambda: re.search(rf"^{job_id}\s+detached-job\s+FINISHED\s", flowpoint(home, "list", "-a").stdout, re.M), 180, "the job to finish")
    assert flowpoint(home, "list", "-r").stdout.startswith("No running jobs (1 ended")
    assert "AFTER EXECUTE" in open(log).read()


@pytest.mark.slow
def test_checkpoint_of_a_job_without_checkpointing_is_refused(tmp_path):
    home = tmp_path / "home"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    r = flowpoint(home, "run", "-d", "-m", "local[1]", "-D", "execution.progress.interval=-1",
                  str(script), "no-checkpoints", "none", "1000", timeout=240)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = re.search(r"JobID ([0-9a-f]{32})", r.stdout).group(1)
    try:
        r = flowpoint(home, "checkpoint", job_id)
        assert r.returncode == 1 and "checkpointing is not enabled" in r.stderr, r.stdout + r.stderr
    finally:
        flowpoint(home, "cancel", job_id)
