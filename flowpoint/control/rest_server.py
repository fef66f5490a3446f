"""The HTTP side that a job's control endpoint and ``flowpoint ui`` share: who may ask, the
dashboard's files, JSON in and out. What a route answers is the server's own
(:meth:`RestServer.answer`).

Every request is checked before anything else, in this order:

1. ``Host`` must name the server itself (``127.0.0.1:<port>`` or ``localhost:<port>``; a web
   page that rebinds a DNS name to 127.0.0.1 sends its own name): else 403. A server started
   with ``--allow-remote`` takes any Host, and the checks below then compare with it.
2. ``Origin``, when there is one, must be the server's own: else 403 (browsers send the page's
   origin with cross-site requests, and with every POST).
3. The installation's control token (:mod:`flowpoint.control.auth`), sent as
   ``Authorization: Bearer <token>`` (the CLI, scripts), or a session cookie of this server
   (:mod:`flowpoint.control.sessions`; the dashboard). A request that changes a job with the
   cookie must carry an ``Origin`` (any browser does): else 403. Neither: 401.
4. A body, and every request but GET, must be ``Content-Type: application/json`` (415), of at
   most 1 MiB (413).

``GET <any path>?token=<token>`` starts a browser session: the answer sets the session cookie
and redirects (303) to the same URL without the token. A wrong token is 401.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from os import PathLike
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from flowpoint.control import auth, static_files
from flowpoint.control.sessions import Sessions
from flowpoint.errors import FlowpointError

log = logging.getLogger("flowpoint")

MAX_BODY = 1 << 20  # request bodies are small JSON objects
SECURITY_HEADERS = (
    ("Cache-Control", "no-store"),
    ("X-Content-Type-Options", "nosniff"),
    ("X-Frame-Options", "DENY"),
    ("Content-Security-Policy", "frame-ancestors 'none'"),
    ("Referrer-Policy", "no-referrer"),
)


class ApiError(FlowpointError):
    """An error answered to a client: an HTTP status and a message."""

    def __init__(self, status: HTTPStatus, message: str):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Request:
    method: str
    path: str  # without the query
    query: dict[str, str]
    raw_query: str
    body: bytes
    content_type: str | None

    @property
    def parts(self) -> list[str]:
        return [p for p in self.path.split("/") if p]

    def json(self) -> dict:
        """The body as a JSON object ({} without a body); 400 when it is not one."""
        if not self.body:
            return {}
        try:
            data = json.loads(self.body.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as e:
            msg = f"the request body is not JSON: {e}"
            raise ApiError(HTTPStatus.BAD_REQUEST, msg) from None
        if not isinstance(data, dict):
            msg = f"the request body must be a JSON object; got {type(data).__name__}"
            raise ApiError(HTTPStatus.BAD_REQUEST, msg)
        return data


@dataclass(frozen=True)
class RawJson:
    """An answer passed on as it came (``flowpoint ui`` relaying a job's endpoint)."""

    data: bytes


#: What a client that goes away makes a server's read or write raise (BrokenPipeError,
#: ConnectionResetError, ConnectionAbortedError are ConnectionErrors; a stalled client times out).
DROPPED = (ConnectionError, TimeoutError)


def _peer(address: Any) -> str:
    return f"{address[0]}:{address[1]}" if isinstance(address, tuple) and len(address) >= 2 else str(address)


class RestServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    # the kernel queues this many connections while a busy job's GIL delays the accept loop
    # (socketserver's 5 made a browser's or a scraper's burst wait for SYN retransmits, seconds)
    request_queue_size = 128

    def __init__(self, host: str, port: int, token: str, web_dir: str | PathLike = static_files.WEB_DIR, allow_remote: bool = False):
        super().__init__((host, port), RestHandler)
        self.token = token
        self.sessions = Sessions(self.port)
        self.web_dir = web_dir
        self.allow_remote = allow_remote

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def host_allowed(self, host: str | None) -> bool:
        if self.allow_remote:
            return bool(host and host.strip())
        return auth.host_allowed(host, self.port)

    def origin_allowed(self, origin: str | None, host: str | None) -> bool:
        if origin is None:
            return True
        if self.allow_remote:
            return origin.strip().lower() == f"http://{(host or '').strip().lower()}"
        return auth.origin_allowed(origin, self.port)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A request's connection failed outside the answer (socketserver's default prints a
        traceback to stderr for each). A client that went away (a closed tab, a dropped or
        reset connection, a client that stalled: BrokenPipe, ConnectionReset, a timeout) is one
        line at debug level, so that a local user dropping connections by the hundred cannot
        fill the job's output; anything else is logged with its traceback."""
        error = sys.exc_info()[1]
        if isinstance(error, DROPPED):
            log.debug("flowpoint http: the client %s went away: %s", _peer(client_address), error)
            return
        log.error("flowpoint http: a request from %s failed", _peer(client_address), exc_info=True)

    def answer(self, request: Request) -> tuple[int, Any]:
        """``(HTTP status, a JSON-able payload or RawJson)`` for an authorized request."""
        raise NotImplementedError

    def begin_request(self) -> None:
        """A request is being answered (the control endpoint counts them)."""

    def end_request(self) -> None:
        """... and has been answered."""


