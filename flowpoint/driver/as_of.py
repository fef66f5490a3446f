"""``flowpoint run --resume --as-of TIME`` (``execution.state-recovery.as-of``): restore the job's
newest retained checkpoint that completed at or before TIME, and say which (issue 30, item 5).

The checkpoints considered are those of every run of this job under ``state.checkpoints.dir``
(its name, and its fingerprint or state that fits it, as ``--resume`` judges them:
:func:`flowpoint.driver.resume.judge_runs`) that is not running now, including runs a later run
already resumed: going back in time is the point. ``--resume JOB-ID --as-of TIME`` looks in that
run only. A checkpoint's time is its ``_metadata``'s completion time (``flowpoint checkpoints``
lists them).

A checkpoint whose ``_metadata`` does not verify has no known time. When one lies between the
chosen checkpoint and the next newer one of the same run (it may be the one asked for), the
restore fails naming it, unless ``--resume-fallback``, which restores the newest that verifies.
As with ``-s``, output the job wrote after that checkpoint is written again (exactly-once sinks
roll back to it only where the sink itself can: a file sink's part files of later checkpoints
stay).
"""

from __future__ import annotations

import dataclasses
import logging
import re
from datetime import datetime
from typing import TYPE_CHECKING

from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.metadata import read_metadata
from flowpoint.driver.resume import Restored, Run, judge_runs, restore_run, run_by_id, scan_runs
from flowpoint.errors import CheckpointError, ConfigurationError, CorruptStateError

if TYPE_CHECKING:
    from flowpoint.driver.registry import JobRegistry
    from flowpoint.driver.resume import Plan
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")

FORMATS = "'2026-11-26 10:00', '2026-11-26T10:00:30+01:00', '2026-11-26T09:00Z' or milliseconds since the epoch"


def parse_as_of(value: object) -> int:
    """Milliseconds since the epoch of an ``--as-of`` time: ISO 8601 (a space or ``T`` between
    date and time; no offset: this machine's time zone), or milliseconds since the epoch. A time
    given to the day, minute or second means its end (``10:00`` is up to 10:00:59.999), as
    `flowpoint checkpoints` shows completion times to the second: a checkpoint listed as
    completed at 10:00:07 counts as of ``10:00:07``."""
    text = str(value).strip()
    if re.fullmatch(r"\d{10,}", text):
        return int(text)
    try:
        when = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
    except ValueError:
        msg = f"--as-of (execution.state-recovery.as-of): {text!r} is not a time; give one like {FORMATS}"
        raise ConfigurationError(msg) from None
    if when.tzinfo is None:
        when = when.astimezone()  # this machine's time zone, as `flowpoint checkpoints` shows times
    return int(when.timestamp() * 1000) + _precision_ms(text) - 1


def _precision_ms(text: str) -> int:
    """The length of the unit the time is given to: a day, a minute, a second or a millisecond."""
    clock = re.search(r"[T ](\d{2}):(\d{2})(:\d{2})?(\.\d+)?", text)
    if clock is None:
        return 24 * 3600 * 1000
    if clock.group(4):
        return 1
    return 1000 if clock.group(3) else 60_000


def shown(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


def restore_as_of(root: str, options: dict, graph: JobGraph, registry: JobRegistry, by_id: str | None,
                  as_of_ms: int, plan: Plan, fallback: bool) -> Restored:
    runs = scan_runs(root, options, registry)
    if by_id is not None:
        runs = [run_by_id(runs, by_id.strip().lower(), root, graph, registry)]
    else:
        named = judge_runs(runs, graph, registry, superseded=False)
        runs = [r for r in named if not r.why_not]
        if not runs:
            listing = "\n".join(r.describe() for r in named) or f"  (no retained checkpoint of job {graph.job_name!r})"
            msg = f"--resume --as-of: no run of job {graph.job_name!r} under {root} can be restored:\n{listing}"
            raise CheckpointError(msg)
    times, unknown = _checkpoint_times(runs, options)
    eligible = sorted(((t, r, c) for t, r, c in times if t <= as_of_ms), key=lambda x: (x[0], x[2]), reverse=True)
    if not eligible:
        oldest = min(times, key=lambda x: x[0], default=None)
        first = (f"; the oldest retained one is chk-{oldest[2]} of job {oldest[1].job_id}, completed {shown(oldest[0])} "
                 f"(`flowpoint checkpoints {oldest[1].uri}` lists that run's checkpoints)") if oldest else ""
        msg = f"--resume --as-of {shown(as_of_ms)}: no retained checkpoint of job {graph.job_name!r} under {root} completed at or before then{first}"
        raise CheckpointError(msg)
    completed, run, chosen = eligible[0]
    later = [c for t, r, c in times if r is run and t > as_of_ms]
    bound = min(later, default=None)
    between = [(c, e) for r, c, e in unknown if r is run and c > chosen and (bound is None or c < bound)]
    if between and not fallback:
        names = ", ".join(f"chk-{c} ({e})" for c, e in between)
        msg = (f"--resume --as-of {shown(as_of_ms)}: the _metadata of {names} of job {run.job_id} does not verify, so whether it "
               f"completed at or before then is unknown; chk-{chosen}, completed {shown(completed)}, is the newest known to have. "
               "Restore it with -s, or run with --resume-fallback to restore the newest that verifies")
        raise CorruptStateError(msg)
    older = [c for c in run.checkpoints if c <= chosen and c not in later]
    restored = restore_run(dataclasses.replace(run, checkpoints=older), options, plan, fallback)
    meta = restored.meta
    restored.why = (f"completed {shown(meta.completed_time_ms)}, the newest retained checkpoint at or before "
                    f"{shown(as_of_ms)} (--as-of)")
    log.info("--resume --as-of: checkpoint %d of job %s, %s", meta.checkpoint_id, meta.job_id, restored.why)
    return restored


def _checkpoint_times(runs: list[Run], options: dict) -> tuple[list[tuple[int, Run, int]], list[tuple[Run, int, Exception]]]:
    """``(completion ms, run, checkpoint id)`` of every retained checkpoint of ``runs`` whose
    ``_metadata`` reads, and ``(run, id, error)`` of those whose does not."""
    times, unknown = [], []
    for run in runs:
        job = CheckpointStorageAccess(run.uri, options)
        for checkpoint_id in run.checkpoints:
            try:
                meta = read_metadata(job, f"chk-{checkpoint_id}")
            except CheckpointError as e:
                unknown.append((run, checkpoint_id, e))
                continue
            times.append((int(meta.completed_time_ms or 0), run, checkpoint_id))
    return times, unknown
