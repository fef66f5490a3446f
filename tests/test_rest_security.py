"""Issue 19: who may use the dashboard and the REST API, asked of both servers that answer it (a
job's control endpoint and ``flowpoint ui``), raw, as a browser or any local process can: no
token, another Host, a foreign Origin, the token in the URL once (then a session cookie), the
dashboard's files and paths that try to leave their directory. No Spark: the servers answer
without jobs (the endpoint) or from a registry entry (the ui)."""

from __future__ import annotations

import http.client
import json
import re
import socket
import threading

import pytest

from flowpoint.cli import main as cli_main
from flowpoint.clock import now_ms
from flowpoint.control import auth, ui
from flowpoint.control.endpoint import ControlServer
from flowpoint.driver.registry import JobEntry, JobRegistry
from flowpoint.errors import ConfigurationError

ENDED = "e" * 32


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    return tmp_path / "home"


@pytest.fixture
def web(tmp_path):
    d = tmp_path / "web"
    d.mkdir()
    (d / "index.html").write_text("<!doctype html><title>flowpoint</title>")
    (d / "app.js").write_text("console.log('dashboard')")
    (d / ".hidden").write_text("HIDDEN-CONTENT")
    (tmp_path / "secret.txt").write_text("SECRET-CONTENT")
    (d / "link.js").symlink_to(tmp_path / "secret.txt")
    (d / "sub").mkdir()
    (d / "sub" / "app.js").write_text("NESTED-CONTENT")
    return d


def serve(server, web):
    server.web_dir = web
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture(params=["endpoint", "ui"])
def server(request, home, web):
    token = auth.load_or_create_token()
    if request.param == "endpoint":
        srv = ControlServer(0, token)
    else:
        registry = JobRegistry()
        registry.write(JobEntry(ENDED, "ended job", "FINISHED", now_ms() - 5000, 1, socket.gethostname(), None, end_time_ms=now_ms()))
        srv = ui.start(0, registry=registry)
    serve(srv, web)
    yield srv
    srv.shutdown()
    srv.server_close()


def ask(server, method, path, headers=None, body=None, host=None):
    conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=30)
    try:
        conn.putrequest(method, path, skip_host=True, skip_accept_encoding=True)
        conn.putheader("Host", host or f"127.0.0.1:{server.port}")
        for k, v in (headers or {}).items():
            conn.putheader(k, v)
        if body is not None:
            conn.putheader("Content-Length", str(len(body)))
        conn.endheaders(body)
        r = conn.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        conn.close()


def login(server) -> str:
    """The session cookie a browser gets for the printed URL."""
    status, headers, _ = ask(server, "GET", f"/?token={server.token}")
    assert status == 303, status
    return headers["Set-Cookie"].split(";", 1)[0]


def job_path(server) -> str:
    return f"/jobs/{ENDED if isinstance(server, ui.UiServer) else '0' * 32}"


def test_no_token_is_refused_on_every_route_the_page_included(server):
    for path in ("/", "/web/app.js", "/config", "/overview", "/jobs", "/jobs/overview", job_path(server), f"{job_path(server)}/checkpoints"):
        status, headers, body = ask(server, "GET", path)
        assert status == 401, path
        assert headers["WWW-Authenticate"].startswith("Bearer") and b"<title>" not in body and b"console.log" not in body
        assert "?token=" in json.loads(body)["errors"][0]
    status, _, _ = ask(server, "GET", "/config", {"Authorization": "Bearer " + "x" * 43})
    assert status == 401
    status, _, _ = ask(server, "GET", "/config", {"Cookie": f"flowpoint-session-{server.port}={server.token}"})
    assert status == 401  # the cookie holds a session, never the token


def test_another_host_or_a_foreign_origin_is_refused_even_with_the_token(server):
    owner = {"Authorization": f"Bearer {server.token}"}
    assert ask(server, "GET", "/config", owner)[0] == 200
    for host in (f"rebind.example:{server.port}", "127.0.0.1", f"localhost:{server.port + 1}"):
        assert ask(server, "GET", "/config", owner, host=host)[0] == 403, host
        status, headers, _ = ask(server, "GET", f"/?token={server.token}", host=host)
        assert status == 403 and "Set-Cookie" not in headers  # no session through another name
    assert ask(server, "GET", "/config", {**owner, "Origin": "http://evil.example"})[0] == 403
    assert ask(server, "GET", "/config", {**owner, "Origin": f"http://127.0.0.1:{server.port}"})[0] == 200


