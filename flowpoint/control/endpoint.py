"""The control endpoint: a small JSON-over-HTTP server on loopback, one per job process, that
answers Flink's REST API for the process's jobs (:mod:`flowpoint.control.live_api`,
``docs/rest.md``) and serves the dashboard (``flowpoint/control/web/``).

``submit()`` calls :func:`attach_job` for every job: the first job of a process starts the
server (stdlib ``http.server`` in a daemon thread, bound to 127.0.0.1 on ``control.port``, by
default any free port), later jobs share it, and it stops when the last of them ends. Each job
also gets a registry entry (:mod:`flowpoint.driver.registry`) naming the endpoint's address,
and a watcher thread (:mod:`flowpoint.control.job_control`) that rewrites the entry when the
job's status changes or a checkpoint completes (polled every second), and when the job ends
writes its archive and marks the entry terminal. Unless ``execution.progress.interval`` is
negative, the job's dashboard URL (without the token: output may go to a log) and Spark's UI URL
are printed when it starts; in a Jupyter notebook the job's display shows them instead, the
dashboard's as a signed-in link (:mod:`flowpoint.control.notebook`).

Every request is checked first (:mod:`flowpoint.control.rest_server`): 403 when its ``Host`` is
not the endpoint's own address or it carries a foreign ``Origin``, 401 without the
installation's token (``Authorization: Bearer <token>``) or a dashboard session, 415 when a body
(or any non-GET request) is not ``Content-Type: application/json``.

Errors are JSON ``{"errors": [message]}`` with an HTTP status: 400 bad request, 401/403/415
refused (above), 404 no such job or route, 405 a method a route does not take, 409 the job has
ended, 413 a body over 1 MiB, 500 the operation failed (the message says why).
"""

from __future__ import annotations

import atexit
import logging
import os
import sys
import threading
import time
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from flowpoint.clock import now_ms
from flowpoint.control import auth
from flowpoint.control.archive import write_archive
from flowpoint.control.job_control import JobControl
from flowpoint.control.live_api import LiveApi
from flowpoint.control.rest_server import ApiError, Request, RestServer
from flowpoint.driver.registry import LOST, JobRegistry, registry_dir
from flowpoint.errors import ConfigurationError, InsecurePathError

if TYPE_CHECKING:
    from flowpoint.driver.job import JobClient

log = logging.getLogger("flowpoint")

HOST = "127.0.0.1"  # loopback only, never 0.0.0.0
EXIT_GRACE_S = 30.0  # at interpreter exit, how long requests in flight may still take


class ControlServer(RestServer):
    def __init__(self, port: int, token: str):
        super().__init__(HOST, port, token)
        self._jobs: dict[str, JobControl] = {}
        self._lock = threading.Lock()
        self.api = LiveApi(self.jobs, self.job)
        self.thread = threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.2}, name="flowpoint-control", daemon=True)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    def answer(self, request: Request) -> tuple[int, Any]:
        return self.api.answer(request)

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


def attach_job(client: JobClient, config: Any, print_urls: bool = True) -> JobControl:
    """Serve ``client``'s job on this process's control endpoint (started if needed) and enter
    it in the job registry; both are kept until the job ends. ``print_urls``: print the
    dashboard's and Spark UI's addresses on stderr (a notebook's display shows them instead)."""
    global _server, _exit_hook
    with _lock:
        if _server is None:
            _server = _start_server(config.get("control.port"))
        server = _server
        job = JobControl(client, JobRegistry(registry_dir(config)), server.address, config, archive=write_archive)
        with server._lock:
            server._jobs[job.entry.job_id] = job
        _attached[job.entry.job_id] = job
        if not _exit_hook:
            atexit.register(_at_exit)
            _exit_hook = True
    job.write()
    job.thread = threading.Thread(target=job.watch, args=(_detach,), name=f"flowpoint-control-{job.entry.job_id[:8]}", daemon=True)
    job.thread.start()
    address, token, job_id = server.address, server.token, client.job_id
    client._attach_dashboard(lambda signed_in: dashboard_url(address, token if signed_in else None, job_id))
    if print_urls:
        _print_urls(job, server, config)
    return job


def dashboard_url(address: str, token: str | None, job_id: str | None = None) -> str:
    """The dashboard's URL; with ``token``, the signed-in link that starts a browser session
    (once), for the owner's own terminal only (``flowpoint list``): never for a log."""
    query = f"?token={token}" if token else ""
    return f"http://{address}/{query}" + (f"#/jobs/{job_id}" if job_id else "")


def _print_urls(job: JobControl, server: ControlServer, config: Any) -> None:
    """The job's dashboard and Spark UI addresses, on stderr: output that may go to a log file
    (``flowpoint run -d``, a redirect), so without the token; ``flowpoint list`` prints the
    signed-in link to the owner."""
    interval = config.get("execution.progress.interval") if config is not None else 0
    if interval is not None and int(interval) < 0:
        return
    url = dashboard_url(server.address, None, job.job_id)
    print(f"[flowpoint] dashboard: {url} (sign in with the link `flowpoint list` prints)", file=sys.stderr, flush=True)
    if job.spark_ui:
        print(f"[flowpoint] Spark UI: {job.spark_ui}", file=sys.stderr, flush=True)


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
    """The interpreter is exiting: let answers in flight go out, let the watchers of ended jobs
    write their archives and entries and answer about a stop's savepoint (a client polls for
    it after the job ended), and mark entries of jobs that are still running LOST."""
    _wait_idle(EXIT_GRACE_S)
    with _lock:
        jobs = list(_attached.values())
    deadline = time.monotonic() + EXIT_GRACE_S
    for job in jobs:
        if job.client.get_job_status().value == "CANCELLING":
            job.client.wait_until_done(5.0)  # e.g. Ctrl-C: execute() cancelled the job and re-raised
        if job.client.is_done():
            if job.thread is not None:
                job.thread.join(max(0.0, deadline - time.monotonic()))
            if job.entry.end_time_ms is None:  # the watcher did not get there in time
                job.refresh()
                job.entry.end_time_ms = now_ms()
                job.write()
        else:
            job.entry.status = LOST
            job.entry.end_time_ms = now_ms()
            job.write()
    _wait_idle(EXIT_GRACE_S)
