"""PySpark 3.5 to 4.3 (DESIGN 10b; docs/deployment.md, "Supported PySpark versions"): the suite runs on
4.3; here every other minor (its latest patch) runs the compatibility subset, the tests marked
``compat`` in COMPAT_FILES, in a virtualenv of its own that this module builds (and reuses:
tests/pyspark_venvs.py): ``<venv>/bin/python -m pytest -m compat ...``. A version passes when
every test of the subset passed there: pytest's exit code 0, nothing skipped, every file of
the subset represented (exit code 5, nothing collected, fails).

The venvs are built one after another in a background thread, and the subsets run two at a
time (``FLOWPOINT_TEST_PYSPARK_JOBS``), so the next version's venv is built and its subset runs
while the previous version's subset runs. A savepoint also moves from PySpark 3.5 to 4.3 (this
process) and back.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from checkpoint_jobs import expected_outputs, expected_state
from compat_subset import COMPAT_FILES, check_subset, run_subset
from compat_subset import child_env as subset_env
from pyspark_venvs import ensure_venv

pytestmark = pytest.mark.slow

VERSIONS = ("3.5.9", "4.0.5", "4.1.4", "4.2.1")  # the latest patch of every minor but the suite's own
HERE = Path(__file__).resolve().parent
# what this process's own Spark set for its Python workers and JVM: never for another PySpark
INHERITED_NOT = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET",
                 "SPARK_HOME", "PYTHONHOME", "VIRTUAL_ENV", "FLOWPOINT_TEST_RUNTIME")


@pytest.fixture(scope="module")
def venvs(request):
    """``{version: future of (venv python, seconds spent building it)}``, built in order: the
    versions this session's selected tests of this module need."""
    needed = set()
    for item in request.session.items:
        if item.module is request.module and "venvs" in item.fixturenames:
            params = getattr(item, "callspec", None)
            needed.add(params.params["version"] if params and "version" in params.params else VERSIONS[0])
    pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="pyspark-venvs")
    futures = {v: pool.submit(ensure_venv, v) for v in VERSIONS if v in needed}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


def child_env(version: str) -> dict:
    return subset_env(INHERITED_NOT, FLOWPOINT_EXPECT_PYSPARK=version)


def test_the_subset_is_where_this_module_looks():
    marked = sorted(f"tests/{p.name}" for p in HERE.glob("test_*.py") if re.search(r"mark\.compat\b", p.read_text()))
    assert marked == sorted(COMPAT_FILES)


def run_subset_on(version: str, venv, xml: Path):
    """``(venv set-up seconds, subset seconds, finished pytest process, its junit xml)`` once the
    venv is ready."""
    python, built = venv.result()
    took, proc = run_subset(python, xml, child_env(version), edges=version == VERSIONS[0])
    return built, took, proc, xml


@pytest.fixture(scope="module")
def subset_runs(venvs, tmp_path_factory):
    """The subset's runs, ``FLOWPOINT_TEST_PYSPARK_JOBS`` (default 2) at a time: one version's
    run overlaps the next one's (and the venv build after it), since a run's Spark jobs leave
    the cores idle much of the time (JVM start-up, checkpoints, restarts)."""
    jobs = int(os.environ.get("FLOWPOINT_TEST_PYSPARK_JOBS", "2"))
    pool = ThreadPoolExecutor(max_workers=max(1, jobs), thread_name_prefix="pyspark-subsets")
    futures = {v: pool.submit(run_subset_on, v, f, tmp_path_factory.mktemp(f"compat-{v}") / "compat.xml") for v, f in venvs.items()}
    yield futures
    pool.shutdown(wait=True, cancel_futures=True)


@pytest.mark.parametrize("version", VERSIONS)
def test_the_compatibility_subset_passes_on(version, subset_runs, record_property):
    built, took, proc, xml = subset_runs[version].result()
    record_property("venv_setup_seconds", round(built, 1))
    record_property("subset_seconds", round(took, 1))
    print(f"PySpark {version}: venv set-up {built:.0f} s ({'built' if built else 'reused'}), subset {took:.0f} s")
    check_subset(f"PySpark {version}", proc, xml, edges=version == VERSIONS[0])


def run_on(python: Path, version: str, *args) -> dict:
    proc = subprocess.run([str(python), str(HERE / "savepoint_versions_job.py"), *map(str, args)], capture_output=True,
                          text=True, timeout=600, cwd=HERE, env=child_env(version))
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert out["pyspark"] == version
    return out


def test_a_savepoint_moves_from_pyspark_3_5_to_4_3_and_back(venvs, make_env, tmp_path):
    """PySpark 3.5 (continuous, p2) -> savepoint -> PySpark 4.3 (this process, epochs, p3) ->
    savepoint -> PySpark 3.5 (continuous, p1) to the end: the exact final state, every output
    once. RocksDB working state throughout (a savepoint is canonical Parquet either way)."""
    import pyspark
    from test_savepoints import savepoint_mid_run

    version = VERSIONS[0]
    python, _ = venvs[version].result()
    first = run_on(python, version, "savepoint", tmp_path / "sp", 2, "continuous")
    second, out2 = savepoint_mid_run(make_env, tmp_path / "sp", 3, backend="rocksdb", restore=first["path"])
    assert pyspark.__version__.startswith("4.3.")
    last = run_on(python, version, "finish", "-", 1, "continuous", second)
    want = expected_state(2_000)
    assert last["count"] == {str(k): v for k, v in want["count"].items()}
    assert last["by_digit"] == {str(k): {str(d): n for d, n in v.items()} for k, v in want["by_digit"].items()}
    outputs = [tuple(o) for o in first["outputs"]] + list(out2) + [tuple(o) for o in last["outputs"]]
    assert sorted(outputs) == expected_outputs(2_000)
