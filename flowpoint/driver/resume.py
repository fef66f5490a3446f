"""Where a new run starts: ``-s <path>``, or ``--resume`` (issue 10, case 4; docs/checkpoints.md).

``--resume`` (``execution.state-recovery.from-latest``) restores the newest retained checkpoint of
*this job's* previous run under ``state.checkpoints.dir``. A job is known by its name and its
:func:`job_fingerprint` (its operators' uids and max parallelism, from the job graph), which every
run records in its job registry entry (``flowpoint.driver.registry``), together with the run
whose checkpoint or savepoint it restored (``resumed_from``). The previous run is the one run that:

- has a checkpoint ``chk-<n>`` with a ``_metadata`` under the checkpoints directory, the newest
  readable one naming this job's name;
- has this job's fingerprint (a run the registry does not know: its checkpoint's stateful uids are
  all in this job, with the same max parallelism);
- is not running now;
- has not been resumed by a later run that finished, completed a checkpoint of its own, or is
  running (its state would be restored twice; the later run is the one to resume).

Only directories safe from other users are considered: on a local filesystem the checkpoints
directory and every run directory in it must belong to the user and be writable by no one else,
below directories no one else can replace (``security.trust-shared-directories: true`` lifts
this); any other is refused with :class:`~flowpoint.errors.InsecurePathError` naming it, since
whoever can write a run directory can make the resumed job run code.

No such run, or several, is refused with the runs of that name listed (job id, name, start time,
latest checkpoint, why each was not taken). ``--resume <job-id>``
(``execution.state-recovery.from-job``, an id or a unique prefix) names the run instead.

The chosen run's checkpoints are tried newest first. One that does not verify
(:class:`~flowpoint.errors.CorruptStateError`) fails the restore naming the file and the previous
retained checkpoint with the command that restores it; with ``--resume-fallback``
(``execution.state-recovery.fallback-on-corruption``) the next older one is tried instead, and the
newest that verifies is restored.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING

from flowpoint.checkpoint.directory import CHK_PATTERN, resolve_restore_path
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.metadata import read_metadata
from flowpoint.driver.registry import JobRegistry
from flowpoint.errors import CheckpointError, CorruptStateError

if TYPE_CHECKING:
    from flowpoint.checkpoint.metadata import CheckpointMetadata
    from flowpoint.driver.registry import JobEntry, JobRegistry
    from flowpoint.driver.restore import RestoredJob
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")

JOB_ID = re.compile(r"^[0-9a-f]{32}$")
SETTING = "state.checkpoints.dir"
FALLBACK_FLAG = "--resume-fallback (execution.state-recovery.fallback-on-corruption: true)"

Plan = Callable[[str, "CheckpointMetadata"], "RestoredJob"]


def job_fingerprint(graph: JobGraph) -> str:
    """16 hex characters identifying a job's state layout: SHA-256 over its operators' uids and,
    for keyed operators, their max parallelism (what a restore maps state by)."""
    items = sorted([n.uid, n.max_parallelism if n.keyed else None] for n in graph.nodes.values())
    return hashlib.sha256(json.dumps(items, separators=(",", ":")).encode()).hexdigest()[:16]


def _time(ms: int | None) -> str:
    if not ms:
        return "unknown"
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


@dataclass
class Run:
    """A previous run found under the checkpoints directory."""

    job_id: str
    uri: str  # its job directory
    checkpoints: list[int]  # ids of its chk-<n> directories that have a _metadata, newest first
    latest: CheckpointMetadata | None  # the newest readable one (None: none is readable)
    entry: JobEntry | None  # its job registry entry
    why_not: str = ""  # why --resume does not take it ("" : it is a candidate)
    identity: str = ""  # "same fingerprint", "not in the job registry; its state fits this job", ...

    @property
    def name(self) -> str:
        if self.latest is not None:
            return self.latest.job_name
        return self.entry.job_name if self.entry is not None else "?"

    def chk_uri(self, checkpoint_id: int) -> str:
        return f"{self.uri.rstrip('/')}/chk-{checkpoint_id}"

    def describe(self) -> str:
        start = _time(self.entry.start_time_ms) if self.entry is not None else "unknown (not in the job registry)"
        if self.latest is not None:
            latest = f"chk-{self.latest.checkpoint_id} completed {_time(self.latest.completed_time_ms)}"
        else:
            latest = f"chk-{self.checkpoints[0]} (its _metadata does not verify)"
        status = f", {self.entry.shown_status()}" if self.entry is not None else ""
        why = f": {self.why_not}" if self.why_not else (f" ({self.identity})" if self.identity else "")
        return f"  {self.job_id}  {self.name!r}  started {start}{status}  latest checkpoint {latest}  {self.uri}{why}"


@dataclass
class Restored:
    """What a new run restored: the job directory (or savepoint directory) its files are relative
    to, the metadata, the planned restore, and the run it came from."""

    job_dir_uri: str
    meta: CheckpointMetadata
    restore: RestoredJob
    skipped: list[str] = field(default_factory=list)  # checkpoints that did not verify (fallback)
    why: str = ""  # why this checkpoint, when the user asked for one by time (--as-of)


# -- choosing the run ----------------------------------------------------------------------------


def scan_runs(root: str, options: dict, registry: JobRegistry) -> list[Run]:
    """Every job directory under ``root`` with at least one ``chk-<n>/_metadata``, oldest first."""
    access = CheckpointStorageAccess(root, options)
    access.check_trusted("checkpoint directory", SETTING)
    if not access.exists(""):
        return []
    runs = []
    for name, is_dir, _ in access.list_dir(""):
        if not is_dir or not JOB_ID.match(name):
            continue
        job = CheckpointStorageAccess(access.uri(name), options)
        job.check_trusted("run directory", SETTING)
        ids = sorted(
            (int(m.group(1)) for n, d, _ in job.list_dir("") if d and (m := CHK_PATTERN.match(n))),
            reverse=True,
        )
        ids = [i for i in ids if job.exists(f"chk-{i}/_metadata")]  # written last: others are in progress or aborted
        if not ids:
            continue
        latest = None
        for i in ids:
            try:
                latest = read_metadata(job, f"chk-{i}")
                break
            except CheckpointError as e:  # corrupt: the restore says so; the listing shows the next readable one
                log.debug("--resume: %s", e)
        runs.append(Run(name, job.uri(), ids, latest, registry.read(name)))
    return sorted(runs, key=lambda r: (r.entry.start_time_ms if r.entry else 0, r.latest.completed_time_ms if r.latest else 0))


def _fits(meta: CheckpointMetadata, graph: JobGraph) -> bool:
    """A checkpoint of a run the registry does not know: its state fits ``graph`` by uid and max
    parallelism (a weaker identity than the fingerprint)."""
    nodes = {n.uid: n for n in graph.nodes.values()}
    sources = {n.uid for n in graph.sources()}
    for op in meta.operators:
        node = nodes.get(op.uid)
        if node is None or not node.keyed or node.max_parallelism != op.max_parallelism:
            return False
    return all(sp.source_uid in sources for sp in meta.sources)


def _unknown(run: Run) -> str:
    return "not in the job registry" if run.entry is None else "no fingerprint in its job registry entry"


def _superseded_by(run: Run, entries: list[JobEntry], with_checkpoints: set[str]) -> str:
    """Why ``run`` must not be resumed again: a later run restored its state and then finished,
    completed a checkpoint, or is running. "" if none did."""
    for e in entries:
        if e.resumed_from != run.job_id:
            continue
        status = e.shown_status()
        if status == "FINISHED":
            return f"already resumed by job {e.job_id}, which finished"
        if e.job_id in with_checkpoints:
            return f"already resumed by job {e.job_id} ({status}), which has checkpoints of its own: resume that one"
        if e.last_checkpoint_id is not None:  # it completed some, and none is left (killed while it finished)
            return (
                f"already resumed by job {e.job_id} ({status}), which completed checkpoints of its own that no longer "
                "exist (a job deletes them when it finishes): restoring this run again would apply its state twice"
            )
        if not e.ended and status != "LOST":
            return f"being resumed by job {e.job_id}, which is running"
    return ""


def judge_runs(runs: list[Run], graph: JobGraph, registry: JobRegistry, superseded: bool = True) -> list[Run]:
    """The runs of this job's name, each with ``why_not`` set when it is not this job's previous
    run: another job (fingerprint, or state that does not fit), running now, or (``superseded``)
    already resumed by a later run."""
    fingerprint = job_fingerprint(graph)
    entries = registry.entries()
    with_checkpoints = {r.job_id for r in runs}
    named = [r for r in runs if r.name == graph.job_name]
    for r in named:
        if r.entry is not None and r.entry.fingerprint:
            if r.entry.fingerprint != fingerprint:
                r.why_not = f"another job of this name (fingerprint {r.entry.fingerprint}, this job's is {fingerprint}: other operator uids or max parallelism)"
                continue
            r.identity = "same name and fingerprint"
        elif r.latest is None or not _fits(r.latest, graph):
            r.why_not = f"{_unknown(r)}, and its state does not fit this job's operators"
            continue
        else:
            r.identity = f"{_unknown(r)}; its state fits this job's operators"
        if r.entry is not None and not r.entry.ended and not r.entry.is_stale():
            r.why_not = f"running now (process {r.entry.pid} on {r.entry.host})"
            continue
        if superseded:
            r.why_not = _superseded_by(r, entries, with_checkpoints)
    return named


def choose_run(root: str, options: dict, graph: JobGraph, registry: JobRegistry, by_id: str | None = None) -> Run:
    runs = scan_runs(root, options, registry)
    if by_id is not None:
        return run_by_id(runs, by_id.strip().lower(), root, graph, registry)
    named = judge_runs(runs, graph, registry)
    candidates = [r for r in named if not r.why_not]
    listing = "\n".join(r.describe() for r in named)
    explicit = "pass --resume <job-id> (or -s <chk dir>) to restore one of them, or run without --resume to start from the beginning"
    if len(candidates) == 1:
        chosen = candidates[0]
        log.info("--resume: job %s (%s) is the previous run of job %r", chosen.job_id, chosen.identity, graph.job_name)
        return chosen
    if candidates:
        msg = (
            f"--resume: {len(candidates)} previous runs of job {graph.job_name!r} under {root} could be resumed, "
            f"and flowpoint does not guess which:\n{listing}\nName one with --resume <job-id>, or -s <its chk-<n> directory>"
        )
        raise CheckpointError(msg)
    if not named:
        others = sorted({r.name for r in runs})
        seen = f" (retained checkpoints of jobs named {', '.join(map(repr, others[:5]))}{', ...' if len(others) > 5 else ''})" if others else ""
        msg = (
            f"--resume: no retained checkpoint of job {graph.job_name!r} under {root}{seen}; run without --resume to "
            "start from the beginning, or name a run with --resume <job-id>"
        )
        raise CheckpointError(msg)
    msg = (
        f"--resume: none of the runs of job {graph.job_name!r} under {root} is this job's previous run that can be resumed:\n"
        f"{listing}\nIf one of them is (e.g. its operators' uids changed), {explicit}"
    )
    raise CheckpointError(msg)


def run_by_id(runs: list[Run], prefix: str, root: str, graph: JobGraph, registry: JobRegistry) -> Run:
    matches = [r for r in runs if r.job_id.startswith(prefix)] if prefix else []
    if len(matches) == 1:
        run = matches[0]
        why = _superseded_by(run, registry.entries(), {r.job_id for r in runs})
        if why:
            log.warning("--resume %s: job %s was %s; restoring it as asked", prefix, run.job_id, why)
        if run.name != graph.job_name:
            log.warning("--resume %s: job %s is named %r, this job %r; restoring it as asked", prefix, run.job_id, run.name, graph.job_name)
        return run
    listing = "\n".join(r.describe() for r in runs if r.name == graph.job_name) or "  (none of this job's name)"
    if matches:
        shown = "\n".join(r.describe() for r in matches)
        msg = f"--resume {prefix}: the id prefix names {len(matches)} runs under {root}:\n{shown}\ngive more characters of the id"
    else:
        msg = f"--resume {prefix}: no run with this id has a retained checkpoint under {root}. Runs of job {graph.job_name!r} there:\n{listing}"
    raise CheckpointError(msg)


# -- restoring it, falling back past checkpoints that do not verify ------------------------------


def restore_run(run: Run, options: dict, plan: Plan, fallback: bool) -> Restored:
    skipped: list[str] = []
    for n, checkpoint_id in enumerate(run.checkpoints):
        try:
            access, meta = resolve_restore_path(run.chk_uri(checkpoint_id), options, SETTING)
            restored = Restored(access.uri(), meta, plan(access.uri(), meta), skipped)
        except CorruptStateError as e:
            older = run.checkpoints[n + 1 :]
            if not fallback:
                raise CorruptStateError(_corrupt_message(run, checkpoint_id, older, e), path=e.path) from e
            log.warning("--resume: checkpoint %d of job %s does not verify (%s)%s", checkpoint_id, run.job_id, e, "; trying the previous one" if older else "")
            skipped.append(f"chk-{checkpoint_id}: {e}")
            continue
        if skipped:
            log.warning("--resume: restoring checkpoint %d of job %s, the newest that verifies (%d newer did not)", checkpoint_id, run.job_id, len(skipped))
        return restored
    msg = f"--resume: no retained checkpoint of job {run.job_id} ({run.name!r}) in {run.uri} verifies:\n  " + "\n  ".join(skipped)
    raise CorruptStateError(msg)


def _corrupt_message(run: Run, checkpoint_id: int, older: list[int], error: CorruptStateError) -> str:
    head = f"--resume: checkpoint {checkpoint_id} of job {run.job_id} ({run.name!r}) does not verify: {error}"
    if not older:
        return (
            f"{head}\nJob {run.job_id} has no other retained checkpoint (state.checkpoints.num-retained keeps more); "
            "restore a savepoint with -s, or run without --resume to start from the beginning"
        )
    previous = run.chk_uri(older[0])
    return (
        f"{head}\nThe previous retained checkpoint of job {run.job_id} is chk-{older[0]}: restore it with "
        f"`flowpoint run -s {previous} <job.py>` (`flowpoint checkpoints {run.uri}` lists them all), or run with "
        f"{FALLBACK_FLAG} to restore the newest retained checkpoint that verifies"
    )
