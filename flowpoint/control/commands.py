"""The CLI commands that act on running jobs and savepoints: ``list``, ``savepoint``, ``stop``,
``cancel``, ``inspect``. Each prints what a user reads and returns the exit code."""

from __future__ import annotations

import sys
from datetime import datetime
from typing import Any

from flowpoint.checkpoint.directory import unit_name
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.savepoint import describe, dispose_savepoint
from flowpoint.control.auth import TokenMissingError, read_token
from flowpoint.control.client import ControlClient
from flowpoint.driver.registry import LOST, JobEntry, JobRegistry


def human_size(n: int | None) -> str:
    if n is None:
        return "-"
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def local_time(ms: int | None) -> str:
    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).strftime("%Y-%m-%d %H:%M:%S")


def table(rows: list[tuple[str, ...]], right: tuple[int, ...] = ()) -> str:
    widths = [max(len(r[c]) for r in rows) for c in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [r[c].rjust(widths[c]) if c in right else r[c].ljust(widths[c]) for c in range(len(r))]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


def _checkpoint_cell(e: JobEntry) -> str:
    if e.last_checkpoint_id is None:
        return "-"
    return f"{e.last_checkpoint_id} at {local_time(e.last_checkpoint_time_ms)}"


SCHEDULED = frozenset(("CREATED", "INITIALIZING"))  # registered, not yet RUNNING


def list_command(show_all: bool, registry: JobRegistry | None = None, which: str | None = None) -> int:
    """``flowpoint list [-r|-s|-a]``: running and scheduled jobs (``which="running"``: only
    those past scheduling; ``"scheduled"``: only those not yet RUNNING; ``show_all``: also the
    ended ones), oldest first."""
    registry = registry or JobRegistry()
    entries = registry.entries()
    lost = [e for e in entries if e.is_stale()]
    for e in lost:
        registry.mark_lost(e)  # shown once as LOST below, then only under --all
    shown = [e for e in entries if show_all or not e.ended or e in lost]
    if which == "running":
        shown = [e for e in shown if e.status not in SCHEDULED]
    elif which == "scheduled":
        shown = [e for e in shown if e.status in SCHEDULED]
    if not shown:
        ended = sum(1 for e in entries if e.ended)
        more = f" ({ended} ended: `flowpoint list --all`)" if ended and not show_all else ""
        what = {"running": "running", "scheduled": "scheduled"}.get(which or "", "running")
        print(f"No {what} jobs{more}." if not show_all else f"No jobs in {registry.dir}.")
        return 0
    header = ("JOB ID", "NAME", "STATUS", "START TIME", "LAST CHECKPOINT")
    if show_all:
        header += ("END TIME",)
    rows = [header]
    for e in shown:
        row = (e.job_id, e.job_name, e.status, local_time(e.start_time_ms), _checkpoint_cell(e))
        if show_all:
            row += (local_time(e.end_time_ms),)
        rows.append(row)
    print(table(rows))
    for line in dashboard_links([e for e in shown if e not in lost]):
        print(line)
    for e in lost:
        print(f"job {e.job_id} is {LOST}: its process {e.pid} on {e.host} is gone without ending the job; {restart_advice(e)}", file=sys.stderr)
    return 0


def dashboard_links(entries: list[JobEntry]) -> list[str]:
    """The signed-in dashboard link of each running job with an endpoint: its URL with the
    control token, which only the job's user can read (the job's own output shows the URL
    without it). None when there is no token file (no endpoint to sign in to)."""
    running = [e for e in entries if not e.ended and e.endpoint]
    if not running:
        return []
    try:
        token = read_token()
    except TokenMissingError:
        return []
    width = max(len(e.job_id) for e in running)
    lines = ["Dashboards (signed-in links: opening one starts a browser session; keep them to yourself):"]
    lines += [f"  {e.job_id.ljust(width)}  http://{e.endpoint}/?token={token}#/jobs/{e.job_id}" for e in running]
    return lines


def checkpoint_exists(uri: str | None) -> bool | None:
    """Whether the checkpoint at ``uri`` is still there (its ``_metadata``); None when that cannot
    be told (no path recorded, storage that does not answer)."""
    if not uri:
        return None
    try:

        return CheckpointStorageAccess(uri).exists("_metadata")
    except Exception:  # noqa: BLE001 - unknown: the advice names it as before
        return None


def restart_advice(e: JobEntry) -> str:
    """How to restart a LOST job: from its last checkpoint, if it completed one that still
    exists (a run killed while it finished has deleted its checkpoints: no advice names them)."""
    if e.last_checkpoint_id is not None and checkpoint_exists(e.last_checkpoint_path) is False:
        return (
            f"its last checkpoint, {e.last_checkpoint_id} ({e.last_checkpoint_path}), no longer exists (a job deletes its "
            "checkpoints when it finishes: it was killed while it ended, or they were removed), so it has none to restart "
            "from: run it again (from the beginning, or from a savepoint with `-s`)"
        )
    if e.last_checkpoint_id is not None:
        path = e.last_checkpoint_path or "<path>"
        where = f" ({e.last_checkpoint_path})" if e.last_checkpoint_path else ""
        return f"restart it from its last checkpoint, {e.last_checkpoint_id}{where}, with `flowpoint run --resume` or `-s {path}`"
    if e.resumed_from is not None:
        which = f" {e.resumed_checkpoint_id}" if e.resumed_checkpoint_id is not None else ""
        return (
            f"it completed no checkpoint: run it again from the checkpoint or savepoint{which} of job {e.resumed_from} "
            "it was started from (`flowpoint run -s <its path>`), or from the beginning"
        )
    return "it completed no checkpoint, so it has none to restart from: run it again (from the beginning)"


def checkpoint_command(job_id: str, full: bool, registry: JobRegistry | None = None) -> int:
    """``flowpoint checkpoint JOB-ID [-full]``: trigger one now, wait, print its path."""
    client = ControlClient.for_job(job_id, registry)
    kind = "full checkpoint" if full else "checkpoint"
    print(f"Triggering {kind} for job {client.job_id}.")
    print("Waiting for response...")
    checkpoint_id, path = client.trigger_checkpoint("FULL" if full else "CONFIGURED")
    print(f"Checkpoint({checkpoint_id}) completed. Path: {path}")
    print(f"You can resume your program from this checkpoint with the run command: flowpoint run -s {path} <job.py>")
    return 0


def savepoint_command(job_id: str, target_directory: str | None, format_type: str = "canonical", registry: JobRegistry | None = None) -> int:
    client = ControlClient.for_job(job_id, registry)
    native = " in the native format" if format_type == "native" else ""
    print(f"Triggering savepoint for job {client.job_id}{native}.")
    print("Waiting for response...")
    path = client.trigger_savepoint(target_directory, format_type)
    print(f"Savepoint completed. Path: {path}")
    print(f"You can resume your program from this savepoint with the run command: flowpoint run -s {path} <job.py>")
    return 0


def dispose_command(path: str) -> int:
    print(f"Disposing savepoint '{path}'.")
    left = dispose_savepoint(path)
    print(f"Savepoint '{path}' disposed.")
    if left:
        shown = "\n  ".join(left)
        print(f"Left in place: {len(left)} entries that the savepoint does not list (not its to delete):\n  {shown}")
    return 0


def stop_command(job_id: str, target_directory: str | None, drain: bool, registry: JobRegistry | None = None) -> int:
    client = ControlClient.for_job(job_id, registry)
    how = " after draining (final watermark: windows and timers fire)" if drain else ""
    print(f"Suspending job {client.job_id} with a savepoint{how}.")
    path = client.stop_with_savepoint(target_directory, drain)
    print(f"Savepoint completed. Path: {path}")
    return 0


def cancel_command(job_id: str, registry: JobRegistry | None = None) -> int:
    client = ControlClient.for_job(job_id, registry)
    print(f"Cancelling job {client.job_id}.")
    status = client.cancel()
    if status == "CANCELED":
        print(f"Cancelled job {client.job_id}.")
        return 0
    if status in ("FINISHED", "FAILED"):
        print(f"Job {client.job_id} ended {status} before it was cancelled.")
        return 0
    print(f"Cancellation of job {client.job_id} requested; it is still {status}: check with `flowpoint list`.")
    return 0


def format_description(d: dict[str, Any]) -> str:
    """The summary ``flowpoint inspect`` prints for ``describe(path)``."""
    kind = str(d.get("kind") or "snapshot")
    lines = [f"{kind.capitalize()} {d.get('path')}"]
    job = f"{d.get('job_id')} ({d.get('job_name')!r})" if d.get("job_name") else str(d.get("job_id"))
    lines.append(f"  job              {job}")
    lines.append(f"  checkpoint id    {d.get('checkpoint_id')} ({unit_name(d.get('runtime'))} {d.get('epoch')}), completed {local_time(d.get('completed_time_ms'))}")
    lines.append(f"  backend          {d.get('backend')}, max parallelism {d.get('max_parallelism')}")
    lines.append(f"  size             {human_size(d.get('bytes'))}")
    operators = d.get("operators") or []
    lines.append("")
    lines.append(f"Operators ({len(operators)}):")
    if operators:
        rows = [("UID", "NAME", "PARALLELISM", "MAX PARALLELISM", "KEYS", "SIZE")]
        for op in operators:
            rows.append((
                str(op.get("uid")), str(op.get("name") or "-"), str(op.get("parallelism")),
                str(op.get("max_parallelism")), str(op.get("keys", "-")), human_size(op.get("bytes")),
            ))
        lines += ["  " + line for line in table(rows, right=(2, 3, 4, 5)).splitlines()]
        for op in operators:
            states = op.get("states") or {n: {} for n in op.get("state_names") or []}
            if not states:
                continue
            lines.append(f"  state of {op.get('uid')}:")
            for name, s in states.items():
                kind = f" ({s['kind']})" if s.get("kind") else ""
                keys = f": {s['keys']} keys" if s.get("keys") is not None else ""
                lines.append(f"    {name}{kind}{keys}")
    sources = d.get("sources") or []
    if sources:
        lines.append("")
        lines.append("Sources:")
        for s in sources:
            lines.append(f"  {s.get('uid')}: {s.get('splits')} splits, {s.get('finished')} finished")
    sinks = d.get("sinks") or []
    if sinks:
        lines.append("")
        lines.append(f"Sinks: {', '.join(map(str, sinks))}")
    return "\n".join(lines)


def inspect_command(path: str) -> int:
    print(format_description(describe(path)))
    return 0
