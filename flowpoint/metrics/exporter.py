"""The Prometheus endpoint: one HTTP server per driver process, on when a job sets
``metrics.reporter.prom.port``.

``submit()`` calls :func:`attach_job` for every job. A job that sets the port starts the
process's server (``prometheus_client``'s WSGI app on a ``wsgiref`` server in a daemon thread,
bound to ``metrics.reporter.prom.host``, 127.0.0.1 by default, on the first free port of the
setting, as Flink's reporter) or joins the one already running; the server's registry is a
registry of its own holding one :class:`~flowpoint.metrics.prometheus.JobsCollector`, which
reads the jobs' metric stores when scraped.

A job that ended stays on the endpoint for :data:`FINISHED_JOB_RETENTION_S` so that a scraper
sees its final values (Prometheus scrapes every 15 to 60 s); then it is removed, and the last
job removed stops the server. The process's exit stops it too (a daemon thread).

There is no token: scrapers send none. On loopback a request must name the endpoint in its
``Host`` header (``127.0.0.1:PORT`` or ``localhost:PORT``), so a web page cannot read it
through a DNS name it controls; bound to another address, whoever reaches the port reads the
metrics (a warning says so when the server starts).
"""

from __future__ import annotations

import ipaddress
import logging
import socket
import sys
import threading
import time
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from flowpoint.api.config import port_range
from flowpoint.errors import ConfigurationError
from flowpoint.metrics.prometheus import JobsCollector, MonitoredJob

log = logging.getLogger("flowpoint")

PORT_KEY = "metrics.reporter.prom.port"
HOST_KEY = "metrics.reporter.prom.host"
FLINK_CLASS_KEYS = ("metrics.reporter.prom.factory.class", "metrics.reporter.prom.class")
FINISHED_JOB_RETENTION_S = 60.0


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("Prometheus endpoint: " + format, *args)


class _Threading(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    block_on_close = False
    request_queue_size = 128  # as the REST server's: a scrape burst queues, not SYN retransmits


def is_loopback(host: str) -> bool:
    if host.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip().strip("[]")).is_loopback
    except ValueError:
        return False


class PrometheusServer:
    """The process's endpoint: a server bound to ``host`` on the first free port of ``ports``."""

    def __init__(self, host: str, ports: list[int], setting: str):
        self.host = host
        self.collector = JobsCollector()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(self.collector)
        metrics_app = make_wsgi_app(self.registry)
        loopback = is_loopback(host)

        def app(environ: dict, start_response: Any) -> Any:
            if loopback and not _own_host(environ.get("HTTP_HOST"), self.port):
                start_response("403 Forbidden", [("Content-Type", "text/plain; charset=utf-8")])
                return [f"refused: the Host header names another address than this endpoint's ({host}:{self.port})\n".encode()]
            return metrics_app(environ, start_response)

        family, address = _family(host)
        server_class = type("PrometheusHTTPServer", (_Threading,), {"address_family": family})
        last: OSError | None = None
        for port in ports:
            try:
                self.httpd = make_server(address, port, app, server_class=server_class, handler_class=_Quiet)
                break
            except OSError as e:
                last = e
        else:
            msg = (f"the Prometheus endpoint cannot listen on {host} port {setting} ({PORT_KEY}): {last}; "
                   f"set {PORT_KEY} to a free port, a range such as 9250-9260, or 0 for any free port")
            raise ConfigurationError(msg)
        self.port = self.httpd.server_address[1]
        self.pending = 0  # jobs given this server by open_endpoint and not yet served or released
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="flowpoint-prometheus", daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def serves(self, host: str, ports: list[int]) -> bool:
        return host == self.host and (ports == [0] or self.port in ports)

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _family(host: str) -> tuple[int, str]:
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as e:
        msg = f"{HOST_KEY} {host!r} is not an address of this host: {e}"
        raise ConfigurationError(msg) from None
    family, _, _, _, sockaddr = infos[0]
    return family, sockaddr[0]


def _own_host(header: str | None, port: int) -> bool:
    own = {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}
    return header is not None and header.strip().lower() in own


# -- the process's server ----------------------------------------------------------------------

_lock = threading.Lock()
_server: PrometheusServer | None = None


def current_server() -> PrometheusServer | None:
    return _server


def _say(config: Any, line: str) -> None:
    if int(config.get("execution.progress.interval")) >= 0:
        print(f"[flowpoint] {line}", file=sys.stderr, flush=True)


def open_endpoint(config: Any, job_name: str) -> PrometheusServer | None:
    """The process's endpoint for a job whose configuration sets ``metrics.reporter.prom.port``
    (started if none runs), held for the job until :func:`serve_job` or :func:`release`; None
    when the job does not set the port. Raises ConfigurationError when no port of the setting
    is free. ``submit()`` calls it before anything of the job starts."""
    global _server
    setting = config.get(PORT_KEY)
    if setting is None:
        flink = next((k for k in FLINK_CLASS_KEYS if config.get(k)), None)
        if flink is not None:
            log.warning("%s is Flink's reporter class; flowpoint serves metrics to Prometheus when %s is set "
                        "(Flink's reporter defaults to 9249): no endpoint for job %r", flink, PORT_KEY, job_name)
        return None
    host = str(config.get(HOST_KEY)).strip()
    ports = port_range(setting)
    with _lock:
        server = _server
        if server is None:
            server = PrometheusServer(host, ports, str(setting))
            _server = server
            _say(config, f"Prometheus metrics: {server.url}")
            if not is_loopback(host):
                log.warning("the Prometheus endpoint listens on %s: anyone who can reach port %d reads the metrics of this "
                            "process's jobs (names, operators, counts); there is no token", host, server.port)
        elif not server.serves(host, ports):
            log.warning("job %r asks for the Prometheus endpoint on %s port %s; it shares this process's endpoint %s",
                        job_name, host, setting, server.url)
        server.pending += 1
    return server


def serve_job(server: PrometheusServer, client: Any, job_name: str) -> None:
    """Put the job on the endpoint :func:`open_endpoint` gave it, until it ended
    :data:`FINISHED_JOB_RETENTION_S` ago."""
    job = MonitoredJob(client, client.get_job_id(), job_name)
    with _lock:
        server.pending -= 1
        server.collector.add(job)
    threading.Thread(target=_watch, args=(server, job), name=f"flowpoint-prometheus-{job.job_id[:8]}", daemon=True).start()


def release(server: PrometheusServer) -> None:
    """The job's submission failed after :func:`open_endpoint`: it will not be served."""
    with _lock:
        server.pending -= 1
        _close_if_unused(server)


def _watch(server: PrometheusServer, job: MonitoredJob) -> None:
    job.client.wait_until_done()
    job.ended_ms = time.time() * 1000
    threading.Event().wait(FINISHED_JOB_RETENTION_S)
    with _lock:
        server.collector.remove(job.job_id)
        _close_if_unused(server)


def _close_if_unused(server: PrometheusServer) -> None:
    """Under ``_lock``: the server serves no job and none is about to join: stop it (a job
    submitted afterwards starts a new one)."""
    global _server
    if server.pending or server.collector.jobs():
        return
    server.close()
    if _server is server:
        _server = None
