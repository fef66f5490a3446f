"""The background shard: in a whole suite, the tests of :data:`MODULES` run in a pytest process
of their own, beside the session, and the session reports each of them as its own test.

They are the end-to-end tests on a cluster (a standalone master with two workers, local-cluster
executors, workers killed mid-run) and two modules of jobs run by the CLI, killed and resumed. Their Spark applications leave the machine's cores idle a
third of the time or more, as the rest of the suite's jobs do (tests/cpu_log.py's accounting:
over a whole run the suite keeps 2 cores 61-76% busy after its first 10 minutes), and on 2 cores
they took some 7 of the suite's 40 minutes one after the other.

How (tests/conftest.py):

- at collection, when the compatibility runs are scheduled (a whole suite: tests/
  compat_background.py) and some of these modules' tests are selected, their tests move to the
  end of the session, before the tests that read the compatibility runs;
- the compatibility runs' low-priority thread (``nice`` 5), once its runs are done, runs
  ``python -m pytest <those test ids>`` from the checkout's root with a plugin of its own
  (tests/shard_report.py) that writes each test report as a JSON line as soon as it is made;
- when the session reaches such a test, it does not run it: it waits for the child's reports of
  that test and reports them as its own (pass, fail with the child's traceback, skip), so the
  terminal, ``-ra`` and junit xml show every test as if run here. A test the child never reported
  (the child crashed, hung past :data:`TIMEOUT`, or could not start) fails, with the child's
  exit code and the end of its output.

The child is a test session like this one (its own Spark, ``$FLOWPOINT_HOME`` and pytest temp
directory), with the same ``FLOWPOINT_TEST_*`` settings. Run alone (``pytest tests/test_multihost.py``)
or in the fast loop, these modules run in the session as any other.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

MODULES = (
    # every module that starts the standalone cluster, and the largest on local-cluster
    "test_multihost", "test_continuous_failures", "test_cluster", "test_cluster_defaults", "test_standalone_cluster", "test_control_security",
    # jobs run with `flowpoint run` in processes of their own, killed and resumed, mostly waiting
    "test_cli_flink", "test_lakehouse_resume",
)
TIMEOUT = 2400  # seconds the whole shard may take at a low priority beside the suite
REPO = Path(__file__).resolve().parents[1]
# what belongs to this session alone: the child makes its own (conftest.py), or must not inherit
NOT_INHERITED = ("FLOWPOINT_HOME", "FLOWPOINT_TEST_CPU_LOG", "PYTEST_ADDOPTS", "PYTEST_CURRENT_TEST", "PYTEST_XDIST_WORKER")


def module_of(item) -> str:
    return item.module.__name__.rpartition(".")[2]


def items_of(items: list) -> list:
    return [i for i in items if module_of(i) in MODULES]


class ShardRun:
    """The child session over ``nodeids`` and its reports as they come."""

    def __init__(self, nodeids: list[str], root: Path) -> None:
        self.nodeids = list(nodeids)
        self.root = root
        self.reports_path = root / "shard-reports.jsonl"
        self.log_path = root / "shard-output.txt"
        self.started = threading.Event()
        self.ended = threading.Event()
        self.returncode: int | None = None
        self.failure = ""  # why the child did not run (it could not start, it timed out)
        self._proc: subprocess.Popen | None = None
        self._stopping = False
        self._offset = 0
        self._by_nodeid: dict[str, list[dict]] = {}
        self._lock = threading.Lock()

    def command(self) -> list[str]:
        return [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "shard_report", "-o", "addopts=-ra --durations=20",
                f"--basetemp={self.root / 'basetemp'}", "-q", *self.nodeids]

    def env(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in NOT_INHERITED}
        env["PYTHONPATH"] = os.pathsep.join([str(REPO), str(REPO / "tests")])
        env["FLOWPOINT_SHARD_REPORTS"] = str(self.reports_path)
        env["FLOWPOINT_TEST_SHARD"] = "1"  # conftest: another user made for the suite is the parent's to remove
        return env

    def run(self) -> None:
        """Run the child to its end (in the background thread)."""
        self.started.set()
        try:
            with open(self.log_path, "w", encoding="utf-8") as log:
                if self._stopping:
                    self.failure = "the session ended before the background shard started"
                    return
                proc = self._proc = subprocess.Popen(self.command(), cwd=REPO, env=self.env(), stdout=log, stderr=subprocess.STDOUT,
                                                     start_new_session=True)
                try:
                    self.returncode = proc.wait(timeout=TIMEOUT)
                except subprocess.TimeoutExpired:
                    self.failure = f"the background shard was still running after {TIMEOUT} s and was stopped"
                    self.returncode = _interrupt(proc)
        except OSError as e:
            self.failure = f"the background shard could not start: {e}"
        finally:
            self.ended.set()

    def stop(self) -> None:
        """The session ends: a child still running is killed (an interrupted session), one not
        started never starts."""
        self._stopping = True
        proc = self._proc
        if proc is not None and proc.poll() is None:
            _interrupt(proc)

    def reports(self, nodeid: str, wait: float = TIMEOUT + 600) -> list[dict]:
        """The child's serialized reports of ``nodeid`` (setup, call, teardown), waiting until
        its teardown report is in or the child ended; [] when it never reported the test."""
        deadline = time.monotonic() + wait
        while True:
            ended = self.ended.is_set()
            got = self._read().get(nodeid, [])
            if any(r.get("when") == "teardown" for r in got) or ended or time.monotonic() > deadline:
                return got
            self.ended.wait(0.5)

    def _read(self) -> dict[str, list[dict]]:
        with self._lock:
            try:
                with open(self.reports_path, encoding="utf-8") as f:
                    f.seek(self._offset)
                    chunk = f.read()
            except FileNotFoundError:
                return self._by_nodeid
            end = chunk.rfind("\n") + 1  # a line the child is still writing waits for the next read
            self._offset += len(chunk[:end].encode("utf-8"))
            for line in chunk[:end].splitlines():
                data = json.loads(line)
                self._by_nodeid.setdefault(data["nodeid"], []).append(data)
            return self._by_nodeid

    def output_tail(self, chars: int = 6000) -> str:
        try:
            return self.log_path.read_text(encoding="utf-8", errors="replace")[-chars:]
        except OSError as e:
            return f"(no output: {e})"


def _interrupt(proc: subprocess.Popen, grace: float = 60) -> int:
    """Stop the child as Ctrl-C would (its fixtures stop the clusters and brokers they started),
    then, after ``grace`` seconds, kill whatever of its process group is left."""
    try:
        proc.send_signal(signal.SIGINT)
        return proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)  # what outlived its parent (a Spark JVM)


def report_in_session(item, shard: ShardRun) -> None:
    """Report ``item`` from the child's reports of it (the module doc), or fail it saying why
    there are none."""
    from _pytest.reports import TestReport

    hook = item.ihook
    hook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    got = shard.reports(item.nodeid)
    if got:
        for data in got:
            report = item.config.hook.pytest_report_from_serializable(config=item.config, data=data)
            hook.pytest_runtest_logreport(report=report)
    else:
        why = shard.failure or f"the background shard ended (exit code {shard.returncode}) without reporting this test"
        text = f"{why}; `{' '.join(shard.command()[1:6])} ...` wrote:\n{shard.output_tail()}"
        for when, outcome in (("setup", "passed"), ("call", "failed"), ("teardown", "passed")):
            longrepr = text if outcome == "failed" else None
            hook.pytest_runtest_logreport(report=TestReport(item.nodeid, item.location, {}, outcome, longrepr, when))
    hook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)
