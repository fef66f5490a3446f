"""The control endpoint: a small JSON-over-HTTP server on loopback, one per job process.

``submit()`` calls :func:`attach_job` for every job: the first job of a process starts the
server (stdlib ``http.server`` in a daemon thread, bound to 127.0.0.1 on ``control.port``, by
default any free port), later jobs share it, and it stops when the last of them ends. Each job
also gets a registry entry (:mod:`flowpoint.control.registry`) naming the endpoint's address,
and a watcher thread that rewrites the entry when the job's status changes or a checkpoint
completes (polled every second) and marks it terminal when the job ends.

Routes (the names of Flink's REST API, which the control-plane issue grows this into)::

    GET   /jobs                        {"jobs": [{"id", "name", "status", "start-time"}]}
    GET   /jobs/<id>                   status, times, last checkpoint, watermark, metrics
    POST  /jobs/<id>/savepoints        {"target-directory": dir?}            -> {"location": path}
    POST  /jobs/<id>/stop              {"target-directory": dir?, "drain": b} -> {"location": path}
    PATCH /jobs/<id>   or  POST /jobs/<id>/cancel                            -> 202 {"status"}

Every request is checked first (:mod:`flowpoint.control.auth`): 403 when its ``Host`` is not
the endpoint's own address or it carries a foreign ``Origin``, 401 without the installation's
token (``Authorization: Bearer <token>``), 415 when a body (or any non-GET request) is not
``Content-Type: application/json``. A savepoint target must lie within ``state.savepoints.dir``
unless the request marks it ``"explicit": true`` (the CLI does, for a directory its user typed).

Errors are JSON ``{"errors": [message]}`` with an HTTP status: 400 bad request, 401/403/415
refused (above), 404 no such job or route, 409 the job has ended, 413 a body over 1 MiB, 500
the operation failed (the message says why).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import socket
import threading
import time
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any

from flowpoint.control import auth
from flowpoint.control.registry import LOST, JobEntry, JobRegistry, now_ms, registry_dir
from flowpoint.errors import ConfigurationError, FlowpointError, InsecurePathError

if TYPE_CHECKING:
    from flowpoint.runtime.job import JobClient

log = logging.getLogger("flowpoint")

HOST = "127.0.0.1"  # loopback only, never 0.0.0.0
POLL_S = 1.0  # how often a job's registry entry is refreshed
EXIT_GRACE_S = 30.0  # at interpreter exit, how long requests in flight may still take
MAX_BODY = 1 << 20  # request bodies are small JSON objects


class ApiError(FlowpointError):
    """An error answered to a client: an HTTP status and a message."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


# -- one job: its registry entry and watcher ---------------------------------------------------


