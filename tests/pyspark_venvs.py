"""Virtualenvs with another PySpark, for tests/test_pyspark_versions.py.

``ensure_venv("3.5.9")`` returns ``~/.cache/flowpoint/test-venvs/pyspark-3.5.9`` (the root:
``$FLOWPOINT_TEST_VENVS``), creating it when it is missing or incomplete:

1. ``python -m venv`` (no system site-packages: nothing of the suite's PySpark 4.3 shows through);
2. ``pip install pyspark[sql]==<version>`` first, as a cluster has it (with the pandas, pyarrow
   and numpy its SQL side asks for: numpy < 2 for PySpark 3.5);
3. ``pip install -e <repo>[kafka]`` with its dependencies, and the test runner (pytest,
   pytest-timeout, as the ``test`` extra pins them): pip resolves flowpoint's declared
   dependencies against the PySpark already there;
4. the PySpark in the venv must still be ``<version>``: a declared range that left it out
   would make pip replace it (what a cluster's PySpark must never suffer), and the set-up fails.

A venv is complete when its ``.flowpoint-ready`` file names the same PySpark and the same
declared dependencies (pyproject.toml's, so a changed range builds it again); otherwise it is
built again from nothing. A lock file serialises builders (two sessions, one cache).
The tests run with ``PYTHONPATH=<repo>``, so the checkout under test is imported whichever
checkout the editable install points at.

``python tests/pyspark_venvs.py 3.5.9 4.0.5`` builds (or checks) them from a shell.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import tomllib
except ImportError:  # Python 3.10: the copy pip carries
    from pip._vendor import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
READY = ".flowpoint-ready"
TEST_RUNNER = ("pytest", "pytest-timeout")  # from the test extra, with its pins


def venv_root() -> Path:
    return Path(os.environ.get("FLOWPOINT_TEST_VENVS") or Path.home() / ".cache" / "flowpoint" / "test-venvs")


def _requirements() -> dict:
    """What a venv is built from (besides PySpark): the declared dependencies and extras."""
    with open(REPO / "pyproject.toml", "rb") as f:
        project = tomllib.load(f)["project"]
    runner = [r for r in project["optional-dependencies"]["test"] if _name(r) in TEST_RUNNER]
    return {"dependencies": project["dependencies"], "kafka": project["optional-dependencies"]["kafka"], "runner": runner}


def _name(requirement: str) -> str:
    for i, c in enumerate(requirement):
        if not (c.isalnum() or c in "-_."):
            return requirement[:i].lower()
    return requirement.lower()


def venv_python(version: str) -> Path:
    return venv_root() / f"pyspark-{version}" / "bin" / "python"


def _ready(path: Path, wanted: dict) -> bool:
    try:
        with open(path / READY) as f:
            return json.load(f) == wanted and (path / "bin" / "python").exists()
    except (OSError, ValueError):
        return False


def _run(cmd: list, log: list[str]) -> None:
    proc = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=900, env=_pip_env())
    log.append(f"$ {' '.join(map(str, cmd))}\n{proc.stdout[-3000:]}{proc.stderr[-3000:]}")
    if proc.returncode != 0:
        msg = f"venv set-up step failed ({proc.returncode}):\n" + "\n".join(log)[-6000:]
        raise RuntimeError(msg)


def _pip_env() -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def installed_pyspark(python: Path) -> str:
    proc = subprocess.run([str(python), "-c", "import pyspark; print(pyspark.__version__)"],
                          capture_output=True, text=True, timeout=120, env=_pip_env())
    return proc.stdout.strip() if proc.returncode == 0 else f"(none: {proc.stderr.strip()[-300:]})"


def ensure_venv(version: str) -> tuple[Path, float]:
    """The venv's python for PySpark ``version``, and the seconds spent building it (0.0: reused)."""
    root = venv_root()
    root.mkdir(parents=True, exist_ok=True)
    path = root / f"pyspark-{version}"
    wanted = {"pyspark": f"pyspark[sql]=={version}", "python": sys.version.split()[0], **_requirements()}
    with open(root / f"pyspark-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _ready(path, wanted):
            return path / "bin" / "python", 0.0
        started = time.monotonic()
        shutil.rmtree(path, ignore_errors=True)
        log: list[str] = []
        python = path / "bin" / "python"
        _run([sys.executable, "-m", "venv", path], log)
        _run([python, "-m", "pip", "install", "-q", "--no-compile", wanted["pyspark"]], log)
        _run([python, "-m", "pip", "install", "-q", "-e", f"{REPO}[kafka]", *wanted["runner"]], log)
        got = installed_pyspark(python)
        if got != version:
            msg = (f"installing flowpoint replaced PySpark {version} with {got}: pyproject.toml's declared "
                   f"range does not admit {version}\n" + "\n".join(log)[-4000:])
            raise RuntimeError(msg)
        with open(path / READY, "w") as f:
            json.dump(wanted, f)
        return python, time.monotonic() - started


if __name__ == "__main__":
    for v in sys.argv[1:]:
        py, seconds = ensure_venv(v)
        print(f"pyspark {v}: {py} ({'reused' if not seconds else f'built in {seconds:.0f} s'})", flush=True)
