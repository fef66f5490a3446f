"""The local job registry: one JSON file per job under ``<registry dir>/<job-id>.json``.

A job's process writes its entry when the job starts and rewrites it when the job's status
changes or a checkpoint completes; when the job ends the entry is marked terminal (status and
end time) and kept for ``flowpoint list --all`` until it is pruned. Every write goes to a
temporary file in the same directory first and is renamed over the entry (``os.replace``), so
a reader sees the old or the new entry, never half of one.

An entry that says RUNNING but whose process is gone (killed, crashed, the machine rebooted)
is *stale*: readers see it as ``LOST`` and :meth:`JobRegistry.mark_lost` records that.

An entry also records the job's identity for ``flowpoint run --resume``
(``flowpoint.driver.resume``): its ``fingerprint`` (operator uids and max parallelism), and
``resumed_from``, the run whose checkpoint or savepoint it restored. Entries that record a resume
outlive the week of other ended entries (the newest ``KEEP_RESUMES`` are kept), so that a run
resumed by one that finished is never resumed again.

Which directory (the first that applies): the configuration key ``control.registry.dir``,
``$FLOWPOINT_HOME/jobs``, ``~/.flowpoint/jobs``. Before any entry is written or read, the
directory (and ``FLOWPOINT_HOME`` for the default one) is checked: one that another user owns,
can write, or can replace through a parent directory is refused
(:class:`~flowpoint.errors.InsecurePathError` naming it), since an entry says where the CLI
sends the control token.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import tempfile
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from flowpoint import private_files
from flowpoint.clock import now_ms
from flowpoint.errors import FlowpointError
from flowpoint.home import check_home

HOME_VARIABLE = "FLOWPOINT_HOME"
LOST = "LOST"  # the job's process is gone without ending the job
TERMINAL = frozenset(("FINISHED", "FAILED", "CANCELED", LOST))
KEEP_ENDED_MS = 7 * 24 * 3600 * 1000  # ended entries older than a week are pruned
KEEP_ENDED_COUNT = 200  # and never more than this many
KEEP_RESUMES = 1000  # ended entries that record a resume (resumed_from) are kept longer
ARCHIVE_DIR = "archive"  # <registry dir>/archive/<job-id>.json: an ended job's REST answers (control/archive.py)


class JobNotFoundError(FlowpointError):
    """A job id (or prefix) names no job, several jobs, or a job that can no longer be reached."""


def registry_dir(config: Any = None) -> Path:
    """The registry directory: ``control.registry.dir``, else ``$FLOWPOINT_HOME/jobs``, else
    ``~/.flowpoint/jobs``. ``config`` is a :class:`~flowpoint.api.config.Configuration` or None."""
    configured = config.get("control.registry.dir") if config is not None else None
    if configured:
        return Path(os.path.expanduser(str(configured))).absolute()
    home = os.environ.get(HOME_VARIABLE)
    base = Path(os.path.expanduser(home)) if home else Path.home() / ".flowpoint"
    return (base / "jobs").absolute()


def pid_alive(pid: int) -> bool:
    if os.name == "nt":  # os.kill(pid, 0) would terminate it there; assume alive
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process with that pid
        return True
    return True


@dataclass
class JobEntry:
    job_id: str
    job_name: str
    status: str
    start_time_ms: int
    pid: int
    host: str
    endpoint: str | None  # "127.0.0.1:<port>"
    last_checkpoint_id: int | None = None
    last_checkpoint_time_ms: int | None = None
    last_checkpoint_path: str | None = None
    end_time_ms: int | None = None
    updated_ms: int = 0
    fingerprint: str | None = None  # the job's operator uids and max parallelism (flowpoint.driver.resume)
    resumed_from: str | None = None  # the job id whose checkpoint or savepoint this run restored
    resumed_checkpoint_id: int | None = None

    @classmethod
    def from_dict(cls, data: dict) -> JobEntry:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})

    def to_dict(self) -> dict:
        return asdict(self)

    @property
    def ended(self) -> bool:
        return self.status in TERMINAL

    def is_stale(self) -> bool:
        """Not ended, yet its process (on this host) is gone."""
        return not self.ended and self.host == socket.gethostname() and not pid_alive(self.pid)

    def shown_status(self) -> str:
        return LOST if self.is_stale() else self.status


class JobRegistry:
    def __init__(self, directory: str | os.PathLike | None = None):
        self.dir = Path(directory) if directory is not None else registry_dir()

    def path(self, job_id: str) -> Path:
        return self.dir / f"{job_id}.json"

    def check(self) -> None:
        """Refuse (InsecurePathError) a registry directory, or the FLOWPOINT_HOME it is in, that
        another user owns, can write or can replace (what exists of them)."""
        if self.dir == registry_dir():
            check_home()
        hint = f"set control.registry.dir or ${HOME_VARIABLE} to a directory of your own"
        private_files.check_dir(str(self.dir), "job registry directory", hint)

    # -- writing -------------------------------------------------------------------------------

    def write(self, entry: JobEntry) -> None:
        """Write ``entry`` atomically (a temporary file renamed over the old entry)."""
        entry.updated_ms = now_ms()
        try:
            private_files.makedirs(str(self.dir))  # 0700, missing parents too
            self.check()
            fd, tmp = tempfile.mkstemp(prefix=f".{entry.job_id}.", suffix=".tmp", dir=self.dir)
            try:
                with os.fdopen(fd, "w", encoding="utf-8") as f:
                    json.dump(entry.to_dict(), f, indent=1)
                    f.write("\n")
                os.replace(tmp, self.path(entry.job_id))
            except BaseException:
                with contextlib.suppress(OSError):
                    os.unlink(tmp)
                raise
        except OSError as e:
            msg = (
                f"cannot write job registry entry {self.path(entry.job_id)}: {e}; "
                f"set ${HOME_VARIABLE} or control.registry.dir to a writable directory"
            )
            raise FlowpointError(msg) from e

    def remove(self, job_id: str) -> None:
        """Delete a job's entry and its archive."""
        self.check()
        with contextlib.suppress(FileNotFoundError):
            self.path(job_id).unlink()
        with contextlib.suppress(FileNotFoundError):
            (self.dir / ARCHIVE_DIR / f"{job_id}.json").unlink()

    def mark_ended(self, entry: JobEntry, status: str) -> None:
        entry.status = status
        entry.end_time_ms = entry.end_time_ms or now_ms()
        self.write(entry)

    def mark_lost(self, entry: JobEntry) -> None:
        """Record that a stale entry's process is gone (it then shows under ``--all`` only)."""
        self.mark_ended(entry, LOST)

    def prune(self, now: int | None = None) -> None:
        """Delete ended entries older than a week, keeping at most the newest 200; entries that
        record a resume are kept, the newest 1000 of them (what ``--resume`` needs to know)."""
        now = now if now is not None else now_ms()
        ended = sorted((e for e in self.entries() if e.ended), key=lambda e: e.end_time_ms or 0, reverse=True)
        others = [e for e in ended if not e.resumed_from]
        resumes = [e for e in ended if e.resumed_from]
        for i, e in enumerate(others):
            if i >= KEEP_ENDED_COUNT or now - (e.end_time_ms or 0) > KEEP_ENDED_MS:
                self.remove(e.job_id)
        for e in resumes[KEEP_RESUMES:]:
            self.remove(e.job_id)

    # -- reading -------------------------------------------------------------------------------

    def read(self, job_id: str) -> JobEntry | None:
        self.check()
        return self._load(job_id)

    def _load(self, job_id: str) -> JobEntry | None:
        try:
            text = self.path(job_id).read_text(encoding="utf-8")
            return JobEntry.from_dict(json.loads(text))
        except (FileNotFoundError, ValueError, TypeError):
            return None

    def entries(self) -> list[JobEntry]:
        """Every readable entry, oldest start first (unreadable files are skipped)."""
        self.check()
        if not self.dir.is_dir():
            return []
        out = []
        for p in self.dir.glob("*.json"):
            entry = self._load(p.stem)
            if entry is not None:
                out.append(entry)
        return sorted(out, key=lambda e: (e.start_time_ms, e.job_id))

    def clean_stale(self) -> list[JobEntry]:
        """Mark entries of dead processes LOST; returns them."""
        stale = [e for e in self.entries() if e.is_stale()]
        for e in stale:
            self.mark_lost(e)
        return stale

    def resolve(self, job_id: str) -> JobEntry:
        """The running job whose id is ``job_id`` or starts with it.

        Raises :class:`JobNotFoundError` saying what to do when no job matches, several running
        jobs match, the job has ended, or its process is gone.
        """
        prefix = job_id.strip().lower()
        hint = "run `flowpoint list` to see running jobs and their ids"
        if not prefix:
            msg = f"no job id given; {hint}"
            raise JobNotFoundError(msg)
        matches = [e for e in self.entries() if e.job_id.startswith(prefix)]
        if not matches:
            msg = f"no job with id {job_id!r} in the job registry {self.dir}; {hint}"
            raise JobNotFoundError(msg)
        running = [e for e in matches if not e.ended and not e.is_stale()]
        if len(running) == 1:
            return running[0]
        if len(running) > 1:
            listed = ", ".join(f"{e.job_id} ({e.job_name})" for e in running)
            msg = f"job id {job_id!r} is ambiguous: it starts {len(running)} running jobs ({listed}); give more characters of the id"
            raise JobNotFoundError(msg)
        e = max(matches, key=lambda m: m.start_time_ms)
        if e.is_stale():
            self.mark_lost(e)
            msg = (
                f"job {e.job_id} ({e.job_name!r}) is no longer running: its process {e.pid} on {e.host} is gone "
                f"(it was {e.status}); {hint}"
            )
            raise JobNotFoundError(msg)
        msg = f"job {e.job_id} ({e.job_name!r}) has ended ({e.status}); {hint}"
        raise JobNotFoundError(msg)
