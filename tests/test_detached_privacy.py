"""Issue 25, item 1: ``flowpoint run -d`` must not hand the control token to other local users,
whatever the umask; and a local user dropping connections must not fill the job's output
(item 7).

The attack of the issue: with umask 022, ``-d`` created ``~/.flowpoint`` and ``logs/`` 0755 and
the log 0644, and the log held the dashboard URL with the token; a second user read it, took a
savepoint of the victim's job into a directory of its choosing and cancelled the job. Here the
job runs as ``flowpoint run -d`` in a subprocess with the umask set, below a directory the second
OS user can enter (as a home directory is, 0755), and that user tries to read the log and find
the token anywhere below it.
"""

from __future__ import annotations

import logging
import os
import pwd
import re
import socket
import stat
import struct
import subprocess
import sys
import tempfile
import textwrap
import threading
import time
from pathlib import Path

import pytest

from flowpoint.clock import now_ms
from flowpoint.control import auth, commands
from flowpoint.control.endpoint import ControlServer
from flowpoint.driver.registry import JobEntry, JobRegistry, pid_alive
from flowpoint.errors import InsecurePathError

REPO = Path(__file__).resolve().parent.parent

JOB = textwrap.dedent(
    """
    from flowpoint import DataGeneratorSource, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment({"execution.epoch.interval": 50})
    env.set_parallelism(1)
    source = DataGeneratorSource(lambda i: i % 7, count=1_000_000, rate_limit_per_second=50)
    env.from_source(source, source_name="numbers").uid("numbers").key_by(lambda x: x).reduce(lambda a, b: a + b).uid("sums")
    env.execute("private job")
    """
)

# run as the other user: what it can read of the log, and every readable file below the base
# directory that holds the token (it has no Python of its own to run: /root is closed)
PROBE = r"""
cat "$1" >/dev/null 2>&1 && echo "LOG READABLE"
ls "$2" >/dev/null 2>&1 && echo "LOGS LISTABLE"
ls "$3" >/dev/null 2>&1 && echo "HOME LISTABLE"
grep -rlsF -- "$4" "$5" && echo "TOKEN FOUND"
echo probed
"""


def _new_base() -> Path:
    """A directory the other user can enter (a home directory is 0755): tmp_path is below
    directories only root can enter, where nothing would be readable by anyone else anyway."""
    d = tempfile.mkdtemp(prefix="flowpoint-issue25-", dir="/tmp")
    os.chmod(d, 0o755)
    return Path(d)


def _remove_base(d: Path) -> None:
    # a cancelled job's process writes its entry's end and its archive as it exits: wait for it
    for entry in d.glob(".flowpoint/jobs/*.json"):
        job = JobRegistry(entry.parent)._load(entry.stem)
        if job is None:
            continue
        if job.end_time_ms is None and pid_alive(job.pid):  # its test did not get to cancel it
            _cli(d, "cancel", entry.stem, timeout=120)
        pid = job.pid
        deadline = time.monotonic() + 60
        while pid_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
    subprocess.run(["rm", "-rf", str(d)], check=False)


UMASKS = {"umask-022": 0o022, "umask-002": 0o002, "umask-000": 0o000}


@pytest.fixture(scope="module")
def detached(request):
    """``{name: (base, job id, log) or the exception starting it raised}``: a detached job under
    each umask and one more for the dropped connections (those this session's tests use), each
    with a home of its own, all started at once (one after another they took a minute: each
    starts a Spark of its own). Each test cancels its job; the rest are cancelled at the end."""
    runs = {**UMASKS, "drops": 0o022}
    used = set()
    for item in request.session.items:
        if item.module is request.module and "detached" in item.fixturenames:
            params = getattr(getattr(item, "callspec", None), "params", {})
            used.add(params.get("name", "drops"))
    bases = {name: _new_base() for name in runs if name in used}
    out: dict = {}

    def start(name: str) -> None:
        try:
            out[name] = (bases[name], *_start_detached(bases[name], runs[name]))
        except BaseException as e:  # reported by the test that uses it
            out[name] = e

    threads = [threading.Thread(target=start, args=(name,)) for name in bases]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    yield out
    for base in bases.values():
        _remove_base(base)


def _started(detached: dict, name: str) -> tuple[Path, str, Path]:
    run = detached[name]
    if isinstance(run, BaseException):
        raise run
    return run


