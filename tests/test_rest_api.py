"""Issue 19: the REST API follows Flink's shapes. Every field name of Flink's answer, as Flink's
own REST spec lists them (recorded in tests/flink_rest_keys.json, which says where from), is in
flowpoint's answer, and flowpoint adds nothing beside them but a ``"flowpoint"`` object. Asked
of a real job that failed once and restarted, took a savepoint through
``POST /jobs/:jid/savepoints`` (polled by its trigger id until COMPLETED), and then stopped
through ``POST /jobs/:jid/stop``; its archive keeps its last answers."""

from __future__ import annotations

import http.client
import json
import os
import re
import stat
import time
from pathlib import Path

import pytest

from flowpoint import CollectSink, DataGeneratorSource, MapFunction, RestartStrategies
from flowpoint.control import endpoint
from flowpoint.control.archive import read_archive
from flowpoint.driver.registry import JobRegistry
from flowpoint.errors import JobCancelledError

KEYS = json.loads(Path(__file__).with_name("flink_rest_keys.json").read_text())
# what flowpoint adds beside Flink's keys, by schema (docs/rest.md): the "flowpoint" object, and
# /config's "flowpoint-version" (the dashboard's contract)
EXTRA = {"DashboardConfiguration": {"flowpoint-version"}}


def holds(answer: dict, schema: str, *also: str) -> None:
    """``answer`` has every key of Flink's ``schema`` (and of the schemas ``also``, its
    subtypes), and nothing else but flowpoint's own object."""
    flink = set(KEYS[schema]).union(*(KEYS[a] for a in also))
    assert isinstance(answer, dict), (schema, answer)
    missing = flink - set(answer)
    assert not missing, f"{schema}: Flink's keys {sorted(missing)} are missing from {sorted(answer)}"
    extra = set(answer) - flink - {"flowpoint"} - EXTRA.get(schema, set())
    assert not extra, f"{schema}: keys {sorted(extra)} are not Flink's (flowpoint's own go in 'flowpoint')"


class FailOnce(MapFunction):
    """Fails the job once at record ``at``: every Spark attempt of the task that first met it
    fails too (so Spark's own retries give up and the job restarts), a restart gets past it."""

    def __init__(self, flag: str, at: int):
        self.flag, self.at = flag, at

    def map(self, value):
        if value == self.at:
            from pyspark import TaskContext

            stage = str(TaskContext.get().stageId())
            if not os.path.exists(self.flag):
                with open(self.flag, "w") as f:
                    f.write(stage)
                msg = f"injected at {value}"
                raise ValueError(msg)
            with open(self.flag) as f:
                if TaskContext.get().attemptNumber() > 0 and f.read() == stage:
                    msg = f"injected at {value} (Spark's retry)"
                    raise ValueError(msg)
        return value


def call(method: str, path: str, body=None, timeout: float = 120):
    server = endpoint.current_server()
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=timeout)
    headers = {"Authorization": f"Bearer {server.token}", "Content-Type": "application/json"}
    try:
        conn.request(method, path, body=json.dumps(body).encode() if body is not None else None, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def wait_for(predicate, timeout: float = 300, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    msg = f"timed out waiting for {what}"
    raise AssertionError(msg)


def operation(job_id: str, trigger: str) -> dict:
    """Poll a savepoint operation by its trigger id until COMPLETED."""
    def done():
        status, answer = call("GET", f"/jobs/{job_id}/savepoints/{trigger}")
        assert status == 200, answer
        holds(answer, "AsynchronousOperationResult")
        holds(answer["status"], "QueueStatus")
        assert answer["status"]["id"] in ("IN_PROGRESS", "COMPLETED")
        return answer if answer["status"]["id"] == "COMPLETED" else None

    return wait_for(done, what=f"savepoint operation {trigger}")


def start_job(make_env, tmp_path, runtime: str = "epoch"):
    env = make_env(parallelism=2, execution_epoch_interval=50, state_savepoints_dir=str(tmp_path / "sp"), execution_runtime=runtime)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/checkpoints")
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 100))
    source = DataGeneratorSource(lambda i: i % 50, count=None, rate_limit_per_second=300)
    (env.from_source(source, source_name="numbers").uid("numbers")
        .map(FailOnce(str(tmp_path / "failed"), 30)).uid("boom")
        .key_by(lambda x: x % 5).reduce(lambda a, b: a + b).uid("sums")
        .sink_to(CollectSink()).uid("out"))
    return env.execute_async(f"rest {runtime}")