def _unauthorized() -> ApiError:
    msg = (
        "refused: no valid control token (Authorization: Bearer <token>) or dashboard session. Use the flowpoint CLI "
        f"as the job's user, or open the signed-in link (with ?token=...) that `flowpoint list` or `flowpoint ui` prints: "
        f"the token is in {auth.TOKEN_FILE} "
        f"in {auth.HOME_VARIABLE} (~/.flowpoint)"
    )
    return ApiError(HTTPStatus.UNAUTHORIZED, msg)


_TOKEN_QUERY = re.compile(r"(?i)(token=)[^&\s#\"]*")


def _redacted(value: Any) -> Any:
    """A logged request line without the token of a ``?token=`` sign-in: no log line holds it."""
    return _TOKEN_QUERY.sub(r"\1<redacted>", value) if isinstance(value, str) else value


class RestHandler(BaseHTTPRequestHandler):
    server: RestServer
    server_version = "flowpoint"
    timeout = 60  # a client that connects and sends nothing does not hold a thread forever

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
        log.debug("flowpoint http: " + format, *(_redacted(a) for a in args))

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
                split = urlsplit(self.path)
                query = dict(parse_qsl(split.query, keep_blank_values=True))
                if method == "GET" and "token" in query:
                    self._login(split.path, query)
                    return
                self._authorize(method)
                name = static_files.web_path(split.path) if method == "GET" else None
                if name is not None:
                    self._send_file(name)
                    return
                request = Request(method, split.path, query, split.query, self._body(), self.headers.get("Content-Type"))
                status, payload = self.server.answer(request)
            except ApiError as e:
                status, payload = e.status, {"errors": [str(e)]}
            except FlowpointError as e:
                status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"errors": [str(e)]}
            except Exception as e:  # noqa: BLE001 - answered, and logged for the job's owner
                log.exception("flowpoint http: %s %s failed", method, self.path.split("?", 1)[0])
                status, payload = HTTPStatus.INTERNAL_SERVER_ERROR, {"errors": [f"{type(e).__name__}: {e}"]}
            data = payload.data if isinstance(payload, RawJson) else json.dumps(payload).encode("utf-8")
            self._send(status, "application/json", data)
        finally:
            self.server.end_request()

    def _send(self, status: int, content_type: str, data: bytes, headers: tuple[tuple[str, str], ...] = ()) -> None:
        self.send_response(status)
        if status == HTTPStatus.UNAUTHORIZED:
            self.send_header("WWW-Authenticate", 'Bearer realm="flowpoint"')
        for name, value in (*SECURITY_HEADERS, *headers):
            self.send_header(name, value)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _send_file(self, name: str) -> None:
        data = static_files.read(self.server.web_dir, name)
        if data is None:
            msg = f"no dashboard file {name!r}"
            raise ApiError(HTTPStatus.NOT_FOUND, msg)
        self._send(HTTPStatus.OK, static_files.content_type(name), data)

    def _check_address(self) -> str | None:
        """Steps 1 and 2 of the module doc; returns the Origin header."""
        host = self.headers.get("Host")
        if not self.server.host_allowed(host):
            port = self.server.port
            msg = (
                f"refused: the Host header {host!r} is not this endpoint's address (127.0.0.1:{port} or localhost:{port}); "
                "requests through other names are refused (DNS rebinding)"
            )
            raise ApiError(HTTPStatus.FORBIDDEN, msg)
        origin = self.headers.get("Origin")
        if not self.server.origin_allowed(origin, host):
            msg = f"refused: a request from the web page origin {origin!r}"
            raise ApiError(HTTPStatus.FORBIDDEN, msg)
        return origin

    def _login(self, path: str, query: dict[str, str]) -> None:
        """``?token=``: a session cookie, and a redirect to the URL without the token."""
        self._check_address()
        if not auth.token_matches(f"Bearer {query['token']}", self.server.token):
            raise _unauthorized()
        rest = urlencode({k: v for k, v in query.items() if k != "token"})
        location = path + (f"?{rest}" if rest else "")
        cookie = self.server.sessions.create()
        self._send(HTTPStatus.SEE_OTHER, "text/plain; charset=utf-8", b"", (("Location", location), ("Set-Cookie", cookie)))

    def _authorize(self, method: str) -> None:
        """Refuse, before anything else, a request that is not the owner's own (module doc)."""
        origin = self._check_address()
        if not auth.token_matches(self.headers.get("Authorization"), self.server.token):
            if not self.server.sessions.valid(self.headers.get("Cookie")):
                raise _unauthorized()
            if method != "GET" and origin is None:
                msg = f"refused: {method} {self.path} with a dashboard session needs the page's Origin header"
                raise ApiError(HTTPStatus.FORBIDDEN, msg)
        has_body = bool(self.headers.get("Content-Length", "0").strip() not in ("", "0") or self.headers.get("Transfer-Encoding"))
        if (method != "GET" or has_body) and not auth.is_json(self.headers.get("Content-Type")):
            msg = f"refused: {method} {self.path.split('?', 1)[0]} takes Content-Type: application/json; got {self.headers.get('Content-Type')!r}"
            raise ApiError(HTTPStatus.UNSUPPORTED_MEDIA_TYPE, msg)

    def _body(self) -> bytes:
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            msg = "the Content-Length header is not a number"
            raise ApiError(HTTPStatus.BAD_REQUEST, msg) from None
        if length > MAX_BODY:
            msg = f"the request body has {length} bytes; at most {MAX_BODY} are read"
            raise ApiError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, msg)
        return self.rfile.read(length) if length > 0 else b""
