"""Issue 10, cases 6 and 11: who can control a running job, and what listens where.

Case 6: the control endpoint answers only requests carrying the installation's token (a 0600 file
under FLOWPOINT_HOME, which the CLI sends), addressed to its own Host, without a foreign Origin,
with JSON bodies; savepoint targets stay within state.savepoints.dir unless the owner names one
on the CLI. The hostile requests go to a real job's endpoint, raw, and must change nothing.

Case 11: Spark's web UI listens on loopback; a cluster driver keeps the address executors reach.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from untrusted import mode

from flowpoint.control import auth
from flowpoint.control.client import owner_target
from flowpoint.driver.registry import JobRegistry
from flowpoint.errors import ConfigurationError, FlowpointError, InsecurePathError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HERE = os.path.dirname(os.path.abspath(__file__))



def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    msg = f"timed out waiting for {what}"
    raise AssertionError(msg)


# -- the token -------------------------------------------------------------------------------------


@pytest.fixture
def fp_home(tmp_path, monkeypatch):
    home = tmp_path / "fphome"
    monkeypatch.setenv("FLOWPOINT_HOME", str(home))
    return home


def test_token_is_created_once_0600_whatever_the_umask(fp_home):
    with pytest.raises(auth.TokenMissingError, match=rf"no control token {fp_home / 'control-token'}.*FLOWPOINT_HOME"):
        auth.read_token()
    old = os.umask(0)
    try:
        seen: list[str] = []
        threads = [threading.Thread(target=lambda: seen.append(auth.load_or_create_token())) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        os.umask(old)
    assert len(set(seen)) == 1 and len(seen[0]) >= 32  # concurrent first jobs agree on one token
    assert mode(fp_home / "control-token") == 0o600 and mode(fp_home) == 0o700
    assert auth.read_token() == seen[0] == auth.load_or_create_token()
    assert sorted(os.listdir(fp_home)) == ["control-token"]  # no temporary files left


@pytest.mark.parametrize("bits", [0o644, 0o640, 0o604, 0o620])
def test_a_token_others_can_read_or_write_is_refused(fp_home, bits, capsys):
    token = auth.load_or_create_token()
    path = fp_home / "control-token"
    path.chmod(bits)
    for call in (auth.read_token, auth.load_or_create_token):
        with pytest.raises(InsecurePathError, match=rf"control token {path} can be read or written by other users .*chmod 600") as e:
            call()
        assert isinstance(e.value, ConfigurationError)
    from flowpoint.cli import main as cli_main

    JobRegistry(fp_home / "jobs").write(_entry("ab" * 16))
    assert cli_main(["cancel", "abab"]) == 1
    assert f"chmod 600 {path}" in capsys.readouterr().err
    path.chmod(0o600)
    assert auth.read_token() == token


def _entry(job_id: str):
    from flowpoint.driver.registry import JobEntry

    return JobEntry(job_id, "j", "RUNNING", 1, os.getpid(), socket.gethostname(), "127.0.0.1:9")


def test_a_token_of_another_user_or_a_link_is_refused(fp_home, tmp_path):
    auth.load_or_create_token()
    path = fp_home / "control-token"
    if os.geteuid() == 0:
        os.chown(path, 65534, -1)
        with pytest.raises(InsecurePathError, match=rf"control token {path} belongs to uid 65534"):
            auth.read_token()
    path.unlink()
    (tmp_path / "elsewhere").write_text("x" * 40)
    (tmp_path / "elsewhere").chmod(0o600)
    path.symlink_to(tmp_path / "elsewhere")
    for call in (auth.read_token, auth.load_or_create_token):  # the CLI refuses it, a job does not serve with it
        with pytest.raises(InsecurePathError, match=rf"control token {path} is a symbolic link"):
            call()


def test_token_comparison():
    t = "s3cr3t-" * 6
    assert auth.token_matches(f"Bearer {t}", t) and auth.token_matches(f"bearer  {t} ", t)
    for header in (None, "", t, f"Basic {t}", f"Bearer {t[:-1]}", f"Bearer {t}x", "Bearer ", f"Bearer {t.upper()}"):
        assert not auth.token_matches(header, t), header


# -- savepoint targets -----------------------------------------------------------------------------


class _Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


@pytest.mark.parametrize(("target", "why"), [
    ("/data/sp/../etc", "'..' segments"),
    ("/data/sp/..", "'..' segments"),
    ("file:///data/sp/../../root", "'..' segments"),
    ("file:///data/sp/%2e%2e/x", "'..' segments"),
    ("s3://bucket/sp/../other", "'..' segments"),
    ("relative/dir", "not an absolute path or a URI"),
    ("file://otherhost/data", "not a local file:///absolute/path URI"),
    ("/data/sp\n/x", "control characters"),
])
def test_malformed_targets_are_refused_even_from_the_owner(target, why):
    for explicit in (True, False):
        with pytest.raises(auth.TargetRefused, match=why) as e:
            auth.check_target(target, explicit, _Conf({"state.savepoints.dir": "file:///data/sp"}))
        assert not e.value.forbidden


def test_targets_within_the_savepoint_dir_unless_the_owner_names_one(tmp_path):
    sp = tmp_path / "sp"
    conf = _Conf({"state.savepoints.dir": f"file://{sp}"})
    assert auth.check_target(None, False, conf) is None  # the job's own directory
    assert auth.check_target(str(sp / "a"), False, conf) == str(sp / "a")
    assert auth.check_target(f"file://{sp}/a/b", False, conf) == f"file://{sp}/a/b"
    assert auth.check_target(str(sp), False, conf) == str(sp)
    for outside in (str(tmp_path / "spx"), str(tmp_path), "/root/.ssh", "s3://bucket/sp", f"file://{tmp_path}/other"):
        with pytest.raises(auth.TargetRefused, match=r"not within the job's state\.savepoints\.dir") as e:
            auth.check_target(outside, False, conf)
        assert e.value.forbidden
        assert auth.check_target(outside, True, conf) is not None  # the owner's choice
    sp.mkdir()
    (sp / "escape").symlink_to(tmp_path / "elsewhere", target_is_directory=True)
    with pytest.raises(auth.TargetRefused, match="not within"):
        auth.check_target(str(sp / "escape" / "x"), False, conf)
    with pytest.raises(auth.TargetRefused, match=r"the job sets no state\.savepoints\.dir"):
        auth.check_target(str(sp / "a"), False, _Conf())
    s3 = _Conf({"state.savepoints.dir": "s3://bucket/savepoints"})
    assert auth.check_target("s3://bucket/savepoints/x", False, s3) == "s3://bucket/savepoints/x"
    for outside in ("s3://bucket/savepoints-x/y", "s3://other/savepoints/x", "/local/path"):
        with pytest.raises(auth.TargetRefused, match="not within"):
            auth.check_target(outside, False, s3)


def test_the_cli_makes_the_owners_target_absolute_and_explicit(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert owner_target(None) == {}
    assert owner_target("sp") == {"target-directory": str(tmp_path / "sp"), "explicit": True}
    assert owner_target("../sp") == {"target-directory": str(tmp_path.parent / "sp"), "explicit": True}
    assert owner_target("s3://b/sp") == {"target-directory": "s3://b/sp", "explicit": True}
    with pytest.raises(FlowpointError, match="'..' segments"):
        owner_target("s3://b/sp/../x")


# -- a real job's endpoint, asked by someone who is not its owner ----------------------------------

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


def raw(address: str, method: str, path: str, headers: dict | None = None, body: bytes | None = None) -> tuple[int, dict]:
    """One request as any local process (or a web page's browser) can send it: exactly these
    headers (http.client adds Host only when ``headers`` has none)."""
    host, port = address.rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=120)
    try:
        conn.request(method, path, body=body, headers=headers or {})
        r = conn.getresponse()
        data = r.read()
        return r.status, json.loads(data) if data else {}
    finally:
        conn.close()


def raw_socket(address: str, request: bytes) -> bytes:
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=60) as s:
        s.sendall(request)
        chunks = []
        while chunk := s.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def flowpoint_cli(home, *args, cwd=REPO) -> subprocess.CompletedProcess:
    env = dict(os.environ, FLOWPOINT_HOME=str(home))
    return subprocess.run([sys.executable, "-m", "flowpoint.cli", *args], capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


@pytest.mark.slow
def test_hostile_requests_to_a_running_job_are_refused_and_change_nothing(tmp_path):
    home, sp = tmp_path / "fphome", tmp_path / "savepoints"
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, FLOWPOINT_HOME=str(home))
    err = open(tmp_path / "job.err", "w")  # noqa: SIM115 - the job's stderr, read on failure
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[1]", "-D", "execution.progress.interval=-1",
         "-D", f"state.savepoints.dir={sp}", str(script), "guarded", f"file://{tmp_path}/ck"],
        stdout=subprocess.DEVNULL, stderr=err, env=env, cwd=str(tmp_path),
    )
    try:
        reg = JobRegistry(home / "jobs")

        def running():
            assert proc.poll() is None, (tmp_path / "job.err").read_text()[-3000:]
            return next((e for e in reg.entries() if e.job_name == "guarded" and e.status == "RUNNING"), None)

        entry = wait_for(running, 240, "the job RUNNING in the registry")
        job_id, address = entry.job_id, entry.endpoint
        port = int(address.rsplit(":", 1)[1])
        token_file = home / "control-token"
        assert mode(token_file) == 0o600
        token = token_file.read_text().strip()
        owner = {"Authorization": f"Bearer {token}"}
        owner_json = {**owner, "Content-Type": "application/json"}

        def alive() -> dict:
            assert proc.poll() is None
            status, d = raw(address, "GET", f"/jobs/{job_id}", owner)
            assert status == 200 and d["state"] == "RUNNING", d
            return d

        epochs_before = alive()["flowpoint"]["epoch"]
        wrong = "x" * len(token)
        elsewhere = [tmp_path / "outside", tmp_path / "escape", sp, tmp_path / "rel"]
        refusals = [
            # no token, a wrong one, another scheme: 401 on every route, GET /jobs included
            ("GET", "/jobs", {}, None, 401),
            ("GET", "/jobs", {"Authorization": f"Bearer {wrong}"}, None, 401),
            ("GET", f"/jobs/{job_id}", {"Authorization": f"Basic {token}"}, None, 401),
            ("PATCH", f"/jobs/{job_id}", {"Content-Type": "application/json"}, b"{}", 401),
            ("POST", f"/jobs/{job_id}/cancel", {"Content-Type": "application/json", "Authorization": f"Bearer {wrong}"}, b"{}", 401),
            ("POST", f"/jobs/{job_id}/savepoints", {"Content-Type": "application/json"},
             json.dumps({"target-directory": str(tmp_path / "outside"), "explicit": True}).encode(), 401),
            ("POST", f"/jobs/{job_id}/stop", {"Content-Type": "application/json"}, b"{}", 401),
            # the token, but through another name (DNS rebinding) or from a web page's origin
            ("GET", "/jobs", {**owner, "Host": f"rebind.example:{port}"}, None, 403),
            ("GET", "/jobs", {**owner, "Host": "127.0.0.1"}, None, 403),
            ("GET", "/jobs", {**owner, "Host": f"127.0.0.1:{port + 1}"}, None, 403),
            ("GET", f"/jobs/{job_id}", {**owner, "Origin": "http://evil.example"}, None, 403),
            ("GET", f"/jobs/{job_id}", {**owner, "Origin": "null"}, None, 403),
            ("POST", f"/jobs/{job_id}/cancel", {**owner_json, "Origin": f"http://rebind.example:{port}"}, b"{}", 403),
            # what a web page sends without a preflight: text/plain (or a form), foreign Origin and Host
            ("POST", f"/jobs/{job_id}/cancel",
             {"Content-Type": "text/plain", "Origin": "http://evil.example", "Host": f"evil.example:{port}"}, b"{}", 403),
            ("POST", f"/jobs/{job_id}/savepoints", {"Content-Type": "text/plain", "Origin": "http://evil.example"},
             json.dumps({"target-directory": str(tmp_path / "outside"), "explicit": True}).encode(), 403),
            ("POST", f"/jobs/{job_id}/cancel", {**owner, "Content-Type": "text/plain"}, b"{}", 415),
            ("POST", f"/jobs/{job_id}/cancel", {**owner, "Content-Type": "application/x-www-form-urlencoded"}, b"a=b", 415),
            ("PATCH", f"/jobs/{job_id}", owner, None, 415),
            ("POST", f"/jobs/{job_id}/savepoints", {**owner, "Content-Type": "text/plain"},
             json.dumps({"target-directory": str(sp / "x")}).encode(), 415),
            # savepoint targets: '..', outside state.savepoints.dir, relative
            ("POST", f"/jobs/{job_id}/savepoints", owner_json,
             json.dumps({"target-directory": f"{sp}/../escape"}).encode(), 400),
            ("POST", f"/jobs/{job_id}/savepoints", owner_json,
             json.dumps({"target-directory": f"{sp}/../escape", "explicit": True}).encode(), 400),
            ("POST", f"/jobs/{job_id}/savepoints", owner_json,
             json.dumps({"target-directory": f"file://{sp}/%2E%2E/escape"}).encode(), 400),
            ("POST", f"/jobs/{job_id}/savepoints", owner_json,
             json.dumps({"target-directory": str(tmp_path / "outside")}).encode(), 403),
            ("POST", f"/jobs/{job_id}/savepoints", owner_json,
             json.dumps({"target-directory": "s3://any-bucket/x"}).encode(), 403),
            ("POST", f"/jobs/{job_id}/savepoints", owner_json,
             json.dumps({"target-directory": "rel", "explicit": True}).encode(), 400),
            ("POST", f"/jobs/{job_id}/savepoints", owner_json,
             json.dumps({"target-directory": str(tmp_path / "outside"), "explicit": "yes"}).encode(), 400),
            ("POST", f"/jobs/{job_id}/stop", owner_json,
             json.dumps({"target-directory": str(tmp_path / "outside")}).encode(), 403),
        ]
        for method, path, headers, body, expected in refusals:
            status, answer = raw(address, method, path, headers, body)
            assert status == expected, (method, path, headers, body, status, answer)
            assert answer.get("errors") and "jobs" not in answer and "location" not in answer, answer
            alive()
        for d in elsewhere:
            assert not d.exists(), d
        assert not (tmp_path / "evil.example").exists()
        # no Host header at all (HTTP/1.0): refused
        reply = raw_socket(address, f"GET /jobs HTTP/1.0\r\nAuthorization: Bearer {token}\r\n\r\n".encode())
        assert reply.startswith(b"HTTP/1.0 403") and job_id.encode() not in reply

        # the owner, as curl would: 127.0.0.1 or localhost, the endpoint's own origin
        status, jobs = raw(address, "GET", "/jobs", owner)
        assert status == 200 and [j["id"] for j in jobs["jobs"]] == [job_id]
        assert raw(address, "GET", "/jobs", {**owner, "Host": f"localhost:{port}"})[0] == 200
        assert raw(address, "GET", "/jobs", {**owner, "Origin": f"http://127.0.0.1:{port}"})[0] == 200
        status, answer = raw(address, "POST", f"/jobs/{job_id}/savepoints", owner_json, json.dumps({"target-directory": str(sp / "nightly")}).encode())
        assert status == 202, answer

        def saved():
            s, a = raw(address, "GET", f"/jobs/{job_id}/savepoints/{answer['request-id']}", owner)
            return a["operation"] if s == 200 and a["status"]["id"] == "COMPLETED" else None

        assert wait_for(saved, 120, "the savepoint")["location"].startswith(f"file://{sp}/nightly/savepoint-")
        assert (sp / "nightly").is_dir() and not (tmp_path / "outside").exists()
        wait_for(lambda: alive()["flowpoint"]["epoch"] > epochs_before, 60, "the job to go on")

        # the CLI still works: it sends the token and marks the directory its user typed as the owner's
        r = flowpoint_cli(home, "savepoint", job_id, "outside", cwd=str(tmp_path))
        assert r.returncode == 0, r.stderr
        assert f"Path: file://{tmp_path}/outside/savepoint-{job_id[:6]}-" in r.stdout
        r = flowpoint_cli(home, "savepoint", job_id[:8])
        assert r.returncode == 0 and f"Path: file://{sp}/savepoint-" in r.stdout, r.stderr
        # a token others can read is refused by the CLI too; the job is untouched
        token_file.chmod(0o644)
        r = flowpoint_cli(home, "cancel", job_id)
        assert r.returncode == 1 and f"chmod 600 {token_file}" in r.stderr, r.stderr
        alive()
        token_file.chmod(0o600)
        r = flowpoint_cli(home, "cancel", job_id)
        assert r.returncode == 0 and f"Cancelled job {job_id}." in r.stdout, r.stderr
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
        err.close()


# -- case 11: Spark's web UI on loopback; a cluster driver reachable -------------------------------

PROBE = textwrap.dedent(
    """
    import json, os, socket, struct
    from flowpoint import CollectSink, StreamExecutionEnvironment

    def listening(pid):
        inodes = set()
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
        out = []
        for table, family in (("/proc/net/tcp", socket.AF_INET), ("/proc/net/tcp6", socket.AF_INET6)):
            with open(table) as f:
                for line in f.readlines()[1:]:
                    cols = line.split()
                    if cols[3] == "0A" and cols[9] in inodes:
                        addr, port = cols[1].split(":")
                        raw = bytes.fromhex(addr)
                        if family == socket.AF_INET:
                            host = socket.inet_ntop(family, struct.pack("<I", int(addr, 16)))
                        else:
                            host = socket.inet_ntop(family, struct.pack(">4I", *struct.unpack("<4I", raw)))
                        out.append([host, int(port, 16)])
        return out

    env = StreamExecutionEnvironment.get_execution_environment({"execution.progress.interval": -1})
    env.set_parallelism(2)
    sink = CollectSink()
    env.from_collection(list(range(40))).key_by(lambda x: x % 4).reduce(lambda a, b: a + b).uid("sums").sink_to(sink)
    env.execute("ui-probe")
    from pyspark.sql import SparkSession

    sc = SparkSession.getActiveSession().sparkContext
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        jvms = [int(p) for p in f.read().split() if "java" in open(f"/proc/{p}/cmdline").read()]
    print(json.dumps({
        "ui": sc.uiWebUrl, "driver_host": sc.getConf().get("spark.driver.host"), "driver_port": sc.getConf().get("spark.driver.port"),
        "listening": [a for p in jvms for a in listening(p)], "sums": sorted(sink.results)[-4:],
    }), flush=True)
    """
)

LOOPBACK = ("127.0.0.1", "::1", "::ffff:127.0.0.1")


def test_a_cluster_driver_keeps_the_address_spark_would_choose(tmp_path):
    """SPARK_LOCAL_IP=127.0.0.1 (for the UI) would also be Spark's default driver address: the one
    flowpoint sets instead is the one Spark picks without it."""
    code = textwrap.dedent(
        """
        from flowpoint.spark.session import spark_default_driver_host
        from pyspark import SparkContext
        mine = spark_default_driver_host({"spark.master": "local[1]"})
        print(mine, SparkContext._jvm.org.apache.spark.util.Utils.localCanonicalHostName())
        """
    )
    env = {k: v for k, v in os.environ.items() if k not in ("SPARK_LOCAL_IP", "SPARK_LOCAL_HOSTNAME")}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env, cwd=REPO)
    assert r.returncode == 0, r.stderr[-3000:]
    mine, spark = r.stdout.split()
    assert mine == spark


@pytest.mark.slow
def test_on_a_cluster_the_ui_listens_on_loopback_and_executors_reach_the_driver(standalone_cluster, tmp_path):
    script = tmp_path / "probe.py"
    script.write_text(PROBE)
    env = {k: v for k, v in os.environ.items() if k != "SPARK_LOCAL_IP"}
    env["FLOWPOINT_HOME"] = str(tmp_path / "fphome")
    r = subprocess.run(
        [sys.executable, "-m", "flowpoint.cli", "run", "-m", standalone_cluster.master_url, "-D", "spark.cores.max=2",
         "-D", f"state.working.dir={standalone_cluster.working_dir}", str(script)],
        capture_output=True, text=True, timeout=600, env=env, cwd=str(tmp_path),
    )
    assert r.returncode == 0, r.stderr[-4000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    assert out["sums"] == [180, 190, 200, 210]  # the last running sums: executors reached the driver
    ui_port = int(out["ui"].rsplit(":", 1)[1])
    listening = {(h, p) for h, p in out["listening"]}
    ui = {h for h, p in listening if p == ui_port}
    assert ui and ui <= set(LOOPBACK), listening  # the web UI: loopback only
    assert out["driver_host"] not in LOOPBACK  # executors on other hosts reach the driver there
    driver = {h for h, p in listening if p == int(out["driver_port"])}
    assert driver == {out["driver_host"]} or driver == {f"::ffff:{out['driver_host']}"}, listening
    wildcard = {(h, p) for h, p in listening if h in ("0.0.0.0", "::")}
    assert not wildcard, f"listening on every interface: {wildcard}"
    assert {h for h, _ in listening} <= {*LOOPBACK, out["driver_host"], f"::ffff:{out['driver_host']}"}, listening