def check_job_details(d: dict, job_id: str) -> None:
    holds(d, "JobDetailsInfo")
    assert d["jid"] == job_id and d["state"] == "RUNNING" and d["isStoppable"] and d["timestamps"]["RUNNING"] >= d["start-time"]
    assert [v["name"] for v in d["vertices"]] == ["numbers -> Map", "Keyed Reduce -> CollectSink"]
    for v in d["vertices"]:
        holds(v, "JobDetailsVertexInfo")
        holds(v["metrics"], "IOMetricsInfo")
        assert v["tasks"]["RUNNING"] == v["parallelism"] == 2 and re.fullmatch(r"[0-9a-f]{32}", v["id"])
    assert d["vertices"][1]["metrics"]["read-records"] > 0 and d["vertices"][0]["metrics"]["write-records"] > 0
    assert d["status-counts"]["RUNNING"] == 2
    holds(d["plan"], "Plan")
    source, keyed = d["plan"]["nodes"]
    for node in (source, keyed):
        holds(node, "PlanNode")
    assert source["inputs"] == [] and [i["id"] for i in keyed["inputs"]] == [source["id"]]
    holds(keyed["inputs"][0], "PlanInput")
    assert keyed["inputs"][0]["ship_strategy"] == "HASH"
    ops = {op["uid"]: op for op in d["flowpoint"]["operators"]}
    assert list(ops) == ["numbers", "boom", "sums", "out"]
    assert [ops[u]["chained-to"] for u in ops] == [None, "numbers", None, "sums"]
    assert ops["sums"]["vertex-id"] == keyed["id"] and ops["sums"]["metrics"]["numRecordsIn"] > 0
    assert set(ops["sums"]["metrics"]) == {
        "numRecordsIn", "numRecordsOut", "numRecordsInPerSecond", "numRecordsOutPerSecond", "currentInputWatermark",
        "numLateRecordsDropped", "busyTimeMsPerSecond", "backPressuredTimeMsPerSecond", "idleTimeMsPerSecond", "stateSize",
    }
    assert ops["sums"]["metrics"]["stateSize"] > 0 and ops["boom"]["metrics"]["stateSize"] is None
    assert d["flowpoint"]["restarts"] == 1 and d["flowpoint"]["runtime"] == "epoch"


def check_checkpoints(c: dict, savepoint: str) -> None:
    holds(c, "CheckpointingStatistics")
    holds(c["counts"], "Counts")
    holds(c["summary"], "CheckpointStatisticsSummary")
    for name in KEYS["CheckpointStatisticsSummary"]:
        holds(c["summary"][name], "StatsSummaryDto")
    holds(c["latest"], "LatestCheckpoints")
    holds(c["latest"]["completed"], "CheckpointStatistics", "CompletedCheckpointStatistics")
    holds(c["latest"]["savepoint"], "CheckpointStatistics", "CompletedCheckpointStatistics")
    assert c["latest"]["savepoint"]["external_path"] == savepoint and c["latest"]["savepoint"]["is_savepoint"]
    assert c["latest"]["savepoint"]["checkpoint_type"] == "SAVEPOINT"
    assert c["counts"]["completed"] >= 2 and c["summary"]["state_size"]["max"] > 0
    for entry in c["history"]:
        subtype = {"completed": ["CompletedCheckpointStatistics"], "failed": ["FailedCheckpointStatistics"]}.get(entry["className"], [])
        holds(entry, "CheckpointStatistics", *subtype)
        assert set(entry["flowpoint"]) == {"sync_duration", "async_duration", "incremental_size", "epoch", "unit"}
        assert entry["flowpoint"]["unit"] == "epoch"  # an epoch job's checkpoints come after epochs
    ids = [e["id"] for e in c["history"]]
    assert ids == sorted(ids, reverse=True)
    if c["latest"]["restored"] is not None:
        holds(c["latest"]["restored"], "RestoredCheckpointStatistics")