class JobControl:
    """A job known to the endpoint: its client, its registry entry and the thread keeping the
    entry current."""

    def __init__(self, client: JobClient, registry: JobRegistry, endpoint: str, config: Any):
        self.client = client
        self.config = config  # the job's configuration
        self.registry = registry
        progress = client.progress()
        self.entry = JobEntry(
            job_id=client.get_job_id(),
            job_name=progress.job_name,
            status=client.get_job_status().value,
            start_time_ms=now_ms(),
            pid=os.getpid(),
            host=socket.gethostname(),
            endpoint=endpoint,
            fingerprint=progress.fingerprint,  # the job's identity for --resume
        )
        self.registered = False
        self._warned = False
        self.thread: threading.Thread | None = None

    def last_completed_checkpoint(self) -> Any:
        completed = [s for s in self.client.get_checkpoint_stats() if s.status == "COMPLETED"]
        return completed[-1] if completed else None

    def refresh(self) -> bool:
        """Bring the entry up to date; True when it changed."""
        e = self.entry
        status = self.client.get_job_status().value
        latest = self.last_completed_checkpoint()
        cp_id = latest.checkpoint_id if latest is not None else None
        resumed = self.client.progress().resumed_from  # (job id, checkpoint id) it restored
        if resumed is not None and e.resumed_from is None:
            e.resumed_from, e.resumed_checkpoint_id = resumed
        elif status == e.status and cp_id == e.last_checkpoint_id:
            return False
        e.status = status
        if latest is not None:
            e.last_checkpoint_id = cp_id
            e.last_checkpoint_time_ms = int(latest.trigger_time_ms + latest.duration_ms)
            e.last_checkpoint_path = latest.path
        return True

    def write(self) -> None:
        try:
            self.registry.write(self.entry)
            self.registered = True
        except FlowpointError as err:
            if not self._warned:
                log.warning("%s; the flowpoint CLI will not see job %s", err, self.entry.job_id)
                self._warned = True
            self.registered = False

    def watch(self, on_end: Any) -> None:
        try:
            while not self.client.wait_until_done(POLL_S):
                if self.refresh():
                    self.write()
            self.refresh()
            self.entry.end_time_ms = now_ms()
            self.write()
            if self.registered:
                self.registry.prune()
        except Exception:  # noqa: BLE001 - the job goes on without its entry
            log.exception("job registry entry of job %s could not be kept up to date", self.entry.job_id)
        finally:
            on_end(self)

    # -- what routes answer ----------------------------------------------------------------

    def overview(self) -> dict:
        return {
            "id": self.entry.job_id,
            "name": self.entry.job_name,
            "status": self.client.get_job_status().value,
            "start-time": self.entry.start_time_ms,
        }

    def details(self) -> dict:
        c = self.client.progress()
        status = self.client.get_job_status()
        end = self.entry.end_time_ms if status.is_globally_terminal_state() else None
        stats = self.client.get_checkpoint_stats()
        latest = self.last_completed_checkpoint()
        counts = {s: sum(1 for x in stats if x.status == s) for s in ("COMPLETED", "FAILED", "IN_PROGRESS")}
        return {
            "jid": self.entry.job_id,
            "name": self.entry.job_name,
            "state": status.value,
            "start-time": self.entry.start_time_ms,
            "end-time": end,
            "duration": (end or now_ms()) - self.entry.start_time_ms,
            "now": now_ms(),
            "pid": self.entry.pid,
            "epochs": c.epoch,
            "records-read": c.records_read,
            "restarts": c.restarts,
            "watermark": self.client.get_current_watermark(),
            "metrics": self.client.get_metrics(),
            "checkpoints": {
                "counts": {k.lower().replace("_", "-"): v for k, v in counts.items()},
                "latest": None
                if latest is None
                else {
                    "id": latest.checkpoint_id,
                    "completion-time": int(latest.trigger_time_ms + latest.duration_ms),
                    "path": latest.path,
                    "state-size": latest.state_size,
                },
            },
        }

    def require_running(self, action: str) -> None:
        status = self.client.get_job_status()
        if status.is_globally_terminal_state() or self.client.is_done():
            msg = f"cannot {action} job {self.entry.job_id} ({self.entry.job_name!r}): it has ended ({status.value})"
            raise ApiError(HTTPStatus.CONFLICT, msg)


# -- the HTTP server ---------------------------------------------------------------------------


def _body(handler: BaseHTTPRequestHandler) -> dict:
    try:
        length = int(handler.headers.get("Content-Length") or 0)
    except ValueError:
        msg = "the Content-Length header is not a number"
        raise ApiError(HTTPStatus.BAD_REQUEST, msg) from None
    if length > MAX_BODY:
        msg = f"the request body has {length} bytes; at most {MAX_BODY} are read"
        raise ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, msg)
    if length <= 0:
        return {}
    raw = handler.rfile.read(length)
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as e:
        msg = f"the request body is not JSON: {e}"
        raise ApiError(HTTPStatus.BAD_REQUEST, msg) from None
    if not isinstance(data, dict):
        msg = f"the request body must be a JSON object; got {type(data).__name__}"
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    return data


def _target_directory(body: dict, config: Any) -> str | None:
    """The body's savepoint target, checked (see flowpoint/control/auth.py); None: the job's
    ``state.savepoints.dir``."""
    target = body.get("target-directory", body.get("targetDirectory"))
    if target is not None and (not isinstance(target, str) or not target.strip()):
        msg = f'"target-directory" must be a directory path or URI; got {target!r}'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    explicit = body.get("explicit", False)
    if not isinstance(explicit, bool):
        msg = f'"explicit" must be true or false; got {explicit!r}'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    try:
        return auth.check_target(target, explicit, config)
    except auth.TargetRefused as e:
        raise ApiError(HTTPStatus.FORBIDDEN if e.forbidden else HTTPStatus.BAD_REQUEST, str(e)) from None