def test_the_token_in_the_url_starts_a_session_and_leaves_the_url(server):
    status, headers, _ = ask(server, "GET", f"/?token=wrong{server.token}")
    assert status == 401 and "Set-Cookie" not in headers
    status, headers, _ = ask(server, "GET", f"/?x=1&token={server.token}")
    assert status == 303 and headers["Location"] == "/?x=1"
    cookie = headers["Set-Cookie"]
    name, value = cookie.split(";", 1)[0].split("=", 1)
    assert name == f"flowpoint-session-{server.port}" and value and server.token not in cookie
    attributes = {a.strip() for a in cookie.split(";")[1:]}
    assert {"HttpOnly", "SameSite=Strict", "Path=/"} <= attributes
    status, headers, _ = ask(server, "GET", f"/jobs/overview?token={server.token}")
    assert status == 303 and headers["Location"] == "/jobs/overview"


def test_a_session_cookie_works_for_gets(server, web):
    cookie = login(server)
    status, headers, body = ask(server, "GET", "/", {"Cookie": cookie})
    assert status == 200 and body == (web / "index.html").read_bytes() and headers["Content-Type"].startswith("text/html")
    assert headers["X-Frame-Options"] == "DENY" and headers["Cache-Control"] == "no-store"
    status, _, body = ask(server, "GET", "/config", {"Cookie": cookie})
    assert status == 200 and "flowpoint-version" in json.loads(body)
    status, _, body = ask(server, "GET", job_path(server), {"Cookie": cookie})
    if isinstance(server, ui.UiServer):  # an ended job known from its registry entry
        assert status == 200 and json.loads(body)["state"] == "FINISHED"
    else:
        assert status == 404
    other = cookie.replace(f"flowpoint-session-{server.port}=", f"flowpoint-session-{server.port + 1}=")
    assert ask(server, "GET", "/config", {"Cookie": other})[0] == 401  # another server's session


def test_a_change_through_the_session_needs_the_pages_own_origin(server):
    cookie = login(server)
    body = b"{}"
    own = f"http://127.0.0.1:{server.port}"
    path = f"{job_path(server)}/stop"
    json_type = {"Content-Type": "application/json"}
    assert ask(server, "POST", path, {"Cookie": cookie, **json_type, "Origin": "http://evil.example"}, body)[0] == 403
    assert ask(server, "POST", path, {"Cookie": cookie, **json_type, "Origin": "null"}, body)[0] == 403
    status, _, answer = ask(server, "POST", path, {"Cookie": cookie, **json_type}, body)
    assert status == 403 and b"Origin" in answer  # a browser always sends one; a session without it is not a page's
    assert ask(server, "POST", path, {"Cookie": cookie, "Content-Type": "text/plain", "Origin": own}, body)[0] == 415
    assert ask(server, "PATCH", f"{job_path(server)}?mode=cancel", {"Content-Type": "application/json", "Origin": own}, body)[0] == 401
    status, _, answer = ask(server, "POST", path, {"Cookie": cookie, **json_type, "Origin": own}, body)
    # past the checks: the endpoint has no such job, the ui's job has ended
    assert status == (409 if isinstance(server, ui.UiServer) else 404), answer


@pytest.mark.parametrize("path", [
    "/web/../secret.txt", "/web/%2e%2e/secret.txt", "/web/..%2fsecret.txt", "/web/%2Fetc%2Fpasswd", "/web//etc/passwd",
    "/web/.hidden", "/web/link.js", "/web/sub/app.js", "/web/sub", "/web/", "/web/app.js/", "/web/app.js%00.html",
    "/../secret.txt", "/web/missing.js",
])
def test_paths_outside_the_dashboards_files_are_not_served(server, path):
    cookie = login(server)
    status, _, body = ask(server, "GET", path, {"Cookie": cookie})
    assert status == 404 and not any(c in body for c in (b"SECRET-CONTENT", b"NESTED-CONTENT", b"HIDDEN-CONTENT", b"console.log"))


def test_the_dashboards_files_with_their_types(server, web):
    owner = {"Authorization": f"Bearer {server.token}"}
    status, headers, body = ask(server, "GET", "/web/app.js", owner)
    assert status == 200 and body == b"console.log('dashboard')" and headers["Content-Type"].startswith("text/javascript")
    assert headers["X-Content-Type-Options"] == "nosniff"
    status, headers, _ = ask(server, "GET", "/web/index.html", owner)
    assert status == 200 and headers["Content-Type"] == "text/html; charset=utf-8"