@pytest.mark.slow
def test_rest_answers_hold_flinks_field_names_through_a_failure_a_savepoint_and_a_stop(make_env, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    client = start_job(make_env, tmp_path)
    job_id = client.get_job_id()
    try:
        def restarted_and_checkpointed():
            d = call("GET", f"/jobs/{job_id}")[1]
            c = call("GET", f"/jobs/{job_id}/checkpoints")[1]
            return d["state"] == "RUNNING" and d["flowpoint"]["restarts"] == 1 and c["counts"]["completed"] >= 1

        wait_for(restarted_and_checkpointed, what="a restart and a completed checkpoint")

        # a savepoint through the REST API, polled by its trigger id until COMPLETED
        status, trigger = call("POST", f"/jobs/{job_id}/savepoints", {"target-directory": str(tmp_path / "sp"), "cancel-job": False})
        assert status == 202, trigger
        holds(trigger, "TriggerResponse")
        done = operation(job_id, trigger["request-id"])
        holds(done["operation"], "SavepointInfo")
        location = done["operation"]["location"]
        assert location.startswith(f"file://{tmp_path}/sp/savepoint-{job_id[:6]}-")
        assert os.path.isfile(os.path.join(location.removeprefix("file://"), "_metadata"))
        # one that fails says why, as Flink's failure-cause
        (tmp_path / "a-file").write_text("")
        status, failing = call("POST", f"/jobs/{job_id}/savepoints", {"target-directory": str(tmp_path / "a-file" / "sp"), "explicit": True})
        assert status == 202
        failed = operation(job_id, failing["request-id"])["operation"]
        holds(failed, "SavepointInfoFailed")
        assert failed["failure-cause"]["class"] and "a-file" in failed["failure-cause"]["stack-trace"]

        status, config = call("GET", "/config")
        holds(config, "DashboardConfiguration")
        holds(config["features"], "Features")
        holds(call("GET", "/overview")[1], "ClusterOverviewWithVersion")
        jobs = call("GET", "/jobs")[1]
        holds(jobs, "JobIdsWithStatusOverview")
        assert {"id": job_id, "status": "RUNNING"} in jobs["jobs"]
        for j in jobs["jobs"]:
            holds(j, "JobIdWithStatus")
        overview = call("GET", "/jobs/overview")[1]
        holds(overview, "MultipleJobsDetails")
        mine = next(j for j in overview["jobs"] if j["jid"] == job_id)
        holds(mine, "JobDetails")
        assert mine["tasks"]["total"] == 4 and mine["flowpoint"]["records-in"] > 0 and mine["flowpoint"]["restarts"] == 1

        d = call("GET", f"/jobs/{job_id}")[1]
        check_job_details(d, job_id)
        for v in d["vertices"]:
            status, vd = call("GET", f"/jobs/{job_id}/vertices/{v['id']}")
            assert status == 200
            holds(vd, "JobVertexDetailsInfo")
            holds(vd["aggregated"], "AggregatedTaskDetailsInfo")
            assert [s["subtask"] for s in vd["subtasks"]] == [0, 1]
            for s in vd["subtasks"]:
                holds(s, "SubtaskExecutionAttemptDetailsInfo")
                holds(s["metrics"], "IOMetricsInfo")
                assert s["attempt"] == 1 and set(s["flowpoint"]["operators"]) == {op["uid"] for op in d["flowpoint"]["operators"] if op["vertex-id"] == v["id"]}
            assert vd["aggregated"]["metrics"]["read-records"]["sum"] == sum(s["metrics"]["read-records"] for s in vd["subtasks"])
        assert call("GET", f"/jobs/{job_id}/vertices/{'0' * 32}")[0] == 404

        check_checkpoints(call("GET", f"/jobs/{job_id}/checkpoints")[1], location)
        cfg = call("GET", f"/jobs/{job_id}/checkpoints/config")[1]
        holds(cfg, "CheckpointConfigInfo")
        holds(cfg["externalization"], "ExternalizedCheckpointInfo")
        assert cfg["interval"] == 300 and cfg["state_backend"] == "HashMapStateBackend" and cfg["checkpoint_storage"] == "FileSystemCheckpointStorage"

        ex = call("GET", f"/jobs/{job_id}/exceptions")[1]
        holds(ex, "JobExceptionsInfoWithHistory")
        holds(ex["exceptionHistory"], "JobExceptionHistory")
        [entry] = ex["exceptionHistory"]["entries"]
        holds(entry, "RootExceptionInfo")
        assert "injected at 30" in entry["stacktrace"] and entry["stacktrace"] == ex["root-exception"]
        assert entry["flowpoint"]["restarted"] and "injected at 30" in entry["flowpoint"]["message"]
        assert entry["taskName"] == "Map" and entry["flowpoint"]["uid"] == "boom"
        assert re.fullmatch(r".*tests/test_rest_api\.py:\d+", entry["location"]), entry["location"]
        assert call("GET", f"/jobs/{job_id}/exceptions?maxExceptions=0")[1]["exceptionHistory"] == {"entries": [], "truncated": True}

        epochs = call("GET", f"/jobs/{job_id}/epochs")[1]["epochs"]
        assert epochs and all(set(e) == {"epoch", "records", "duration", "spark-jobs"} for e in epochs)
        linked = [j for e in epochs for j in e["spark-jobs"]]
        assert linked and all(isinstance(j["id"], int) for j in linked)
        if d["flowpoint"]["spark-ui"]:
            assert all(j["url"] == f"{d['flowpoint']['spark-ui']}/jobs/job/?id={j['id']}" for j in linked)
        samples = wait_for(lambda: call("GET", f"/jobs/{job_id}/throughput")[1]["samples"], what="throughput samples")
        assert all(set(s) == {"time", "in", "out"} for s in samples)

        # stop through the REST API: the job ends, and its archive keeps its answers
        status, stopping = call("POST", f"/jobs/{job_id}/stop", {"targetDirectory": str(tmp_path / "sp"), "drain": True})
        assert status == 202
        holds(stopping, "TriggerResponse")
        final = operation(job_id, stopping["request-id"])["operation"]["location"]
        assert final.startswith(f"file://{tmp_path}/sp/savepoint-") and final != location
        client.wait(timeout=120)
        registry = JobRegistry()
        entry = wait_for(lambda: (e := registry.read(job_id)) and e.end_time_ms and e, what="the registry entry to end")
        assert entry.status == "FINISHED"
        archive = read_archive(registry, job_id)
        path = registry.dir / "archive" / f"{job_id}.json"
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
        routes = archive["routes"]
        assert routes[f"/jobs/{job_id}"]["state"] == "FINISHED" and archive["overview"]["state"] == "FINISHED"
        assert routes[f"/jobs/{job_id}/savepoints/{stopping['request-id']}"]["operation"]["location"] == final
        stopped = [h for h in routes[f"/jobs/{job_id}/checkpoints"]["history"] if h["checkpoint_type"] == "SYNC_SAVEPOINT"]
        assert [h["external_path"] for h in stopped] == [final]
        assert {f"/jobs/{job_id}/vertices/{v['id']}" for v in d["vertices"]} <= set(routes)
    finally:
        client.cancel()


@pytest.mark.slow
def test_the_continuous_runtime_answers_the_same_routes(make_env, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    client = start_job(make_env, tmp_path, runtime="continuous")
    job_id = client.get_job_id()
    try:
        def counted():
            d = call("GET", f"/jobs/{job_id}")[1]
            ops = {op["uid"]: op["metrics"] for op in d["flowpoint"]["operators"]}
            return d if d["state"] == "RUNNING" and ops["out"]["numRecordsIn"] > 0 and d["flowpoint"]["restarts"] == 1 else None

        d = wait_for(counted, what="records counted by the sink")
        holds(d, "JobDetailsInfo")
        assert d["flowpoint"]["runtime"] == "continuous"
        assert d["plan"]["nodes"][1]["inputs"][0]["exchange"] == "pipelined_bounded"
        assert call("GET", f"/jobs/{job_id}/epochs")[1] == {"epochs": []}
        ex = call("GET", f"/jobs/{job_id}/exceptions")[1]["exceptionHistory"]["entries"]
        assert len(ex) == 1 and "injected at 30" in ex[0]["stacktrace"]
        status, body = call("PATCH", f"/jobs/{job_id}?mode=cancel")
        assert status == 202 and body == {}
        with pytest.raises(JobCancelledError):
            client.wait(timeout=120)
    finally:
        client.cancel()