class _Handler(BaseHTTPRequestHandler):
    server: ControlServer
    server_version = "flowpoint"
    timeout = 60  # a client that connects and sends nothing does not hold a thread forever

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("control endpoint: " + format, *args)

    def do_GET(self) -> None:
        self._serve("GET")

    def do_POST(self) -> None:
        self._serve("POST")

    def do_PATCH(self) -> None:
        self._serve("PATCH")

    def do_DELETE(self) -> None:
        self._serve("DELETE")

    def _serve(self, method: str) -> None:
        self.server.begin_request()
        try:
            try:
                self._authorize(method)
                status, payload = self._route(method)
            except ApiError as e:
                status, payload = e.status, {"errors": [str(e)]}
            except FlowpointError as e:
                status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"errors": [str(e)]}
            except Exception as e:  # noqa: BLE001 - answered, and logged for the job's owner
                log.exception("control endpoint: %s %s failed", method, self.path)
                status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"errors": [f"{type(e).__name__}: {e}"]}
            data = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            if status == HTTPStatus.UNAUTHORIZED:
                self.send_header("WWW-Authenticate", 'Bearer realm="flowpoint"')
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        finally:
            self.server.end_request()

    def _authorize(self, method: str) -> None:
        """Refuse, before anything else, a request that is not the owner's own (module doc)."""
        port = self.server.server_address[1]
        host = self.headers.get("Host")
        if not auth.host_allowed(host, port):
            msg = (
                f"refused: the Host header {host!r} is not this endpoint's address (127.0.0.1:{port} or localhost:{port}); "
                "requests through other names are refused (DNS rebinding)"
            )
            raise ApiError(HTTPStatus.FORBIDDEN, msg)
        origin = self.headers.get("Origin")
        if not auth.origin_allowed(origin, port):
            msg = f"refused: a request from the web page origin {origin!r}"
            raise ApiError(HTTPStatus.FORBIDDEN, msg)
        if not auth.token_matches(self.headers.get("Authorization"), self.server.token):
            msg = (
                "refused: no valid control token (Authorization: Bearer <token>). Use the flowpoint CLI as the job's "
                f"user: it sends the token from {auth.TOKEN_FILE} in {auth.HOME_VARIABLE} (~/.flowpoint)"
            )
            raise ApiError(HTTPStatus.UNAUTHORIZED, msg)
        has_body = bool(self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get("Transfer-Encoding"))
        if (method != "GET" or has_body) and not auth.is_json(self.headers.get("Content-Type")):
            msg = f"refused: {method} {self.path} takes Content-Type: application/json; got {self.headers.get('Content-Type')!r}"
            raise ApiError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, msg)

    def _route(self, method: str) -> tuple[HTTPStatus, dict]:
        parts = [p for p in self.path.split("?", 1)[0].split("/") if p]
        if parts == ["jobs"]:
            if method != "GET":
                raise self._not_allowed(method)
            return HTTPStatus.OK, {"jobs": [j.overview() for j in self.server.jobs()]}
        if len(parts) < 2 or parts[0] != "jobs" or len(parts) > 3:
            msg = f"no route {method} {self.path}; routes: GET /jobs, GET /jobs/<id>, POST /jobs/<id>/savepoints, POST /jobs/<id>/stop, PATCH /jobs/<id>, POST /jobs/<id>/cancel"
            raise ApiError(HTTPStatus.NOT_FOUND, msg)
        job = self.server.job(parts[1])
        action = parts[2] if len(parts) == 3 else None
        if action is None and method == "GET":
            return HTTPStatus.OK, job.details()
        if (action is None and method == "PATCH") or (action == "cancel" and method == "POST"):
            job.require_running("cancel")
            job.client.cancel()
            return HTTPStatus.ACCEPTED, {"status": job.client.get_job_status().value}
        if action == "savepoints" and method == "POST":
            body = _body(self)
            target = _target_directory(body, job.config)
            job.require_running("take a savepoint of")
            return HTTPStatus.OK, {"location": job.client.trigger_savepoint(target)}
        if action == "stop" and method == "POST":
            body = _body(self)
            drain = body.get("drain", False)
            if not isinstance(drain, bool):
                msg = f'"drain" must be true or false; got {drain!r}'
                raise ApiError(HTTPStatus.BAD_REQUEST, msg)
            target = _target_directory(body, job.config)
            job.require_running("stop")
            return HTTPStatus.OK, {"location": job.client.stop_with_savepoint(target, drain=drain)}
        if action in (None, "savepoints", "stop", "cancel"):
            raise self._not_allowed(method)
        msg = f"no route {method} {self.path}"
        raise ApiError(HTTPStatus.NOT_FOUND, msg)

    def _not_allowed(self, method: str) -> ApiError:
        return ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{method} is not allowed on {self.path}")


class ControlServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, port: int, token: str):
        super().__init__((HOST, port), _Handler)
        self.token = token
        self._jobs: dict[str, JobControl] = {}
        self._lock = threading.Lock()
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, name="flowpoint-control", daemon=True)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.server_address[1]}"

    def jobs(self) -> list[JobControl]:
        with self._lock:
            return sorted(self._jobs.values(), key=lambda j: j.entry.start_time_ms)

    def job(self, job_id: str) -> JobControl:
        with self._lock:
            job = self._jobs.get(job_id)
        if job is None:
            msg = f"no job {job_id} in this process (pid {os.getpid()}); it may have ended: run `flowpoint list --all`"
            raise ApiError(HTTPStatus.NOT_FOUND, msg)
        return job

    def begin_request(self) -> None:
        with _requests:
            _in_flight[0] += 1

    def end_request(self) -> None:
        with _requests:
            _in_flight[0] -= 1
            _requests.notify_all()


