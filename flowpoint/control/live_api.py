"""The routes a job's control endpoint answers about the jobs of its process (docs/rest.md):

    GET   /config  /overview  /jobs  /jobs/overview
    GET   /jobs/:jid                              JobDetailsInfo (+ "flowpoint")
    PATCH /jobs/:jid?mode=cancel                  202 {}          (POST /jobs/:jid/cancel too)
    GET   /jobs/:jid/vertices/:vid                JobVertexDetailsInfo
    GET   /jobs/:jid/vertices/:vid/state          its keyed state in the latest checkpoint (flowpoint's own)
    GET   /jobs/:jid/checkpoints                  CheckpointingStatistics
    GET   /jobs/:jid/checkpoints/config           CheckpointConfigInfo
    GET   /jobs/:jid/exceptions[?maxExceptions=n] JobExceptionsInfoWithHistory
    GET   /jobs/:jid/throughput  /jobs/:jid/epochs               (flowpoint's own)
    POST  /jobs/:jid/checkpoints {"checkpointType"?: CONFIGURED|FULL|INCREMENTAL}  202 {"request-id"}
    GET   /jobs/:jid/checkpoints/:triggerid       {"status": {"id"}, "operation": {"checkpointId", "location"}}
    POST  /jobs/:jid/savepoints  {"target-directory"?, "cancel-job"?, "formatType"?, "triggerId"?}
    POST  /jobs/:jid/stop        {"targetDirectory"?, "drain"?, "formatType"?, "triggerId"?}
                                                  202 {"request-id"}
    GET   /jobs/:jid/savepoints/:triggerid        {"status": {"id"}, "operation"}

A savepoint target must lie within the job's ``state.savepoints.dir`` unless the body says
``"explicit": true`` (:func:`flowpoint.control.auth.check_target`; the CLI says so for the
directory its user typed).
"""

from __future__ import annotations

from collections.abc import Callable
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from flowpoint.control import auth
from flowpoint.control.rest import checkpoints, exceptions, jobs, state, timeline, vertices
from flowpoint.control.rest.operations import TRIGGER_ID
from flowpoint.control.rest_server import ApiError, Request

if TYPE_CHECKING:
    from flowpoint.control.job_control import JobControl

ROUTES = (
    "GET /config, GET /overview, GET /jobs, GET /jobs/overview, GET|PATCH /jobs/:jid, GET /jobs/:jid/vertices/:vid, GET /jobs/:jid/vertices/:vid/state, "
    "GET /jobs/:jid/checkpoints, POST /jobs/:jid/checkpoints, GET /jobs/:jid/checkpoints/:triggerid, GET /jobs/:jid/checkpoints/config, "
    "GET /jobs/:jid/exceptions, GET /jobs/:jid/throughput, "
    "GET /jobs/:jid/epochs, POST /jobs/:jid/savepoints, GET /jobs/:jid/savepoints/:triggerid, POST /jobs/:jid/stop, "
    "POST /jobs/:jid/cancel"
)


def _flag(body: dict, name: str) -> bool:
    value = body.get(name, False)
    if not isinstance(value, bool):
        msg = f'"{name}" must be true or false; got {value!r}'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    return value


def savepoint_target(body: dict, job: JobControl, native_allowed: bool = False) -> str | None:
    """The body's savepoint target, checked; None: the job's ``state.savepoints.dir`` (400 when
    there is none, as Flink answers)."""
    target = body.get("target-directory", body.get("targetDirectory"))
    if target is not None and (not isinstance(target, str) or not target.strip()):
        msg = f'"target-directory" must be a directory path or URI; got {target!r}'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    explicit = _flag(body, "explicit")
    fmt = body.get("formatType", "CANONICAL")
    if fmt not in (None, "CANONICAL") and not (fmt == "NATIVE" and native_allowed):
        allowed = "CANONICAL or NATIVE" if native_allowed else "CANONICAL (a stop-with-savepoint is canonical)"
        msg = f'"formatType" {fmt!r} is not supported here: {allowed}'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    try:
        checked = auth.check_target(target, explicit, job.config)
    except auth.TargetRefused as e:
        raise ApiError(HTTPStatus.FORBIDDEN if e.forbidden else HTTPStatus.BAD_REQUEST, str(e)) from None
    if checked is None and not (job.config.get("state.savepoints.dir") if job.config is not None else None):
        msg = 'no savepoint directory: the job sets no state.savepoints.dir, so "target-directory" must be given'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    return checked


def _trigger_id(body: dict) -> str | None:
    value = body.get("triggerId")
    if value is not None and (not isinstance(value, str) or not TRIGGER_ID.match(value)):
        msg = f'"triggerId" must be 32 lowercase hexadecimal characters; got {value!r}'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    return value