def _env(base: Path) -> dict[str, str]:
    env = dict(os.environ, HOME=str(base), FLOWPOINT_HOME=str(base / ".flowpoint"), PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = os.pathsep.join([str(REPO), *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    return env


def _cli(base: Path, *args: str, umask: int = 0o022, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flowpoint.cli", *args], capture_output=True, text=True, timeout=timeout, env=_env(base),
        cwd=base, preexec_fn=lambda: os.umask(umask),
    )


def _start_detached(base: Path, umask: int) -> tuple[str, Path]:
    (base / "job.py").write_text(JOB)
    r = _cli(base, "run", "-d", "-m", "local[1]", "job.py", umask=umask)
    assert r.returncode == 0, r.stdout + r.stderr
    job_id = re.search(r"JobID ([0-9a-f]{32})", r.stdout).group(1)
    log = Path(re.search(r"Its output goes to (\S+);", r.stdout).group(1))
    return job_id, log


def _wait(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.slow
@pytest.mark.parametrize("name", list(UMASKS))
def test_run_detached_keeps_its_log_and_the_token_from_other_users_under_any_umask(detached, name, other_uid):
    umask = UMASKS[name]
    base, job_id, log = _started(detached, name)
    try:
        home = base / ".flowpoint"
        assert log.parent == home / "logs"
        # what flowpoint created is its owner's only, whatever the umask
        assert (_mode(home), _mode(home / "logs"), _mode(log)) == (0o700, 0o700, 0o600)
        assert _mode(home / "control-token") == 0o600 and _mode(home / "jobs") == 0o700
        for entry in (home / "jobs").glob("*.json"):
            assert _mode(entry) == 0o600, entry
        token = auth._read(home / "control-token")
        text = _wait(lambda: (t := log.read_text()) and "[flowpoint] dashboard:" in t and t, 60, "the dashboard line")
        # the log shows the dashboard's address without the token
        line = re.search(r"^\[flowpoint\] dashboard: (\S+)", text, re.M).group(1)
        assert re.fullmatch(rf"http://127\.0\.0\.1:\d+/#/jobs/{job_id}", line), line
        assert token not in text and "token=" not in text

        # the second OS user cannot read the log, list the directories, or find the token
        gid = pwd.getpwuid(other_uid).pw_gid if other_uid != 65534 else 65534
        probe = subprocess.run(
            ["/bin/sh", "-c", PROBE, "probe", str(log), str(log.parent), str(home), token, str(base)],
            capture_output=True, text=True, timeout=60, user=other_uid, group=gid, extra_groups=[], cwd="/",
        )
        assert probe.stdout.strip() == "probed", probe.stdout + probe.stderr

        # the owner gets the signed-in link from `flowpoint list`, and it signs a browser in
        listed = _cli(base, "list", umask=umask)
        assert listed.returncode == 0, listed.stderr
        link = re.search(rf"^\s+{job_id}\s+(http://127\.0\.0\.1:(\d+)/\?token=(\S+)#/jobs/{job_id})$", listed.stdout, re.M)
        assert link and link.group(3) == token, listed.stdout
        conn = socket.create_connection(("127.0.0.1", int(link.group(2))), timeout=10)
        conn.sendall(f"GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{link.group(2)}\r\nConnection: close\r\n\r\n".encode())
        answer = conn.makefile("rb").read().decode("latin-1")
        conn.close()
        assert answer.startswith("HTTP/1.0 303") and f"flowpoint-session-{link.group(2)}=" in answer, answer[:500]
    finally:
        r = _cli(base, "cancel", job_id, umask=umask, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def _drop_connections(port: int, n: int) -> None:
    """``n`` connections that leave without waiting for the answer, reset (RST) as they go: half
    a request (a slowloris that gives up), a whole request whose answer meets a reset socket, a
    sign-in whose redirect does."""
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        host = f"Host: 127.0.0.1:{port}\r\n".encode()
        if i % 3 == 0:
            s.sendall(b"GET /jobs HTTP/1.1\r\n" + host)
        elif i % 3 == 1:
            s.sendall(b"GET /index.html HTTP/1.1\r\n" + host + b"\r\n")
        else:
            s.sendall(b"GET /?token=" + b"x" * 43 + b" HTTP/1.1\r\n" + host + b"\r\n")
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()


@pytest.mark.slow
def test_three_hundred_dropped_connections_leave_the_jobs_output_readable(detached):
    """Before the fix each dropped connection printed socketserver's traceback into the job's
    stderr (8,229 lines for these 300)."""
    base, job_id, log = _started(detached, "drops")
    try:
        text = _wait(lambda: (t := log.read_text()) and "[flowpoint] dashboard:" in t and t, 60, "the dashboard line")
        port = int(re.search(r"dashboard: http://127\.0\.0\.1:(\d+)/", text).group(1))
        before = len(log.read_text().splitlines())
        _drop_connections(port, 300)
        time.sleep(2)  # the server's threads finish with the connections
        after = log.read_text().splitlines()
        new = [line for line in after[before:] if not line.startswith("[flowpoint] segment ")]  # the job's progress
        assert len(new) < 10, "\n".join(new[:60])
        assert not any("Traceback" in line for line in after), "\n".join(after[:60])
    finally:
        _cli(base, "cancel", job_id, timeout=120)


# -- without Spark -------------------------------------------------------------------------------


@pytest.fixture
def fp_home(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


def test_directories_under_flowpoint_home_are_created_0700_whatever_the_umask(fp_home):
    from flowpoint.control.detached import log_path, open_log

    old = os.umask(0)
    try:
        log = log_path()
        os.close(open_log(log))
        auth.load_or_create_token()
    finally:
        os.umask(old)
    assert (_mode(fp_home), _mode(log.parent), _mode(log)) == (0o700, 0o700, 0o600)


@pytest.mark.parametrize("which", ["home", "logs"])
def test_a_flowpoint_home_or_log_directory_open_to_others_is_refused_naming_it_and_the_fix(fp_home, which):
    from flowpoint.control.detached import log_path

    fp_home.mkdir(mode=0o700)
    target = fp_home if which == "home" else fp_home / "logs"
    target.mkdir(mode=0o700, exist_ok=True)
    target.chmod(0o755)  # made by someone else (an older -d, a mkdir under umask 022)
    with pytest.raises(InsecurePathError, match=rf"{target} is open to other users \(mode 0755\).*Run `chmod 700 {target}`"):
        log_path()
    assert _mode(target) == 0o755  # refused, not tightened behind the user's back
    if which == "home":
        with pytest.raises(InsecurePathError, match=rf"chmod 700 {fp_home}"):
            auth.load_or_create_token()  # a job refuses it before writing the token
        with pytest.raises(InsecurePathError, match=rf"chmod 700 {fp_home}"):
            auth.read_token()  # and the CLI before reading it


def test_list_prints_the_signed_in_link_of_running_jobs_only(fp_home, capsys):
    token = auth.load_or_create_token()
    registry = JobRegistry()
    running, ended = "a" * 32, "b" * 32
    registry.write(JobEntry(running, "runs", "RUNNING", now_ms(), os.getpid(), socket.gethostname(), "127.0.0.1:41234"))
    registry.write(JobEntry(ended, "ended", "FINISHED", now_ms(), os.getpid(), socket.gethostname(), "127.0.0.1:41235", end_time_ms=now_ms()))
    assert commands.list_command(True, registry) == 0
    out = capsys.readouterr().out
    assert f"  {running}  http://127.0.0.1:41234/?token={token}#/jobs/{running}" in out.splitlines()
    assert "41235" not in out


def test_the_request_log_never_holds_the_token(fp_home, caplog):
    token = auth.load_or_create_token()
    server = ControlServer(0, token)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with caplog.at_level(logging.DEBUG, logger="flowpoint"):
            s = socket.create_connection(("127.0.0.1", server.port), timeout=10)
            s.sendall(f"GET /?token={token} HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\nConnection: close\r\n\r\n".encode())
            assert s.makefile("rb").read().startswith(b"HTTP/1.0 303")
            s.close()
            _wait(lambda: any("GET /?token=" in r.getMessage() for r in caplog.records), 10, "the request's log line")
    finally:
        server.shutdown()
        server.server_close()
    logged = "\n".join(r.getMessage() for r in caplog.records)
    assert "token=<redacted>" in logged and token not in logged


def test_a_dropped_connection_is_one_debug_line_not_a_traceback(fp_home, caplog, capfd):
    server = ControlServer(0, auth.load_or_create_token())
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        with caplog.at_level(logging.DEBUG, logger="flowpoint"):
            _drop_connections(server.port, 30)
            _wait(lambda: sum("went away" in r.getMessage() for r in caplog.records) >= 5, 10, "the dropped connections' lines")
            time.sleep(0.5)
    finally:
        server.shutdown()
        server.server_close()
    err = capfd.readouterr().err
    assert "Traceback" not in err and "Exception occurred" not in err, err[:3000]
    went = [r for r in caplog.records if "went away" in r.getMessage()]
    assert all(r.levelno == logging.DEBUG and r.exc_info is None for r in went)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], [r.getMessage() for r in caplog.records]

