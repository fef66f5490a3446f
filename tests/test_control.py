"""The control plane: the job registry, the loopback control endpoint, and the CLI commands
``list``, ``savepoint``, ``stop``, ``cancel``, ``inspect`` run as a user runs them."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from flowpoint import DataGeneratorSource
from flowpoint.cli import main as cli_main
from flowpoint.connectors.sinks import CollectSink
from flowpoint.control import endpoint
from flowpoint.control.commands import format_description
from flowpoint.driver.job_status import JobStatus
from flowpoint.driver.registry import (
    LOST,
    JobEntry,
    JobNotFoundError,
    JobRegistry,
    now_ms,
    registry_dir,
)
from flowpoint.errors import FlowpointError, JobCancelledError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def entry(job_id: str, status: str = "RUNNING", pid: int | None = None, start: int = 1, **kw) -> JobEntry:
    import socket

    return JobEntry(job_id, kw.pop("name", "job " + job_id[:4]), status, start, pid or os.getpid(), socket.gethostname(), "127.0.0.1:1", **kw)


def dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)
    return proc.pid


# -- the registry ------------------------------------------------------------------------------


def test_registry_dir_config_then_flowpoint_home_then_home(tmp_path, monkeypatch):
    from flowpoint.api.config import Configuration

    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    assert registry_dir() == tmp_path / "home" / "jobs"
    assert registry_dir(Configuration({"control.registry.dir": str(tmp_path / "reg")})) == tmp_path / "reg"
    monkeypatch.delenv("FLOWPOINT_HOME")
    assert str(registry_dir()).endswith(os.path.join(".flowpoint", "jobs"))


def test_registry_writes_are_atomic_under_concurrent_readers(tmp_path):
    reg = JobRegistry(tmp_path)
    e = entry("a" * 32)
    reg.write(e)
    stop = threading.Event()
    seen: list = []

    def writer():
        n = 0
        while not stop.is_set():
            n += 1
            e.last_checkpoint_id = n
            e.job_name = "x" * (n % 5000)  # entries of very different lengths
            reg.write(e)

    t = threading.Thread(target=writer)
    t.start()
    try:
        deadline = time.monotonic() + 1.5
        while time.monotonic() < deadline:
            text = (tmp_path / ("a" * 32 + ".json")).read_text()
            seen.append(json.loads(text)["last_checkpoint_id"])  # never a partial file
    finally:
        stop.set()
        t.join()
    assert len(set(seen)) > 1
    assert sorted(os.listdir(tmp_path)) == ["a" * 32 + ".json"]  # no temporary files left


def test_registry_unwritable_dir_names_it_and_says_what_to_do(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(FlowpointError, match=r"cannot write job registry entry .*file.*FLOWPOINT_HOME"):
        JobRegistry(blocker / "jobs").write(entry("b" * 32))


def test_stale_entry_of_a_dead_process_shows_lost_and_is_cleaned(tmp_path):
    reg = JobRegistry(tmp_path)
    live, gone = entry("1" * 32), entry("2" * 32, pid=dead_pid())
    reg.write(live)
    reg.write(gone)
    assert not live.is_stale() and gone.is_stale()
    assert gone.shown_status() == LOST
    assert [e.job_id for e in reg.clean_stale()] == [gone.job_id]
    cleaned = reg.read(gone.job_id)
    assert cleaned.status == LOST and cleaned.end_time_ms is not None and cleaned.ended
    assert reg.read(live.job_id).status == "RUNNING"


def test_resolve_by_unique_prefix_and_clear_errors(tmp_path):
    reg = JobRegistry(tmp_path)
    reg.write(entry("abc1" + "0" * 28, start=1))
    reg.write(entry("abc2" + "0" * 28, start=2))
    reg.write(entry("def0" + "0" * 28, status="FINISHED", end_time_ms=now_ms()))
    reg.write(entry("9990" + "0" * 28, pid=dead_pid()))
    assert reg.resolve("ABC1").job_id == "abc1" + "0" * 28
    with pytest.raises(JobNotFoundError, match=r"'abc' is ambiguous: it starts 2 running jobs .*give more characters"):
        reg.resolve("abc")
    with pytest.raises(JobNotFoundError, match=r"no job with id 'ffff' in the job registry .*flowpoint list"):
        reg.resolve("ffff")
    with pytest.raises(JobNotFoundError, match=r"job def0.* has ended \(FINISHED\).*flowpoint list"):
        reg.resolve("def")
    with pytest.raises(JobNotFoundError, match=r"job 9990.* is no longer running: its process \d+ .* is gone.*flowpoint list"):
        reg.resolve("999")
    assert reg.read("9990" + "0" * 28).status == LOST


def test_prune_drops_old_ended_entries(tmp_path):
    reg = JobRegistry(tmp_path)
    now = now_ms()
    reg.write(entry("0" * 32, status="FINISHED", end_time_ms=now - 8 * 24 * 3600 * 1000))
    reg.write(entry("1" * 32, status="CANCELED", end_time_ms=now - 1000))
    reg.write(entry("2" * 32))
    reg.prune(now)
    assert [e.job_id for e in reg.entries()] == ["1" * 32, "2" * 32]


def test_cli_errors_for_unknown_ended_and_gone_jobs(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path))
    reg = JobRegistry()
    reg.write(entry("5" * 32, pid=dead_pid()))
    reg.write(entry("6" * 32, status="CANCELED", end_time_ms=now_ms()))
    assert cli_main(["savepoint", "0123"]) == 1
    assert "no job with id '0123'" in capsys.readouterr().err
    assert cli_main(["stop", "555"]) == 1
    err = capsys.readouterr().err
    assert "is no longer running: its process" in err and "flowpoint list" in err
    assert cli_main(["cancel", "6666"]) == 1
    assert "has ended (CANCELED)" in capsys.readouterr().err
    assert cli_main(["savepoint"]) == 1
    assert "needs a JOB-ID" in capsys.readouterr().err
    assert cli_main(["list"]) == 0
    assert "No running jobs (2 ended: `flowpoint list --all`)." in capsys.readouterr().out
    assert cli_main(["list", "--all"]) == 0
    out = capsys.readouterr().out
    assert re.search(r"5{32}\s+job 5555\s+LOST", out) and re.search(r"6{32}\s+job 6666\s+CANCELED", out)


def test_list_shows_a_running_entry_with_its_last_checkpoint(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path))
    JobRegistry().write(entry("7" * 32, name="word counts", last_checkpoint_id=12, last_checkpoint_time_ms=now_ms()))
    assert cli_main(["list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["JOB", "ID", "NAME", "STATUS", "START", "TIME", "LAST", "CHECKPOINT"]
    assert re.match(r"7{32}\s+word counts\s+RUNNING\s+\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\s+12 at \d{4}-", lines[1])


def test_inspect_summary_format():
    text = format_description({
        "path": "file:///sp/savepoint-abcdef-0123456789ab", "kind": "savepoint", "checkpoint_id": 4,
        "job_id": "ab" * 16, "job_name": "counts", "epoch": 9, "completed_time_ms": 0,
        "max_parallelism": 128, "backend": "hashmap", "bytes": 4096,
        "operators": [{
            "uid": "counter", "name": "KeyedProcess", "parallelism": 2, "max_parallelism": 128,
            "states": {"count": {"kind": "value", "keys": 3}}, "state_names": ["count"], "keys": 3, "bytes": 2048,
        }],
        "sources": [{"uid": "src", "splits": 2, "finished": 1}],
        "sinks": [],
    })
    assert text.splitlines()[0] == "Savepoint file:///sp/savepoint-abcdef-0123456789ab"
    assert re.search(r"counter\s+KeyedProcess\s+2\s+128\s+3\s+2.0 KiB", text)
    assert "count (value): 3 keys" in text and "src: 2 splits, 1 finished" in text


def test_control_port_setting_is_checked():
    assert endpoint._parse_port("0") == [0]
    assert endpoint._parse_port(50100) == [50100]
    assert endpoint._parse_port("50100-50102") == [50100, 50101, 50102]
    with pytest.raises(FlowpointError, match="control.port must be 0"):
        endpoint._parse_port("http")


# -- the endpoint, against a job in this process --------------------------------------------


def call(address: str, method: str, path: str, body=None, timeout: float = 120) -> tuple[int, dict]:
    """A request as the job's owner sends it: with the token of this process's endpoint (the
    control token file under the FLOWPOINT_HOME it started with; see test_control_security.py)."""
    host, port = address.rsplit(":", 1)
    server = endpoint.current_server()
    headers = {"Content-Type": "application/json", "Authorization": f"Bearer {server.token if server else ''}"}
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        data = body if isinstance(body, (bytes, type(None))) else json.dumps(body).encode()
        conn.request(method, path, body=data, headers=headers)
        r = conn.getresponse()
        return r.status, json.loads(r.read() or b"{}")
    finally:
        conn.close()


def start_unbounded(make_env, tmp_path, name: str):
    env = make_env(parallelism=2, execution_epoch_interval=50, state_savepoints_dir=str(tmp_path / "sp"))
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/checkpoints")
    sink = CollectSink()
    source = DataGeneratorSource(lambda i: i % 5, count=None, rate_limit_per_second=100)
    env.from_source(source, source_name="endless").uid("src").key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sums").sink_to(sink)
    client = env.execute_async(name)
    return client, sink


def wait_for(predicate, timeout: float = 120, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    msg = f"timed out waiting for {what}"
    raise AssertionError(msg)


@pytest.mark.slow
def test_endpoint_routes_of_a_running_job(make_env, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    client, sink = start_unbounded(make_env, tmp_path, "endpoint routes")
    job_id = client.get_job_id()
    reg = JobRegistry()
    try:
        e = reg.read(job_id)
        assert e is not None and e.pid == os.getpid() and e.job_name == "endpoint routes"
        address = e.endpoint
        assert address.startswith("127.0.0.1:")  # loopback only
        assert endpoint.current_server().server_address[0] == "127.0.0.1"
        # the registry follows the job: RUNNING, then its checkpoints
        wait_for(lambda: (reg.read(job_id).status == "RUNNING" and reg.read(job_id).last_checkpoint_id), what="a checkpoint in the registry")

        status, jobs = call(address, "GET", "/jobs")
        assert status == 200 and {"id": job_id, "status": "RUNNING"} in jobs["jobs"]
        status, d = call(address, "GET", f"/jobs/{job_id}")
        assert status == 200 and d["jid"] == job_id and d["state"] == "RUNNING" and d["flowpoint"]["pid"] == os.getpid()
        assert d["name"] == "endpoint routes" and d["start-time"] == e.start_time_ms and d["end-time"] == -1
        assert [v["name"] for v in d["vertices"]] == ["endless", "Keyed Reduce -> CollectSink"]
        status, cps = call(address, "GET", f"/jobs/{job_id}/checkpoints")
        latest = cps["latest"]["completed"]
        assert status == 200 and latest["id"] >= 1 and latest["external_path"].endswith(f"chk-{latest['id']}")

        assert call(address, "GET", "/jobs/" + "0" * 32)[0] == 404
        status, err = call(address, "GET", "/nothing")
        assert status == 404 and "routes: GET /config" in err["errors"][0]
        assert call(address, "DELETE", f"/jobs/{job_id}")[0] == 405
        status, err = call(address, "POST", f"/jobs/{job_id}/savepoints", b"{not json")
        assert status == 400 and "not JSON" in err["errors"][0]
        status, err = call(address, "POST", f"/jobs/{job_id}/stop", {"drain": "yes"})
        assert status == 400 and '"drain" must be true or false' in err["errors"][0]
        status, err = call(address, "POST", f"/jobs/{job_id}/savepoints", {"formatType": "BINARY"})
        assert status == 400 and "'BINARY' is not supported here: CANONICAL or NATIVE" in err["errors"][0]
        status, err = call(address, "POST", f"/jobs/{job_id}/stop", {"formatType": "NATIVE"})
        assert status == 400 and "a stop-with-savepoint is canonical" in err["errors"][0]
        status, err = call(address, "GET", f"/jobs/{job_id}/savepoints/{'0' * 32}")
        assert status == 404 and f"no savepoint operation with triggerId={'0' * 32}" in err["errors"][0]

        status, err = call(address, "POST", f"/jobs/{job_id}/savepoints", {"target-directory": str(tmp_path / "elsewhere")})
        assert status == 403 and "not within the job's state.savepoints.dir" in err["errors"][0]
        assert not (tmp_path / "elsewhere").exists()
        # Flink's asynchronous savepoint: a trigger id at once, then its status until COMPLETED
        status, trigger = call(address, "POST", f"/jobs/{job_id}/savepoints", {"target-directory": str(tmp_path / "sp")})
        assert status == 202 and re.fullmatch(r"[0-9a-f]{32}", trigger["request-id"]), trigger
        seen = []

        def completed():
            answer = call(address, "GET", f"/jobs/{job_id}/savepoints/{trigger['request-id']}")[1]
            seen.append(answer["status"]["id"])
            return answer if answer["status"]["id"] == "COMPLETED" else None

        sp = wait_for(completed, what="the savepoint to complete")["operation"]
        assert set(seen) <= {"IN_PROGRESS", "COMPLETED"}
        assert re.search(rf"savepoint-{job_id[:6]}-[0-9a-f]{{12}}$", sp["location"])
        assert os.path.exists(os.path.join(sp["location"].removeprefix("file://"), "_metadata"))
        assert client.get_job_status() is JobStatus.RUNNING
        history = call(address, "GET", f"/jobs/{job_id}/checkpoints")[1]["history"]
        saved = [h for h in history if h["is_savepoint"]]
        assert [h["external_path"] for h in saved] == [sp["location"]] and saved[0]["checkpoint_type"] == "SAVEPOINT"

        status, body = call(address, "PATCH", f"/jobs/{job_id}?mode=stop")
        assert status == 400 and "mode=cancel" in body["errors"][0]
        status, body = call(address, "PATCH", f"/jobs/{job_id}?mode=cancel")
        assert status == 202 and body == {}
        with pytest.raises(JobCancelledError):
            client.wait(timeout=120)
        ended = wait_for(lambda: reg.read(job_id).end_time_ms and reg.read(job_id), what="the registry entry to end")
        assert ended.status == "CANCELED"
        wait_for(lambda: job_id not in endpoint._attached, 10, "the endpoint to let go of the job")
        with endpoint._lock:  # held by the detach until a server without jobs is closed
            pass
        if not endpoint._attached:  # the job was the process's last: the endpoint has stopped
            assert endpoint.current_server() is None
            with pytest.raises(ConnectionRefusedError):
                call(address, "GET", "/jobs")
        else:  # another test's job still runs here: it serves on
            assert call(address, "GET", f"/jobs/{job_id}")[0] == 404
    finally:
        client.cancel()


@pytest.mark.slow
def test_endpoint_answers_409_for_an_ended_job_still_served(make_env, tmp_path, monkeypatch):
    """Two jobs share a process's endpoint; one that ended answers 409 until it is dropped."""
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    a, _ = start_unbounded(make_env, tmp_path / "a", "job a")
    b, _ = start_unbounded(make_env, tmp_path / "b", "job b")
    try:
        reg = JobRegistry()
        address = reg.read(a.get_job_id()).endpoint
        assert reg.read(b.get_job_id()).endpoint == address  # one endpoint per process
        ids = {j["id"] for j in call(address, "GET", "/jobs")[1]["jobs"]}
        assert ids == {j["jid"] for j in call(address, "GET", "/jobs/overview")[1]["jobs"]}
        assert ids == {a.get_job_id(), b.get_job_id()}
        status, _ = call(address, "POST", f"/jobs/{a.get_job_id()}/cancel")
        assert status == 202
        with pytest.raises(JobCancelledError):
            a.wait(timeout=120)
        status, err = call(address, "POST", f"/jobs/{a.get_job_id()}/savepoints", {})
        assert status in (404, 409), err  # 409 while still listed, 404 once the watcher dropped it
        assert "flowpoint list --all" in err["errors"][0] or "has ended (CANCELED)" in err["errors"][0]
        assert call(address, "GET", f"/jobs/{b.get_job_id()}")[1]["state"] == "RUNNING"
    finally:
        a.cancel()
        b.cancel()
        for c in (a, b):
            try:
                c.wait(timeout=120)
            except JobCancelledError:
                pass