def test_flowpoint_ui_binds_to_loopback_unless_told_and_names_a_taken_port(home, capsys):
    with pytest.raises(ConfigurationError, match=r"--bind 0\.0\.0\.0 would let other machines .* add --allow-remote"):
        ui.start(0, bind="0.0.0.0")
    with pytest.raises(ConfigurationError, match="IPv4 address"):
        ui.start(0, bind="example.com")
    taken = ui.start(0)
    try:
        with pytest.raises(ConfigurationError, match=rf"cannot listen on 127\.0\.0\.1:{taken.port}: .*choose another port with --port"):
            ui.start(taken.port)
        assert cli_main(["ui", "--port", str(taken.port)]) == 1
        err = capsys.readouterr().err
        assert f"cannot listen on 127.0.0.1:{taken.port}" in err and "--port" in err
    finally:
        taken.server_close()


def test_a_remote_ui_takes_any_host_but_only_its_own_origin(home, web):
    srv = serve(ui.start(0, bind="0.0.0.0", allow_remote=True), web)
    try:
        assert srv.allow_remote
        owner = {"Authorization": f"Bearer {srv.token}"}
        assert ask(srv, "GET", "/config", host="dash.example:1234")[0] == 401  # the token still
        assert ask(srv, "GET", "/config", owner, host="dash.example:1234")[0] == 200
        assert ask(srv, "GET", "/config", {**owner, "Origin": "http://dash.example:1234"}, host="dash.example:1234")[0] == 200
        assert ask(srv, "GET", "/config", {**owner, "Origin": "http://evil.example"}, host="dash.example:1234")[0] == 403
    finally:
        srv.shutdown()
        srv.server_close()


def test_flowpoint_ui_warns_when_other_machines_can_reach_it(home):
    import os
    import signal
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = dict(os.environ, FLOWPOINT_HOME=str(home))
    refused = subprocess.run([sys.executable, "-m", "flowpoint.cli", "ui", "--bind", "0.0.0.0", "--port", str(port)],
                             capture_output=True, text=True, timeout=60, env=env)
    assert refused.returncode == 1 and "add --allow-remote" in refused.stderr
    proc = subprocess.Popen([sys.executable, "-m", "flowpoint.cli", "ui", "--bind", "0.0.0.0", "--allow-remote", "--port", str(port)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        assert re.fullmatch(rf"flowpoint ui: http://\S+:{port}/\?token=\S+\n", line), line
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 0
        warning = proc.stderr.read()
        assert "WARNING: listening on 0.0.0.0" in warning and "unencrypted" in warning
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)


def test_flowpoint_ui_shows_a_job_whose_process_died_as_lost_from_its_registry_entry(home, web):
    import subprocess
    import sys

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait(timeout=30)
    registry = JobRegistry()
    lost = "d" * 32
    registry.write(JobEntry(lost, "killed job", "RUNNING", now_ms() - 9000, dead.pid, socket.gethostname(), "127.0.0.1:9",
                            last_checkpoint_id=4, last_checkpoint_time_ms=now_ms() - 1000, last_checkpoint_path="file:///ck/chk-4"))
    srv = serve(ui.start(0, registry=registry), web)
    try:
        owner = {"Authorization": f"Bearer {srv.token}"}
        [job] = json.loads(ask(srv, "GET", "/jobs/overview", owner)[2])["jobs"]
        assert job["jid"] == lost and job["state"] == "LOST" and job["flowpoint"]["last-checkpoint"]["id"] == 4
        assert json.loads(ask(srv, "GET", "/overview", owner)[2])["flowpoint"]["jobs-lost"] == 1
        status, _, body = ask(srv, "GET", f"/jobs/{lost}", owner)
        assert status == 200 and json.loads(body)["state"] == "LOST" and json.loads(body)["vertices"] == []
        status, _, body = ask(srv, "GET", f"/jobs/{lost}/checkpoints", owner)
        assert status == 404 and "without writing an archive" in json.loads(body)["errors"][0]
        status, _, _ = ask(srv, "POST", f"/jobs/{lost}/stop", {**owner, "Content-Type": "application/json"}, b"{}")
        assert status == 409
        assert ask(srv, "GET", "/jobs/" + "0" * 32, owner)[0] == 404
        assert ask(srv, "GET", "/jobs/..%2f..%2fetc", owner)[0] == 404
    finally:
        srv.shutdown()
        srv.server_close()
