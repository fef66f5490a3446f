"""``flowpoint ui`` asking a running job's control endpoint, as the CLI does: the endpoint's
address from the job's registry entry, the installation's token, the request passed on as it
came (method, path and query, JSON body) and the answer passed back as it came."""

from __future__ import annotations

import http.client
import json
from typing import Any

from flowpoint.control.rest_server import Request
from flowpoint.errors import FlowpointError

TIMEOUT_S = 10.0


class EndpointGone(FlowpointError):
    """The job's endpoint does not answer: its job ended (or its process is gone)."""


def relay(endpoint: str, token: str, request: Request, timeout: float = TIMEOUT_S) -> tuple[int, bytes]:
    """``(status, body)`` of ``request`` sent to the endpoint at ``endpoint`` ("host:port")."""
    host, _, port = endpoint.rpartition(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    headers = {"Authorization": f"Bearer {token}"}
    body = request.body if request.body or request.method == "GET" else b"{}"
    if body:
        headers["Content-Type"] = "application/json"
    path = request.path + (f"?{request.raw_query}" if request.raw_query else "")
    try:
        conn.request(request.method, path, body=body or None, headers=headers)
        response = conn.getresponse()
        return response.status, response.read()
    except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected) as e:
        msg = f"the control endpoint {endpoint} does not answer ({type(e).__name__})"
        raise EndpointGone(msg) from None
    except (TimeoutError, OSError) as e:
        msg = f"the control endpoint {endpoint} did not answer {request.method} {request.path}: {e}"
        raise EndpointGone(msg) from None
    finally:
        conn.close()


def get_json(endpoint: str, token: str, path: str, timeout: float = TIMEOUT_S) -> Any:
    """A GET's JSON answer; EndpointGone when the endpoint does not answer or refuses."""
    status, data = relay(endpoint, token, Request("GET", path, {}, "", b"", None), timeout)
    if status != 200:
        msg = f"the control endpoint {endpoint} answered {status} to GET {path}"
        raise EndpointGone(msg)
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        msg = f"the control endpoint {endpoint} answered GET {path} with something other than JSON"
        raise EndpointGone(msg) from None