def trigger_savepoint(job: JobControl, body: dict) -> tuple[int, dict]:
    target = savepoint_target(body, job, native_allowed=True)
    cancel = _flag(body, "cancel-job")
    job.require_running("take a savepoint of")
    client = job.client
    native = body.get("formatType") == "NATIVE"
    if native and not client._coordinator.settings.enabled:
        msg = (f"cannot take a native savepoint of job {job.job_id}: it is a full checkpoint in the savepoint directory, "
               "and checkpointing is not enabled for the job (execution.checkpointing.interval); take a canonical one")
        raise ApiError(HTTPStatus.CONFLICT, msg)

    def run() -> str:
        location = client.trigger_savepoint(target, native=native)
        if cancel:
            client.cancel()
        return location

    return HTTPStatus.ACCEPTED, {"request-id": job.operations.start("savepoint", run, _trigger_id(body))}


CHECKPOINT_TYPES = ("CONFIGURED", "FULL", "INCREMENTAL")


def trigger_checkpoint(job: JobControl, body: dict) -> tuple[int, dict]:
    """Flink 1.19's ``POST /jobs/:jid/checkpoints`` {"checkpointType"?: CONFIGURED|FULL|INCREMENTAL}:
    a checkpoint now. INCREMENTAL is what the job's backend is configured with (CONFIGURED);
    FULL references no file of an earlier checkpoint."""
    kind = body.get("checkpointType", "CONFIGURED")
    if kind not in CHECKPOINT_TYPES:
        msg = f'"checkpointType" must be one of {", ".join(CHECKPOINT_TYPES)}; got {kind!r}'
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    job.require_running("trigger a checkpoint of")
    if not job.client._coordinator.settings.enabled:
        msg = f"cannot trigger a checkpoint of job {job.job_id}: checkpointing is not enabled for it (execution.checkpointing.interval)"
        raise ApiError(HTTPStatus.CONFLICT, msg)
    client = job.client
    trigger = job.operations.start("checkpoint", lambda: client.trigger_checkpoint(full=kind == "FULL"), _trigger_id(body))
    return HTTPStatus.ACCEPTED, {"request-id": trigger}


def checkpoint_status(job: JobControl, trigger_id: str) -> tuple[int, dict]:
    answer = job.operations.status(trigger_id)
    if answer is None:
        msg = f"no checkpoint operation {trigger_id} of job {job.job_id}"
        raise ApiError(HTTPStatus.NOT_FOUND, msg)
    return HTTPStatus.OK, answer


def stop(job: JobControl, body: dict) -> tuple[int, dict]:
    target = savepoint_target(body, job)
    drain = _flag(body, "drain")
    job.require_running("stop")
    client = job.client
    trigger = job.operations.start("stop", lambda: client.stop_with_savepoint(target, drain=drain), _trigger_id(body))
    return HTTPStatus.ACCEPTED, {"request-id": trigger}


def cancel(job: JobControl, request: Request) -> tuple[int, dict]:
    mode = request.query.get("mode", "cancel").lower()
    if mode != "cancel":
        msg = f"mode {mode!r} is not supported: PATCH /jobs/:jid?mode=cancel cancels; POST /jobs/:jid/stop stops with a savepoint"
        raise ApiError(HTTPStatus.BAD_REQUEST, msg)
    job.require_running("cancel")
    job.client.cancel()
    return HTTPStatus.ACCEPTED, {}


def savepoint_status(job: JobControl, trigger_id: str) -> tuple[int, dict]:
    status = job.operations.status(trigger_id)
    if status is None:
        msg = f"there is no savepoint operation with triggerId={trigger_id} for job {job.job_id}"
        raise ApiError(HTTPStatus.NOT_FOUND, msg)
    return HTTPStatus.OK, status


def _max_exceptions(request: Request) -> int | None:
    raw = request.query.get("maxExceptions")
    if raw is None:
        return None
    try:
        return int(raw)
    except ValueError:
        msg = f"maxExceptions must be a number; got {raw!r}"
        raise ApiError(HTTPStatus.BAD_REQUEST, msg) from None


def _find_vertex(job: JobControl, plan: Any, vertex_id: str) -> Any:
    vertex = plan.vertex(vertex_id)
    if vertex is None:
        msg = f"job {job.job_id} has no vertex {vertex_id}; its vertices: {', '.join(v.id for v in plan.vertices)}"
        raise ApiError(HTTPStatus.NOT_FOUND, msg)
    return vertex


def _vertex(job: JobControl, vertex_id: str) -> tuple[int, dict]:
    snap = job.snapshot()
    return HTTPStatus.OK, vertices.vertex_details(snap, _find_vertex(job, snap.plan, vertex_id))


