"""``flowpoint ui``: one dashboard and REST API for every job of the local job registry, running
and ended, on http://127.0.0.1:8081 (Flink's port) by default.

The server reads the registry on each request. A running job's routes are passed on to its own
control endpoint (:mod:`flowpoint.control.relay`, with the installation's token, as the CLI
does); an ended job's are answered from the archive its process wrote when it ended
(:mod:`flowpoint.control.archive`), or, without one (a job whose process was killed: LOST),
from its registry entry. ``/overview``, ``/jobs`` and ``/jobs/overview`` gather them all.

It binds to loopback unless told otherwise: another address needs ``--allow-remote`` as well,
and a warning is printed (the dashboard is plain HTTP: the token travels unencrypted).
"""

from __future__ import annotations

import ipaddress
import os
import sys
from http import HTTPStatus
from typing import Any

from flowpoint.clock import now_ms
from flowpoint.control import auth
from flowpoint.control.archive import JOB_ID, archive_path, read_archive
from flowpoint.control.relay import EndpointGone, get_json, relay
from flowpoint.control.rest import jobs
from flowpoint.control.rest_server import ApiError, RawJson, Request, RestServer
from flowpoint.driver.registry import JobEntry, JobRegistry
from flowpoint.errors import ConfigurationError

DEFAULT_PORT = 8081  # Flink's REST and web UI port
LOOPBACK = "127.0.0.1"
OVERVIEW_TIMEOUT_S = 3.0  # a job's endpoint that does not answer /jobs/overview by then is left out


def _running(e: JobEntry) -> bool:
    return not e.ended and not e.is_stale() and bool(e.endpoint)


def registry_overview(e: JobEntry) -> dict:
    """A ``/jobs/overview`` entry from a registry entry alone (no endpoint, no archive)."""
    end = e.end_time_ms
    return {
        "jid": e.job_id, "name": e.job_name, "start-time": e.start_time_ms, "end-time": end if end is not None else -1,
        "duration": max(0, (end or now_ms()) - e.start_time_ms), "state": e.shown_status(),
        "last-modification": e.updated_ms, "tasks": {"total": 0, **{k.lower(): 0 for k in jobs.EXECUTION_STATES}, "pending": 0},
        "flowpoint": {
            "runtime": None, "records-in": None, "records-out": None, "restarts": None, "pid": e.pid,
            "last-checkpoint": {"id": e.last_checkpoint_id, "time": e.last_checkpoint_time_ms, "path": e.last_checkpoint_path}
            if e.last_checkpoint_id is not None else None,
        },
    }


def registry_details(e: JobEntry) -> dict:
    """``/jobs/:jid`` of a job known from its registry entry alone."""
    o = registry_overview(e)
    return {
        "jid": e.job_id, "name": e.job_name, "isStoppable": False, "state": o["state"], "start-time": e.start_time_ms,
        "end-time": o["end-time"], "duration": o["duration"], "maxParallelism": 0, "now": now_ms(),
        "timestamps": {s: 0 for s in jobs.JOB_STATES}, "vertices": [], "status-counts": dict.fromkeys(jobs.EXECUTION_STATES, 0),
        "plan": {"jid": e.job_id, "name": e.job_name, "type": "STREAMING", "nodes": []},
        "flowpoint": {
            "runtime": None, "epoch": None, "records-read": None, "restarts": None, "spark-ui": None,
            "current-watermark": None, "pid": e.pid, "operators": [],
            "note": "the job's process ended without writing its archive: only its registry entry is known",
        },
    }


