"""PySpark 3.5 to 4.3 (DESIGN 10b; docs/deployment.md, "Supported PySpark versions"): the suite runs on
4.3; here every other minor (its latest patch) runs the compatibility subset, the tests marked
``compat`` in COMPAT_FILES, in a virtualenv of its own that this module builds (and reuses:
tests/pyspark_venvs.py): ``<venv>/bin/python -m pytest -m compat ...``. A version passes when
every test of the subset passed there: pytest's exit code 0, nothing skipped, every file of
the subset represented (exit code 5, nothing collected, fails).

The venvs are built and the subsets run in the background while the rest of the suite runs
(tests/compat_background.py); this module's tests run last and read their verdicts. A
savepoint also moves from PySpark 3.5 to 4.3 (this process) and back.
"""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from checkpoint_jobs import expected_outputs, expected_state
from compat_background import VERSIONS, version_env
from compat_subset import COMPAT_FILES, check_subset

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent


def test_the_subset_is_where_this_module_looks():
    marked = sorted(f"tests/{p.name}" for p in HERE.glob("test_*.py") if re.search(r"mark\.compat\b", p.read_text()))
    assert marked == sorted(COMPAT_FILES)


@pytest.mark.timeout(3600)  # waits for its run in the background (which has its own timeout)
@pytest.mark.parametrize("version", VERSIONS)
def test_the_compatibility_subset_passes_on(version, compat_runs, record_property):
    built, took, proc, xml = compat_runs.result(f"subset-{version}")
    record_property("venv_setup_seconds", round(built, 1))
    record_property("subset_seconds", round(took, 1))
    print(f"PySpark {version}: venv set-up {built:.0f} s ({'built' if built else 'reused'}), subset {took:.0f} s")
    check_subset(f"PySpark {version}", proc, xml, edges=version == VERSIONS[0])


@pytest.fixture
def venv_3_5(compat_runs) -> Path:
    """The PySpark 3.5 venv's python (built in the background)."""
    python, _ = compat_runs.result(f"venv-{VERSIONS[0]}")
    return python


def run_on(python: Path, version: str, *args) -> dict:
    proc = subprocess.run([str(python), str(HERE / "savepoint_versions_job.py"), *map(str, args)], capture_output=True,
                          text=True, timeout=600, cwd=HERE, env=version_env(version))
    assert proc.returncode == 0, proc.stderr[-4000:]
    out = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("{")))
    assert out["pyspark"] == version
    return out


def test_a_savepoint_moves_from_pyspark_3_5_to_4_3_and_back(venv_3_5, make_env, tmp_path):
    """PySpark 3.5 (continuous, p2) -> savepoint -> PySpark 4.3 (this process, epochs, p3) ->
    savepoint -> PySpark 3.5 (continuous, p1) to the end: the exact final state, every output
    once. RocksDB working state throughout (a savepoint is canonical Parquet either way)."""
    import pyspark
    from test_savepoints import savepoint_mid_run

    version, python = VERSIONS[0], venv_3_5
    first = run_on(python, version, "savepoint", tmp_path / "sp", 2, "continuous")
    second, out2 = savepoint_mid_run(make_env, tmp_path / "sp", 3, backend="rocksdb", restore=first["path"])
    assert pyspark.__version__.startswith("4.3.")
    last = run_on(python, version, "finish", "-", 1, "continuous", second)
    want = expected_state(2_000)
    assert last["count"] == {str(k): v for k, v in want["count"].items()}
    assert last["by_digit"] == {str(k): {str(d): n for d, n in v.items()} for k, v in want["by_digit"].items()}
    outputs = [tuple(o) for o in first["outputs"]] + list(out2) + [tuple(o) for o in last["outputs"]]
    assert sorted(outputs) == expected_outputs(2_000)
