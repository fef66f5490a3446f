"""The compatibility subset (the tests marked ``compat``) run in a pytest subprocess, and its
verdict: for tests/test_pyspark_versions.py (another PySpark's venv) and
tests/test_connect_compat.py (a Spark Connect server).

A run passes when pytest exited 0, its junit xml counts tests and no failure, error or skip,
and every file of :data:`COMPAT_FILES` is represented (exit code 5, nothing collected, fails).
"""

from __future__ import annotations

import os
import subprocess
import time
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
COMPAT_FILES = (  # every test module with tests marked compat (test_the_subset_is_where_this_module_looks)
    "tests/test_spark_versions.py",
    "tests/test_checkpoints.py",
    "tests/test_continuous.py",
    "tests/test_event_time_differential.py",
    "tests/test_seed_example.py",
    "tests/test_kafka_sink.py",
)


# run on the oldest minor, the suite's own and Spark Connect, not again on each minor between
# them: what they add to the subset is the driver's process and the checkpoint files (a driver
# killed with kill -9, then --resume) and the main example's job (event-time windows on the
# continuous runtime, which the subset's continuous and event-time tests run on every minor)
EDGES_ONLY = (
    "tests/test_checkpoints.py::test_driver_killed_then_resume_continues_from_the_latest_checkpoint",
    "tests/test_seed_example.py::test_example_counts_equal_pandas",
)
EDGES_ONLY_FILES = ("tests/test_seed_example.py",)  # its one compat test is in EDGES_ONLY


def run_subset(python: str | Path, xml: Path, env: dict, timeout: float = 800,
               edges: bool = True) -> tuple[float, subprocess.CompletedProcess]:
    """``python -m pytest -m compat COMPAT_FILES`` from the checkout's root, junit xml to ``xml``:
    ``(seconds it took, the finished process)``; without :data:`EDGES_ONLY` unless ``edges``."""
    cmd = [str(python), "-m", "pytest", "-m", "compat", "-q", "-p", "no:cacheprovider", "-o", "addopts=-ra --durations=10",
           f"--junitxml={xml}", *COMPAT_FILES]
    if not edges:
        cmd += [f"--deselect={t}" for t in EDGES_ONLY]
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=REPO, env=env)
    return time.monotonic() - started, proc


def failures(xml: Path) -> str:
    """Each failed, erroneous or skipped test of the junit xml with its text (its traceback)."""
    out = []
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError) as e:
        return f"(no junit xml: {e})"
    for case in root.iter("testcase"):
        for kind in ("failure", "error", "skipped"):
            for node in case.findall(kind):
                text = (node.text or "").strip()
                out.append(f"--- {kind.upper()} {case.get('classname')}::{case.get('name')}: {node.get('message', '')}\n"
                           f"{text[-4000:]}")
    return "\n".join(out)


def check_subset(label: str, proc: subprocess.CompletedProcess, xml: Path, edges: bool = True) -> None:
    """Assert that the run passed (module doc), with its failures' text and output when not."""
    report = f"{label}, exit code {proc.returncode}:\n{failures(xml)[-20000:]}\n{proc.stdout[-6000:]}\n{proc.stderr[-3000:]}"
    assert proc.returncode == 0, report
    suite = ET.parse(xml).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    assert counts["tests"] > 0 and counts["failures"] == counts["errors"] == counts["skipped"] == 0, (counts, report)
    files = {next(p for p in c.get("classname", "").split(".") if p.startswith("test_")) for c in suite.iter("testcase")}
    expected = {Path(f).stem for f in COMPAT_FILES if edges or f not in EDGES_ONLY_FILES}
    assert files == expected, (files, report)


def child_env(drop: tuple[str, ...] = (), **extra: str) -> dict:
    """This process's environment without ``drop``, with ``PYTHONPATH`` this checkout (whichever
    checkout an editable install names) and ``extra``."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env["PYTHONPATH"] = str(REPO)
    env.update(extra)
    return env
