"""What the dashboard's browser test (tests/test_dashboard.py) and the screenshot script
(docs/images/capture.py) share: start tests/dashboard_job.py and ``flowpoint ui`` as processes
of their own under one FLOWPOINT_HOME, and launch Debian's chromium through Playwright.

Nothing is downloaded: Playwright drives ``/usr/bin/chromium`` (``bash
scripts/install-test-deps.sh`` installs it), headless, with the network features that would
reach out (component updates, sync, QUIC, background requests) off.
"""

from __future__ import annotations

import os
import queue
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
JOB_SCRIPT = Path(__file__).resolve().with_name("dashboard_job.py")
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]
URL = re.compile(r"(http://127\.0\.0\.1:\d+/\?token=[A-Za-z0-9_\-.~%]+)")


def browser_unavailable() -> str | None:
    """Why the browser tests cannot run here, or None."""
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "playwright is not installed: pip install -e '.[test]'"
    if not (os.path.exists(CHROMIUM) or shutil.which("chromium")):
        return "chromium is not installed: bash scripts/install-test-deps.sh (Debian's chromium package)"
    return None


def require_browser() -> None:
    """Skip a browser test where chromium or playwright is missing, saying what to install; under
    CI (``CI`` set) fail instead: a CI run must not pass without its browser tests."""
    import pytest

    reason = browser_unavailable()
    if reason is None:
        return
    if os.environ.get("CI"):
        pytest.fail(f"{reason} (CI runs the browser tests: the README's test command installs what they need)")
    pytest.skip(reason)


def launch_browser(playwright: Any) -> Any:
    executable = CHROMIUM if os.path.exists(CHROMIUM) else shutil.which("chromium")
    return playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def child_env(home: Path) -> dict[str, str]:
    """This interpreter's environment with FLOWPOINT_HOME and this checkout first on the path."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, FLOWPOINT_HOME=str(home), PYTHONPATH=path, PYTHONUNBUFFERED="1")


def start_job(home: Path, workdir: Path, name: str, rate: float = 100, fail_at: int = 150) -> subprocess.Popen:
    """tests/dashboard_job.py under ``flowpoint run`` on local[2] (no task retries: the injected
    failure restarts the job); its output goes to files in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[2]", str(JOB_SCRIPT), name, str(workdir), str(rate), str(fail_at)]
    return subprocess.Popen(cmd, stdout=open(workdir / "job.out", "w"), stderr=open(workdir / "job.err", "w"),
                            env=child_env(home), cwd=str(workdir))


class UiServer:
    """``flowpoint ui --port <free port>`` in a process of its own; ``url`` is the address it
    prints (with the token that signs a browser in)."""

    def __init__(self, home: Path, log: Path, timeout: float = 60):
        port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "flowpoint.cli", "ui", "--port", str(port)],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=child_env(home), cwd=str(REPO))
        self.lines: queue.Queue[str] = queue.Queue()
        self.log = log
        threading.Thread(target=self._read, daemon=True).start()
        deadline = time.monotonic() + timeout
        seen = []
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=0.5)
            except queue.Empty:
                if self.proc.poll() is not None:
                    break
                continue
            seen.append(line)
            m = URL.search(line)
            if m:
                self.url = m.group(1)
                self.base = self.url.split("/?", 1)[0]
                return
        self.stop()
        msg = f"flowpoint ui printed no URL within {timeout} s (exit {self.proc.returncode}): {''.join(seen)[-3000:]}"
        raise AssertionError(msg)

    def _read(self) -> None:
        with open(self.log, "w") as out:
            for line in self.proc.stdout:
                out.write(line)
                out.flush()
                self.lines.put(line)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=20)


def stop_job(home: Path, job_id: str | None, proc: subprocess.Popen) -> None:
    """Cancel the job (if it still runs) and wait for its process; kill it as a last resort."""
    if proc.poll() is None and job_id:
        subprocess.run([sys.executable, "-m", "flowpoint.cli", "cancel", job_id], capture_output=True,
                       timeout=120, env=child_env(home), cwd=str(REPO), check=False)
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def wait_for(predicate: Any, timeout: float, what: str, interval: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    msg = f"timed out after {timeout} s waiting for {what}"
    raise AssertionError(msg)
