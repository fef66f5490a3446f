"""Reading a running job's state (issue 30, item 4): which job (the job registry, as ``flowpoint
list`` finds it), its newest completed checkpoint, pinned so that the job's retention keeps it
while it is read (flowpoint/checkpoint/readers.py)."""

from __future__ import annotations

import time
from typing import Any

from flowpoint.checkpoint.directory import CheckpointStore, find_latest
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess, split_uri
from flowpoint.checkpoint.metadata import metadata_path
from flowpoint.checkpoint.readers import CheckpointPin
from flowpoint.driver.registry import JobEntry, JobRegistry, registry_dir
from flowpoint.errors import CheckpointError, ConfigurationError

SETTLE_S = 0.2  # a retention that listed the pins just before this one was written is done by then
ATTEMPTS = 5


def running_job(job: str, config: Any = None) -> JobEntry:
    """The running job with this id, unique id prefix, or name."""
    entries = JobRegistry(registry_dir(config)).entries()
    text = str(job).strip()
    running = [e for e in entries if not e.ended and not e.is_stale()]
    by_id = [e for e in running if e.job_id == text.lower() or (len(text) >= 4 and e.job_id.startswith(text.lower()))]
    matches = by_id or [e for e in running if e.job_name == text]
    if len(matches) == 1:
        return matches[0]
    listing = "\n".join(f"  {e.job_id}  {e.job_name!r}" for e in (matches or running)) or "  (none)"
    if matches:
        msg = f"job {text!r} names {len(matches)} running jobs; give one's id:\n{listing}"
    else:
        ended = [e for e in entries if e.job_id.startswith(text.lower()) or e.job_name == text]
        hint = (" (it has ended: read a retained checkpoint or savepoint by its path, e.g. from "
                "`flowpoint checkpoints <dir>/<job-id>`)") if ended else ""
        msg = f"no running job with the id or name {text!r}{hint}. Running jobs (flowpoint list):\n{listing}"
    raise ConfigurationError(msg)


def running_job_checkpoints(job: str, config: Any = None) -> str:
    """The checkpoint directory (``<state.checkpoints.dir>/<job-id>``) of a running job."""
    entry = running_job(job, config)
    if not entry.last_checkpoint_path:
        msg = (f"job {entry.job_id} ({entry.job_name!r}) has completed no checkpoint yet: its state can be read as of its "
               "first completed checkpoint (execution.checkpointing.interval); try again then")
        raise CheckpointError(msg)
    job_dir, _ = split_uri(str(entry.last_checkpoint_path).rstrip("/"))
    return job_dir


def pin_latest(job_dir: str, options: dict | None = None) -> tuple[CheckpointPin, str]:
    """``(pin, its checkpoint's directory)``: the newest completed checkpoint in ``job_dir``,
    pinned. One that retention deleted meanwhile is let go and the next newest taken."""
    access = CheckpointStorageAccess(job_dir, options)
    access.check_trusted("the checkpoint directory of the job being read", "state_reader(job=...)")
    for _ in range(ATTEMPTS):
        meta = find_latest(job_dir, options)
        if meta is None:
            msg = f"{job_dir} holds no completed checkpoint"
            raise CheckpointError(msg)
        rel = CheckpointStore.chk_dir(meta.checkpoint_id)
        pin = CheckpointPin(access, meta.checkpoint_id)
        time.sleep(SETTLE_S)
        if access.exists(metadata_path(rel)):
            return pin, access.uri(rel)
        pin.release()  # retention took it before the pin: the next one
    msg = f"{job_dir}: each of the last {ATTEMPTS} newest checkpoints was deleted before it could be pinned; try again"
    raise CheckpointError(msg)