# -- the CLI end to end, as a user runs it ----------------------------------------------------

JOB = textwrap.dedent(
    """
    import sys
    from flowpoint import DataGeneratorSource, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment({"execution.epoch.interval": 50})
    env.set_parallelism(2)
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(sys.argv[2])
    source = DataGeneratorSource(lambda i: i % 7, count=None, rate_limit_per_second=100)
    env.from_source(source, source_name="numbers").uid("numbers") \\
       .key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sums").print()
    env.execute(sys.argv[1])
    """
)


def flowpoint(home, *args, timeout: float = 180) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLOWPOINT_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "flowpoint.cli", *args], capture_output=True, text=True, timeout=timeout, env=env, cwd=REPO)


def start_job(home, tmp_path, name: str) -> subprocess.Popen:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, FLOWPOINT_HOME=str(home))
    cmd = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[1]", "-D", "execution.progress.interval=-1",
           str(script), name, f"file://{tmp_path}/checkpoints"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.err", "w"), env=env, cwd=str(tmp_path))


def running_id(home, name: str, proc: subprocess.Popen, tmp_path) -> str:
    """The job's id once its registry entry says RUNNING (read directly: cheaper than polling
    ``flowpoint list``, which then must show it)."""
    reg = JobRegistry(home / "jobs")

    def find():
        assert proc.poll() is None, f"job {name} exited {proc.returncode}: {(tmp_path / f'{name}.err').read_text()[-3000:]}"
        return next((e.job_id for e in reg.entries() if e.job_name == name and e.status == "RUNNING"), None)

    job_id = wait_for(find, 180, f"job {name} RUNNING in the registry")
    out = flowpoint(home, "list").stdout
    assert re.search(rf"^{job_id}\s+{name}\s+RUNNING\s+\d{{4}}-", out, re.M), out
    return job_id


