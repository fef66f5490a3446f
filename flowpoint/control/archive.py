"""An ended job's REST answers, kept for ``flowpoint ui`` as Flink's HistoryServer keeps a job's
archive: when a job ends, its process writes what ``/jobs/overview`` said of it and what
``/jobs/:jid``, its vertices, ``/checkpoints``, ``/checkpoints/config``, ``/exceptions``,
``/throughput``, ``/epochs`` and its savepoint operations answer, into
``<registry dir>/archive/<job-id>.json`` (mode 0600, in a directory only its owner can change).
The archive goes when the registry prunes the job's entry.
"""

from __future__ import annotations

import json
import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from flowpoint import private_files
from flowpoint.clock import now_ms
from flowpoint.control.rest import checkpoints, exceptions, jobs, timeline, vertices
from flowpoint.driver.registry import ARCHIVE_DIR, JobRegistry
from flowpoint.errors import InsecurePathError

if TYPE_CHECKING:
    from flowpoint.control.job_control import JobControl

FORMAT = 1
JOB_ID = re.compile(r"^[0-9a-f]{32}$")
MAX_ARCHIVE = 64 << 20  # an archive is far smaller; a larger file is not read


def archive_path(registry: JobRegistry, job_id: str) -> Path:
    if not JOB_ID.match(job_id):
        msg = f"not a job id: {job_id!r}"
        raise ValueError(msg)
    return registry.dir / ARCHIVE_DIR / f"{job_id}.json"


def job_routes(job: JobControl) -> tuple[dict, dict[str, Any]]:
    """``(its /jobs/overview entry, {route path: answer})`` of a job, now."""
    snap = job.snapshot()
    base = f"/jobs/{job.job_id}"
    client = job.client
    routes: dict[str, Any] = {
        base: jobs.job_details(snap),
        f"{base}/checkpoints": checkpoints.checkpointing_statistics(client),
        f"{base}/exceptions": exceptions.job_exceptions(client),
        f"{base}/throughput": timeline.throughput(client),
        f"{base}/epochs": timeline.epochs(client, job.spark_ui),
    }
    config = checkpoints.checkpoint_config(client)
    if config is not None:
        routes[f"{base}/checkpoints/config"] = config
    for v in snap.plan.vertices:
        routes[f"{base}/vertices/{v.id}"] = vertices.vertex_details(snap, v)
    for trigger_id, status in job.operations.all_statuses().items():
        routes[f"{base}/savepoints/{trigger_id}"] = status
    return jobs.overview_entry(snap), routes


def write_archive(job: JobControl) -> Path:
    overview, routes = job_routes(job)
    registry = job.registry
    path = archive_path(registry, job.job_id)
    registry.check()
    private_files.makedirs(str(path.parent))
    private_files.check_private_dir(str(path.parent), "job archive directory", "set control.registry.dir or $FLOWPOINT_HOME to a directory of your own")
    data = {"flowpoint-archive": FORMAT, "job_id": job.job_id, "archived_ms": now_ms(), "overview": overview, "routes": routes}
    private_files.write_private(str(path), json.dumps(data, separators=(",", ":")).encode("utf-8"))
    return path


def read_archive(registry: JobRegistry, job_id: str) -> dict | None:
    """The archive of job ``job_id``, None when there is none (or it is not one). An archive
    another user owns or can write is refused (InsecurePathError)."""
    try:
        path = archive_path(registry, job_id)
    except ValueError:
        return None
    registry.check()
    if not path.parent.is_dir():
        return None
    private_files.check_private_dir(str(path.parent), "job archive directory", "set $FLOWPOINT_HOME to a directory of your own")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if private_files.POSIX and (st.st_uid != os.geteuid() or st.st_mode & 0o022 or not stat.S_ISREG(st.st_mode)):
            msg = f"the job archive {path} belongs to another user or others can write it: refused. Remove it"
            raise InsecurePathError(msg)
        if st.st_size > MAX_ARCHIVE:
            return None
        try:
            data = json.loads(f.read().decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return None
    if not isinstance(data, dict) or data.get("flowpoint-archive") != FORMAT or data.get("job_id") != job_id:
        return None
    return data