class UiServer(RestServer):
    def __init__(self, bind: str, port: int, token: str, registry: JobRegistry, allow_remote: bool = False):
        super().__init__(bind, port, token, allow_remote=allow_remote)
        self.registry = registry
        self._archives: dict[str, tuple[tuple[int, int], dict | None]] = {}  # job id -> (mtime, size), archive

    def archive(self, job_id: str) -> dict | None:
        """A job's archive, read again only when its file changed (the overview reads them all)."""
        try:
            st = os.stat(archive_path(self.registry, job_id))
        except (OSError, ValueError):
            return None
        key = (st.st_mtime_ns, st.st_size)
        cached = self._archives.get(job_id)
        if cached is not None and cached[0] == key:
            return cached[1]
        data = read_archive(self.registry, job_id)
        self._archives[job_id] = (key, data)
        return data

    def answer(self, request: Request) -> tuple[int, Any]:
        parts = request.parts
        if request.method == "GET" and parts == ["config"]:
            return HTTPStatus.OK, {**jobs.dashboard_config(), "features": {**jobs.dashboard_config()["features"], "web-history": True}}
        if request.method == "GET" and parts in (["overview"], ["jobs"], ["jobs", "overview"]):
            entries = self.overview_entries()
            if parts == ["overview"]:
                return HTTPStatus.OK, jobs.cluster_overview(entries)
            if parts == ["jobs"]:
                return HTTPStatus.OK, {"jobs": [{"id": e["jid"], "status": e["state"]} for e in entries]}
            return HTTPStatus.OK, {"jobs": entries}
        if len(parts) >= 2 and parts[0] == "jobs" and parts[1] != "overview":
            return self.job_request(parts[1], request)
        msg = f"no route {request.method} {request.path}; routes: GET /config, /overview, /jobs, /jobs/overview, and /jobs/:jid/... (docs/rest.md)"
        raise ApiError(HTTPStatus.NOT_FOUND, msg)

    # -- every job --------------------------------------------------------------------------

    def overview_entries(self) -> list[dict]:
        entries = self.registry.entries()
        live: dict[str, dict] = {}
        for endpoint in {e.endpoint for e in entries if _running(e)}:
            try:
                answer = get_json(endpoint, self.token, "/jobs/overview", OVERVIEW_TIMEOUT_S)
            except EndpointGone:
                continue
            for item in answer.get("jobs", []) if isinstance(answer, dict) else []:
                if isinstance(item, dict) and "jid" in item:
                    live[item["jid"]] = item
        out = []
        for e in entries:
            if e.job_id in live and _running(e):
                out.append(live[e.job_id])
                continue
            archive = self.archive(e.job_id) if e.ended or e.is_stale() else None
            out.append(archive["overview"] if archive else registry_overview(e))
        return sorted(out, key=lambda o: o.get("start-time", 0), reverse=True)

    # -- one job ----------------------------------------------------------------------------

    def _entry(self, job_id: str) -> JobEntry:
        entry = self.registry.read(job_id) if JOB_ID.match(job_id) else None
        if entry is None:
            msg = f"no job {job_id} in the job registry {self.registry.dir}; GET /jobs/overview lists the jobs"
            raise ApiError(HTTPStatus.NOT_FOUND, msg)
        return entry

    def job_request(self, job_id: str, request: Request) -> tuple[int, Any]:
        entry = self._entry(job_id)
        if _running(entry):
            try:
                status, data = relay(str(entry.endpoint), self.token, request)
                return status, RawJson(data)
            except EndpointGone:
                entry = self._entry(job_id)  # ended meanwhile: its archive, if its process wrote one
                if entry.is_stale():
                    self.registry.mark_lost(entry)
        return self.ended_job_request(entry, request)

    def ended_job_request(self, entry: JobEntry, request: Request) -> tuple[int, Any]:
        if request.method != "GET":
            msg = f"job {entry.job_id} ({entry.job_name!r}) has ended ({entry.shown_status()}): nothing to {request.method}"
            raise ApiError(HTTPStatus.CONFLICT, msg)
        archive = self.archive(entry.job_id)
        if archive is not None:
            answer = archive.get("routes", {}).get(request.path.rstrip("/"))
            if answer is not None:
                return HTTPStatus.OK, answer
        elif request.parts[2:] == []:
            return HTTPStatus.OK, registry_details(entry)
        what = "its archive" if archive is not None else "its registry entry (the job ended without writing an archive)"
        msg = f"job {entry.job_id} has ended ({entry.shown_status()}); {what} has no {request.path}"
        raise ApiError(HTTPStatus.NOT_FOUND, msg)


def _check_bind(bind: str, allow_remote: bool) -> None:
    try:
        address = ipaddress.ip_address(bind)
    except ValueError:
        msg = f"--bind takes an IPv4 address such as 127.0.0.1 or 0.0.0.0; got {bind!r}"
        raise ConfigurationError(msg) from None
    if address.version != 4:
        msg = f"--bind takes an IPv4 address such as 127.0.0.1 or 0.0.0.0; got {bind!r}"
        raise ConfigurationError(msg)
    if not address.is_loopback and not allow_remote:
        msg = (
            f"--bind {bind} would let other machines reach the dashboard, which can cancel your jobs and take "
            "savepoints; add --allow-remote if that is what you want"
        )
        raise ConfigurationError(msg)


def start(port: int = DEFAULT_PORT, bind: str = LOOPBACK, allow_remote: bool = False, registry: JobRegistry | None = None) -> UiServer:
    """A ``flowpoint ui`` server listening (not yet serving)."""
    _check_bind(bind, allow_remote)
    registry = registry or JobRegistry()
    registry.check()
    token = auth.load_or_create_token()
    try:
        return UiServer(bind, port, token, registry, allow_remote=allow_remote and not ipaddress.ip_address(bind).is_loopback)
    except OSError as e:
        why = " (port 8081 is Flink's default: is another flowpoint ui or a Flink cluster running?)" if port == DEFAULT_PORT else ""
        msg = f"cannot listen on {bind}:{port}: {e.strerror or e}{why}; choose another port with --port"
        raise ConfigurationError(msg) from None


def ui_command(port: int = DEFAULT_PORT, bind: str = LOOPBACK, allow_remote: bool = False) -> int:
    """``flowpoint ui``: serve until Ctrl-C."""
    server = start(port, bind, allow_remote)
    shown = bind if bind != "0.0.0.0" else _hostname()
    try:  # a Ctrl-C right after the address is printed stops it as cleanly as a later one
        if server.allow_remote:
            print(
                f"flowpoint ui: WARNING: listening on {bind}:{server.port} for other machines. Anyone who reaches it with the "
                "token controls your jobs, and plain HTTP carries the token unencrypted: use it on trusted networks only",
                file=sys.stderr, flush=True,
            )
        print(f"flowpoint ui: http://{shown}:{server.port}/?token={server.token}", flush=True)
        print(f"Serving the jobs of {server.registry.dir}; press Ctrl-C to stop.", flush=True)
        server.serve_forever(poll_interval=0.5)
    except KeyboardInterrupt:
        print("flowpoint ui: stopped.", flush=True)
    finally:
        server.server_close()
    return 0


def _hostname() -> str:
    import socket

    return socket.gethostname()