@pytest.mark.slow
def test_cli_list_savepoint_inspect_dispose_stop_cancel(tmp_path):
    home = tmp_path / "home"
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    a = start_job(home, tmp_path / "a", "job-a")
    b = start_job(home, tmp_path / "b", "job-b")
    try:
        id_a = running_id(home, "job-a", a, tmp_path / "a")
        id_b = running_id(home, "job-b", b, tmp_path / "b")

        # savepoint by a unique prefix: prints the path, which holds _metadata
        r = flowpoint(home, "savepoint", id_a[:8], str(tmp_path / "savepoints"))
        assert r.returncode == 0, r.stderr
        assert f"Triggering savepoint for job {id_a}." in r.stdout
        path = re.search(r"^Savepoint completed\. Path: (\S+)$", r.stdout, re.M).group(1)
        local = path.removeprefix("file://")
        assert re.fullmatch(rf".*/savepoints/savepoint-{id_a[:6]}-[0-9a-f]{{12}}", local)
        assert os.path.isfile(os.path.join(local, "_metadata"))

        r = flowpoint(home, "inspect", path)
        assert r.returncode == 0, r.stderr
        assert r.stdout.startswith(f"Savepoint {path}") and "job-a" in r.stdout
        assert re.search(r"^\s+sums\s+.*\s+2\s+128\s+\d+\s", r.stdout, re.M), r.stdout
        assert "numbers: 2 splits" in r.stdout

        r = flowpoint(home, "savepoint", "-d", path)
        assert r.returncode == 0, r.stderr
        assert f"Savepoint '{path}' disposed." in r.stdout and not os.path.exists(local)

        # stop with a savepoint: the job's process ends by itself, successfully
        r = flowpoint(home, "stop", "--drain", "--savepoint-path", str(tmp_path / "final"), id_a)
        assert r.returncode == 0, r.stderr
        assert f"Suspending job {id_a} with a savepoint after draining" in r.stdout
        final = re.search(r"^Savepoint completed\. Path: (\S+)$", r.stdout, re.M).group(1)
        assert os.path.isfile(os.path.join(final.removeprefix("file://"), "_metadata"))
        assert a.wait(timeout=120) == 0

        # cancel the other one
        r = flowpoint(home, "cancel", id_b)
        assert r.returncode == 0, r.stderr
        assert f"Cancelled job {id_b}." in r.stdout
        b.wait(timeout=120)

        out = flowpoint(home, "list").stdout
        assert out.startswith("No running jobs (2 ended")
        out = flowpoint(home, "list", "--all").stdout
        assert re.search(rf"^{id_a}\s+job-a\s+FINISHED\s", out, re.M), out
        assert re.search(rf"^{id_b}\s+job-b\s+CANCELED\s", out, re.M), out

        # the ended job, and an unknown one: exit 1 with what to do
        r = flowpoint(home, "savepoint", id_a)
        assert r.returncode == 1 and "has ended (FINISHED)" in r.stderr and "flowpoint list" in r.stderr
        r = flowpoint(home, "cancel", "f" * 32)
        assert r.returncode == 1 and "no job with id" in r.stderr and "flowpoint list" in r.stderr
    finally:
        for p in (a, b):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
