"""``flowpoint run -d``: run the job in a background process of its own session, print its id
once the job is RUNNING (Flink's ``Job has been submitted with JobID <id>``) and return. The
job's output goes to a log file under ``$FLOWPOINT_HOME/logs`` (``~/.flowpoint/logs``).

Only the user reads that log, whatever the umask: ``FLOWPOINT_HOME`` and ``logs/`` are created
0700 and the log 0600 (an existing home or ``logs/`` open to others is refused, naming it and
``chmod 700``). The log holds the job's output, its dashboard address among it, which carries
no token (``flowpoint list`` prints the signed-in link to the owner)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from flowpoint import private_files
from flowpoint.driver.registry import JobRegistry, registry_dir
from flowpoint.errors import FlowpointError
from flowpoint.home import HOME_VARIABLE, home_dir

SUBMIT_TIMEOUT_S = 600.0  # a job's Spark session may take long to start on a busy cluster
POLL_S = 0.2
SCHEDULED = ("CREATED", "INITIALIZING")


def without_detached(argv: list[str]) -> list[str]:
    """The ``run`` command line without its ``-d``/``--detached``: the first such word is the
    option (a ``-d`` after the script belongs to the script and comes later)."""
    out = list(argv)
    for i, word in enumerate(out):
        if word in ("-d", "--detached"):
            del out[i]
            break
    return out


def log_path() -> Path:
    """A new log's path in ``$FLOWPOINT_HOME/logs`` (created 0700, checked)."""
    logs = home_dir("logs", "the log directory")
    return logs / f"flowpoint-run-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"


def open_log(path: Path) -> int:
    """A new file at ``path``, mode 0600 whatever the umask, for writing at its end (never an
    existing file, nor through a symbolic link)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | getattr(os, "O_NOFOLLOW", 0)
    fd = os.open(path, flags, private_files.FILE_MODE)
    if private_files.POSIX:
        os.fchmod(fd, private_files.FILE_MODE)
    return fd


def run_detached(argv: list[str], settings: dict, timeout: float = SUBMIT_TIMEOUT_S) -> int:
    """Start ``flowpoint run`` (without ``-d``) as a child in a new session and wait for its job
    to be RUNNING in the registry; 0 once it is (or ended already), 1 if the child exits first."""
    log = log_path()
    registry = JobRegistry(registry_dir(settings))
    cmd = [sys.executable, "-m", "flowpoint.cli", *without_detached(argv)]
    try:
        fd = open_log(log)
    except OSError as e:
        msg = f"cannot create the job's log {log}: {e.strerror or e}; set {HOME_VARIABLE} to a directory you can write"
        raise FlowpointError(msg) from e
    with os.fdopen(fd, "ab") as out:
        child = subprocess.Popen(  # noqa: S603 - our own CLI with the user's arguments
            cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True, close_fds=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        entry = next((e for e in registry.entries() if e.pid == child.pid), None)
        if entry is not None and entry.status not in SCHEDULED:
            print(f"Job has been submitted with JobID {entry.job_id}")
            print(f"Its output goes to {log}; follow it with `flowpoint list` (status {entry.status}), which prints its dashboard's link.")
            return 0
        code = child.poll()
        if code is not None:
            tail = _tail(log)
            msg = f"the job's process exited ({code}) before its job was running; its output ({log}):\n{tail}"
            raise FlowpointError(msg)
        time.sleep(POLL_S)
    msg = f"the job's process {child.pid} started no running job within {timeout:.0f} s (it goes on); its output is in {log}"
    raise FlowpointError(msg)


def _tail(path: Path, lines: int = 30) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