# -- the process's server ----------------------------------------------------------------------

_lock = threading.Lock()
_server: ControlServer | None = None
_exit_hook = False
_attached: dict[str, JobControl] = {}  # every job attached and not yet ended
_requests = threading.Condition()
_in_flight = [0]  # requests being answered, by any server of this process


def _wait_idle(timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    with _requests:
        while _in_flight[0]:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            _requests.wait(left)
    return True


def _parse_port(value: Any) -> list[int]:
    """``control.port``: 0 (any free port), a port, or a range ``50100-50200``."""
    text = str(value).strip()
    try:
        if "-" in text:
            low, high = (int(x) for x in text.split("-", 1))
            ports = list(range(low, high + 1))
        else:
            ports = [int(text)]
    except ValueError:
        ports = []
    if not ports or any(p < 0 or p > 65535 for p in ports):
        msg = f"control.port must be 0 (any free port), a port or a range such as 50100-50200; got {value!r}"
        raise ConfigurationError(msg)
    return ports


def _server_token() -> str:
    """The installation's control token (created on first use). A token file others own or can
    read fails the submission (InsecurePathError); one that cannot be created leaves the
    endpoint with a token no one has: the job runs, the CLI cannot reach it."""
    try:
        return auth.load_or_create_token()
    except InsecurePathError:
        raise
    except OSError as e:
        log.warning(
            "cannot create the control token %s (%s); the flowpoint CLI will not be able to control this process's jobs. "
            "Set %s to a directory you can write", auth.token_path(), e, auth.HOME_VARIABLE,
        )
        import secrets

        return secrets.token_urlsafe(32)


def _start_server(port_setting: Any) -> ControlServer:
    ports = _parse_port(port_setting if port_setting is not None else 0)
    token = _server_token()
    last: OSError | None = None
    for port in ports:
        try:
            server = ControlServer(port, token)
        except OSError as e:
            last = e
            continue
        server.thread.start()
        return server
    msg = (
        f"the control endpoint cannot listen on {HOST}:{port_setting} (control.port): {last}; "
        "set control.port to a free port, a range such as 50100-50200, or 0 for any free port"
    )
    raise ConfigurationError(msg)


def attach_job(client: JobClient, config: Any) -> JobControl:
    """Serve ``client``'s job on this process's control endpoint (started if needed) and enter
    it in the job registry; both are kept until the job ends."""
    global _server, _exit_hook
    with _lock:
        if _server is None:
            _server = _start_server(config.get("control.port"))
        server = _server
        job = JobControl(client, JobRegistry(registry_dir(config)), server.address, config)
        with server._lock:
            server._jobs[job.entry.job_id] = job
        _attached[job.entry.job_id] = job
        if not _exit_hook:
            atexit.register(_at_exit)
            _exit_hook = True
    job.write()
    job.thread = threading.Thread(target=job.watch, args=(_detach,), name=f"flowpoint-control-{job.entry.job_id[:8]}", daemon=True)
    job.thread.start()
    return job


def _detach(job: JobControl) -> None:
    """The job ended: forget it; the last job of the process stops the server."""
    global _server
    with _lock:
        _attached.pop(job.entry.job_id, None)
        server = _server
        if server is None:
            return
        with server._lock:
            server._jobs.pop(job.entry.job_id, None)
            last = not server._jobs
        if not last:
            return
        # under the lock: a job submitted meanwhile starts a new server once this one is closed
        server.shutdown()  # stops accepting; requests in flight finish in their threads
        server.server_close()
        _server = None


def current_server() -> ControlServer | None:
    return _server


def _at_exit() -> None:
    """The interpreter is exiting: let answers in flight go out (a stop request returns after
    its job ended), and mark entries of jobs that are still running LOST."""
    _wait_idle(EXIT_GRACE_S)
    with _lock:
        jobs = list(_attached.values())
    for job in jobs:
        if job.client.get_job_status().value == "CANCELLING":
            job.client.wait_until_done(5.0)  # e.g. Ctrl-C: execute() cancelled the job and re-raised
        if job.client.is_done():
            job.refresh()
            job.entry.end_time_ms = job.entry.end_time_ms or now_ms()
        else:
            job.entry.status = LOST
            job.entry.end_time_ms = now_ms()
        job.write()
