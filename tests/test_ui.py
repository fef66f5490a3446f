"""Issue 19: ``flowpoint ui`` as a user runs it, beside a job that ended and one that runs (each
in its own ``flowpoint run`` process): it lists both, answers the ended job from its archive and
the running one through its endpoint, stops the running one for a browser session (the stop's
result still answered once the job's process has exited), and the running job printed its own
dashboard URL (with the token, once) and Spark's UI URL when it started."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
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
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(sys.argv[2])
    count = int(sys.argv[3]) if sys.argv[3] != "endless" else None
    source = DataGeneratorSource(lambda i: i % 7, count=count, rate_limit_per_second=100)
    env.from_source(source, source_name="numbers").uid("numbers") \\
       .key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sums").print()
    env.execute(sys.argv[1])
    """
)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(predicate, timeout: float = 300, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.3)
    msg = f"timed out waiting for {what}"
    raise AssertionError(msg)


def ask(port: int, method: str, path: str, headers: dict | None = None, body: bytes | None = None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, dict(r.getheaders()), data
    finally:
        conn.close()


def run_job(tmp_path, home, name: str, count: str, *options: str, wait: bool) -> subprocess.Popen | subprocess.CompletedProcess:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, FLOWPOINT_HOME=str(home))
    cmd = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[1]", *options, str(script), name, f"file://{tmp_path}/ck-{name}", count]
    if wait:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path))
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.err", "w"), env=env, cwd=str(tmp_path))  # noqa: SIM115


@pytest.mark.slow
def test_flowpoint_ui_lists_a_running_and_an_ended_job_and_stops_one(tmp_path):
    home = tmp_path / "home"
    ended = run_job(tmp_path, home, "ended-job", "300", "-D", "execution.progress.interval=-1", wait=True)
    assert ended.returncode == 0, ended.stderr[-3000:]
    assert "[flowpoint] dashboard:" not in ended.stderr  # a negative progress interval prints nothing
    running = run_job(tmp_path, home, "running-job", "endless", "-D", f"state.savepoints.dir={tmp_path}/sp", wait=False)
    port = free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "flowpoint.cli", "ui", "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=dict(os.environ, FLOWPOINT_HOME=str(home)), cwd=REPO,
    )
    try:
        printed = ui.stdout.readline()
        m = re.fullmatch(rf"flowpoint ui: http://127\.0\.0\.1:{port}/\?token=(\S+)\n", printed)
        assert m, printed + ui.stderr.read() if ui.poll() is not None else printed
        token = m.group(1)
        assert token == (home / "control-token").read_text().strip()

        # the URL's token starts a session; the cookie opens the rest
        status, headers, _ = ask(port, "GET", f"/?token={token}")
        assert status == 303 and headers["Location"] == "/"
        session = {"Cookie": headers["Set-Cookie"].split(";", 1)[0]}

        def jobs_now() -> dict:
            status, _, body = ask(port, "GET", "/jobs/overview", session)
            assert status == 200, body
            return {j["name"]: j for j in json.loads(body)["jobs"]}

        def both():
            assert running.poll() is None, (tmp_path / "running-job.err").read_text()[-3000:]
            jobs = jobs_now()
            return jobs if jobs.get("running-job", {}).get("state") == "RUNNING" else None

        jobs = wait_for(both, what="the running job in flowpoint ui")
        assert jobs["ended-job"]["state"] == "FINISHED" and jobs["ended-job"]["end-time"] > 0
        assert jobs["ended-job"]["flowpoint"]["records-in"] == 300 and jobs["ended-job"]["tasks"]["finished"] == 4
        ended_id, running_id = jobs["ended-job"]["jid"], jobs["running-job"]["jid"]
        overview = json.loads(ask(port, "GET", "/overview", session)[2])
        assert overview["jobs-running"] == 1 and overview["jobs-finished"] == 1

        # the ended job, from its archive
        status, _, body = ask(port, "GET", f"/jobs/{ended_id}", session)
        d = json.loads(body)
        assert status == 200 and d["state"] == "FINISHED" and [v["name"] for v in d["vertices"]] == ["numbers", "Keyed Reduce -> Print to Std. Out"]
        status, _, body = ask(port, "GET", f"/jobs/{ended_id}/checkpoints", session)
        assert status == 200 and json.loads(body)["counts"]["completed"] >= 1
        status, _, body = ask(port, "GET", f"/jobs/{ended_id}/vertices/{d['vertices'][1]['id']}", session)
        assert status == 200 and sum(s["metrics"]["read-records"] for s in json.loads(body)["subtasks"]) == 300
        own = {**session, "Origin": f"http://127.0.0.1:{port}", "Content-Type": "application/json"}
        assert ask(port, "POST", f"/jobs/{ended_id}/stop", own, b"{}")[0] == 409

        # the running job, through its endpoint
        status, _, body = ask(port, "GET", f"/jobs/{running_id}", session)
        d = json.loads(body)
        assert status == 200 and d["state"] == "RUNNING" and d["flowpoint"]["pid"] == running.pid

        # it printed its dashboard URL (without the token: output may go to a log, issue 25) and
        # Spark's when it started; the URL is its own endpoint's, where the token signs in
        err = wait_for(lambda: (text := (tmp_path / "running-job.err").read_text()) and "Spark UI:" in text and text, what="the URLs")
        url = re.search(rf"^\[flowpoint\] dashboard: http://127\.0\.0\.1:(\d+)/#/jobs/{running_id} \(sign in with the link `flowpoint list` prints\)$", err, re.M)
        assert url and token not in err, err[-2000:]
        assert re.search(r"^\[flowpoint\] Spark UI: http://\S+:\d+$", err, re.M), err[-2000:]
        status, headers, _ = ask(int(url.group(1)), "GET", f"/?token={token}")
        assert status == 303 and headers["Set-Cookie"].startswith(f"flowpoint-session-{url.group(1)}=")

        # stop it from the dashboard's session: the result is still answered after its process exited
        status, _, body = ask(port, "POST", f"/jobs/{running_id}/stop", own, json.dumps({"drain": False}).encode())
        assert status == 202, body
        trigger = json.loads(body)["request-id"]

        def stopped():
            status, _, body = ask(port, "GET", f"/jobs/{running_id}/savepoints/{trigger}", session)
            answer = json.loads(body)
            return answer["operation"] if status == 200 and answer["status"]["id"] == "COMPLETED" else None

        location = wait_for(stopped, what="the stop's savepoint")["location"]
        assert location.startswith(f"file://{tmp_path}/sp/savepoint-{running_id[:6]}-")
        assert running.wait(timeout=120) == 0
        assert wait_for(stopped, what="the stop's result from the archive")["location"] == location
        jobs = wait_for(lambda: (j := jobs_now())["running-job"]["state"] == "FINISHED" and j, what="the stopped job FINISHED")
        assert jobs["ended-job"]["state"] == "FINISHED"
        status, _, body = ask(port, "GET", f"/jobs/{running_id}/checkpoints", session)
        assert any(h["external_path"] == location and h["checkpoint_type"] == "SYNC_SAVEPOINT" for h in json.loads(body)["history"])

        ui.send_signal(signal.SIGINT)
        assert ui.wait(timeout=30) == 0
        assert "stopped" in ui.stdout.read()
    finally:
        for p in (running, ui):
            if p.poll() is None:
                p.kill()
                p.wait(timeout=30)
