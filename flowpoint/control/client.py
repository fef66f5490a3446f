"""What the CLI uses to reach a running job: find it in the registry, call its endpoint with
the installation's control token (flowpoint/control/auth.py).

Savepoints and stops are Flink's asynchronous operations (docs/rest.md): the request answers
with a trigger id, and the client polls ``GET /jobs/:jid/savepoints/:triggerid`` until the
savepoint is written. A stop ends the job; if its process lets go of it before the client has
read the result, the client reads it from the job's archive (flowpoint/control/archive.py)."""

from __future__ import annotations

import http.client
import json
import os
import re
import time
from typing import Any

from flowpoint.control import auth
from flowpoint.control.archive import read_archive
from flowpoint.driver.registry import JobEntry, JobNotFoundError, JobRegistry
from flowpoint.errors import FlowpointError

GET_TIMEOUT_S = 30.0
ACTION_TIMEOUT_S = 3600.0  # a savepoint of a large state takes as long as it takes
POLL_S = 0.25  # how often a savepoint's status is asked for


class ControlRequestError(FlowpointError):
    """The endpoint refused or failed a request; ``status`` is its HTTP status."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.status = status


class ControlClient:
    """Calls the control endpoint of one job (``entry``) found in ``registry``."""

    def __init__(self, entry: JobEntry, registry: JobRegistry, token: str | None = None):
        self.entry = entry
        self.registry = registry
        self._token = token

    @classmethod
    def for_job(cls, job_id: str, registry: JobRegistry | None = None) -> ControlClient:
        registry = registry or JobRegistry()
        entry = registry.resolve(job_id)
        if not entry.endpoint:
            msg = f"job {entry.job_id} ({entry.job_name!r}) has no control endpoint in {registry.path(entry.job_id)}; run `flowpoint list`"
            raise JobNotFoundError(msg)
        return cls(entry, registry, auth.read_token())

    @property
    def job_id(self) -> str:
        return self.entry.job_id

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = GET_TIMEOUT_S) -> tuple[int, Any]:
        host, _, port = self.entry.endpoint.rpartition(":")
        conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
        e = self.entry
        if self._token is None:
            self._token = auth.read_token()
        if body is None and method != "GET":
            body = {}  # every request that acts on a job is JSON
        try:
            data = json.dumps(body).encode("utf-8") if body is not None else None
            headers = {"Authorization": f"Bearer {self._token}"}
            if data is not None:
                headers["Content-Type"] = "application/json"
            conn.request(method, path, body=data, headers=headers)
            response = conn.getresponse()
            raw = response.read()
        except (ConnectionRefusedError, ConnectionResetError):
            if e.is_stale():
                self.registry.mark_lost(e)
                msg = f"job {e.job_id} ({e.job_name!r}) is no longer running: its process {e.pid} is gone; run `flowpoint list`"
            else:
                msg = (
                    f"job {e.job_id} ({e.job_name!r}) does not answer at {e.endpoint} (process {e.pid}): "
                    "it has probably just ended; run `flowpoint list --all`"
                )
            raise JobNotFoundError(msg) from None
        except TimeoutError:
            msg = f"job {e.job_id} ({e.job_name!r}) did not answer {method} {path} at {e.endpoint} within {timeout:.0f} s"
            raise FlowpointError(msg) from None
        except OSError as err:
            msg = f"cannot reach job {e.job_id} ({e.job_name!r}) at {e.endpoint}: {err}; run `flowpoint list`"
            raise FlowpointError(msg) from None
        finally:
            conn.close()
        try:
            payload = json.loads(raw.decode("utf-8")) if raw else {}
        except ValueError:
            payload = {"errors": [raw.decode("utf-8", "replace")[:500]]}
        if response.status >= 400:
            errors = payload.get("errors") if isinstance(payload, dict) else None
            message = "; ".join(errors) if errors else f"HTTP {response.status}"
            raise ControlRequestError(message, response.status)
        return response.status, payload

    # -- the operations ------------------------------------------------------------------------

    def details(self) -> dict:
        return self.request("GET", f"/jobs/{self.job_id}")[1]

    def trigger_savepoint(self, target_directory: str | None, format_type: str = "canonical") -> str:
        body = owner_target(target_directory)
        if format_type != "canonical":
            body["formatType"] = format_type.upper()
        trigger = self.request("POST", f"/jobs/{self.job_id}/savepoints", body)[1]["request-id"]
        return self.wait_for_savepoint(trigger)

    def stop_with_savepoint(self, target_directory: str | None, drain: bool) -> str:
        body: dict = {"drain": drain, **owner_target(target_directory)}
        trigger = self.request("POST", f"/jobs/{self.job_id}/stop", body)[1]["request-id"]
        return self.wait_for_savepoint(trigger)

    def wait_for_savepoint(self, trigger_id: str, timeout: float = ACTION_TIMEOUT_S) -> str:
        """Poll a savepoint operation until it completes; its location, or FlowpointError with
        its failure's message."""
        path = f"/jobs/{self.job_id}/savepoints/{trigger_id}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                answer = self.request("GET", path)[1]
            except JobNotFoundError:
                answer = self._archived(path)  # the job ended and its process is gone
            except ControlRequestError as e:
                if e.status != 404:
                    raise
                answer = self._archived(path)  # the job ended and its process let go of it
            if answer.get("status", {}).get("id") == "COMPLETED":
                operation = answer.get("operation") or {}
                cause = operation.get("failure-cause")
                if cause:
                    message = (cause.get("flowpoint") or {}).get("message") or cause.get("class") or "unknown failure"
                    raise FlowpointError(message)
                return operation["location"]
            time.sleep(POLL_S)
        msg = f"the savepoint of job {self.job_id} ({self.entry.job_name!r}) did not complete within {timeout:.0f} s"
        raise FlowpointError(msg)

    def trigger_checkpoint(self, checkpoint_type: str = "CONFIGURED", timeout: float = ACTION_TIMEOUT_S) -> tuple[int, str]:
        """``POST /jobs/:jid/checkpoints`` (Flink 1.19), then poll its trigger until the
        checkpoint completes: its id and path, or FlowpointError with the failure's message."""
        trigger = self.request("POST", f"/jobs/{self.job_id}/checkpoints", {"checkpointType": checkpoint_type})[1]["request-id"]
        path = f"/jobs/{self.job_id}/checkpoints/{trigger}"
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            answer = self.request("GET", path)[1]
            if answer.get("status", {}).get("id") == "COMPLETED":
                operation = answer.get("operation") or {}
                cause = operation.get("failure-cause")
                if cause:
                    message = (cause.get("flowpoint") or {}).get("message") or cause.get("class") or "unknown failure"
                    raise FlowpointError(message)
                return int(operation["checkpointId"]), str(operation.get("location") or "")
            time.sleep(POLL_S)
        msg = f"the checkpoint of job {self.job_id} ({self.entry.job_name!r}) did not complete within {timeout:.0f} s"
        raise FlowpointError(msg)

    def _archived(self, path: str) -> dict:
        archive = read_archive(self.registry, self.job_id)
        answer = (archive or {}).get("routes", {}).get(path)
        if answer is None:
            msg = (
                f"job {self.job_id} ({self.entry.job_name!r}) ended before saying how its savepoint went; "
                "see `flowpoint list --all` and the job's output"
            )
            raise FlowpointError(msg)
        return answer

    def cancel(self, wait_s: float = 60.0) -> str:
        """Cancel the job and wait up to ``wait_s`` for it to end; returns its last status."""
        self.request("PATCH", f"/jobs/{self.job_id}?mode=cancel")
        status = "CANCELLING"
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline:
            try:
                status = self.details()["state"]
            except FlowpointError:
                # the process has let go of the job (or exited): its registry entry has the end
                entry = self.registry.read(self.job_id)
                return entry.status if entry is not None and entry.ended else "CANCELED"
            if status in ("CANCELED", "FINISHED", "FAILED"):
                return status
            time.sleep(0.2)
        return status


def owner_target(target_directory: str | None) -> dict:
    """The request fields for a savepoint directory the CLI's user typed: a local path made
    absolute here (the job's process has another working directory), a URI as given, and marked
    ``explicit`` (the owner's choice, not limited to ``state.savepoints.dir``). A URI with ``..``
    segments is refused here, as the endpoint would."""
    if not target_directory:
        return {}
    target = target_directory
    if not re.match(r"^[A-Za-z][A-Za-z0-9+.-]*://", target):
        target = os.path.abspath(os.path.expanduser(target))
    try:
        target = auth.canonical_target(target)
    except auth.TargetRefused as e:
        raise FlowpointError(str(e)) from None
    return {"target-directory": target, "explicit": True}