def _vertex_state(job: JobControl, vertex_id: str) -> tuple[int, dict]:
    vertex = _find_vertex(job, job.client.get_plan(), vertex_id)
    return HTTPStatus.OK, state.vertex_state(job, vertex, job.state_samples)


def _config(job: JobControl) -> tuple[int, dict]:
    config = checkpoints.checkpoint_config(job.client)
    if config is None:
        msg = f"the checkpoint configuration of job {job.job_id} is not known yet: it is starting"
        raise ApiError(HTTPStatus.NOT_FOUND, msg)
    return HTTPStatus.OK, config


# (method, the path after /jobs/:jid with ":x" for a parameter) -> what answers
JOB_ROUTES: dict[tuple[str, tuple[str, ...]], Callable[[JobControl, Request, list[str]], tuple[int, Any]]] = {
    ("GET", ()): lambda j, r, p: (HTTPStatus.OK, jobs.job_details(j.snapshot())),
    ("PATCH", ()): lambda j, r, p: cancel(j, r),
    ("POST", ("cancel",)): lambda j, r, p: cancel(j, r),
    ("GET", ("vertices", ":vid")): lambda j, r, p: _vertex(j, p[0]),
    ("GET", ("vertices", ":vid", "state")): lambda j, r, p: _vertex_state(j, p[0]),
    ("GET", ("checkpoints",)): lambda j, r, p: (HTTPStatus.OK, checkpoints.checkpointing_statistics(j.client)),
    ("GET", ("checkpoints", "config")): lambda j, r, p: _config(j),
    ("GET", ("exceptions",)): lambda j, r, p: (HTTPStatus.OK, exceptions.job_exceptions(j.client, _max_exceptions(r))),
    ("GET", ("throughput",)): lambda j, r, p: (HTTPStatus.OK, timeline.throughput(j.client)),
    ("GET", ("epochs",)): lambda j, r, p: (HTTPStatus.OK, timeline.epochs(j.client, j.spark_ui)),
    ("POST", ("checkpoints",)): lambda j, r, p: trigger_checkpoint(j, r.json()),
    ("GET", ("checkpoints", ":triggerid")): lambda j, r, p: checkpoint_status(j, p[0]),
    ("POST", ("savepoints",)): lambda j, r, p: trigger_savepoint(j, r.json()),
    ("GET", ("savepoints", ":triggerid")): lambda j, r, p: savepoint_status(j, p[0]),
    ("POST", ("stop",)): lambda j, r, p: stop(j, r.json()),
}


def match(method: str, rest: list[str]) -> tuple[Callable, list[str]] | None:
    """The job route for ``method`` and the path after ``/jobs/:jid`` with its parameters;
    None when no route has that path; 405 when one has it for other methods."""
    allowed = []
    for (m, pattern), handler in JOB_ROUTES.items():
        if len(pattern) != len(rest) or any(p != r and not p.startswith(":") for p, r in zip(pattern, rest, strict=True)):
            continue
        if m == method:
            return handler, [r for p, r in zip(pattern, rest, strict=True) if p.startswith(":")]
        allowed.append(m)
    if allowed:
        msg = f"{method} is not allowed on /jobs/:jid/{'/'.join(rest)}; it takes {', '.join(sorted(set(allowed)))}"
        raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, msg)
    return None


def no_route(request: Request) -> ApiError:
    return ApiError(HTTPStatus.NOT_FOUND, f"no route {request.method} {request.path}; routes: {ROUTES}")


class LiveApi:
    """What a job's control endpoint answers, from the jobs its process serves."""

    def __init__(self, jobs_of: Callable[[], list[JobControl]], job_of: Callable[[str], JobControl]):
        self.jobs_of = jobs_of
        self.job_of = job_of

    def answer(self, request: Request) -> tuple[int, Any]:
        parts = request.parts
        if request.method == "GET":
            if parts == ["config"]:
                return HTTPStatus.OK, jobs.dashboard_config()
            if parts in (["overview"], ["jobs"], ["jobs", "overview"]):
                entries = [jobs.overview_entry(j.snapshot()) for j in self.jobs_of()]
                if parts == ["overview"]:
                    return HTTPStatus.OK, jobs.cluster_overview(entries)
                if parts == ["jobs"]:
                    return HTTPStatus.OK, {"jobs": [{"id": e["jid"], "status": e["state"]} for e in entries]}
                return HTTPStatus.OK, {"jobs": entries}
        if len(parts) < 2 or parts[0] != "jobs" or parts[1] == "overview":
            if parts in (["config"], ["overview"], ["jobs"]):
                raise ApiError(HTTPStatus.METHOD_NOT_ALLOWED, f"{request.method} is not allowed on {request.path}")
            raise no_route(request)
        found = match(request.method, parts[2:])
        if found is None:
            raise no_route(request)
        handler, params = found
        return handler(self.job_of(parts[1]), request, params)
