"""The compatibility subset (the tests marked ``compat``, tests/compat_subset.py) against a Spark
Connect server: ``FLOWPOINT_TEST_SPARK_REMOTE=sc://... python -m pytest -m compat ...`` in a
subprocess, so that its ``spark`` and ``make_env`` fixtures are Spark Connect sessions of one
server started here (tests/connect_server.py) and the jobs its tests start as subprocesses
(``flowpoint run --resume``, the seed example) connect to that server through ``$SPARK_REMOTE``.
It passes as on another PySpark (tests/test_pyspark_versions.py): pytest's exit code 0, nothing
skipped, every file of the subset represented.

The jobs run with the Connect adapter's DataFrame operations, in epochs where they ask for
epochs or ``auto``. The subset's tests that ask for ``execution.runtime: continuous``
(tests/test_continuous.py) need the continuous runtime on Spark Connect: until the Connect
adapter offers it, they fail there with its refusal (a ConfigurationError naming Spark Connect),
and so does this test. One server serves the whole subset (about 2 minutes on 2 busy cores); it
runs in the background while the rest of the suite runs (tests/compat_background.py), and this
test, run last, reads its verdict.
"""

from __future__ import annotations

import pytest
from compat_subset import check_subset
from connect_server import ServerFailed

pytestmark = pytest.mark.slow


@pytest.mark.timeout(3600)  # waits for its run in the background (which has its own timeout)
def test_the_compatibility_subset_passes_on_a_spark_connect_server(compat_runs, record_property):
    pytest.importorskip("grpc")
    outcome = compat_runs.result("connect")
    if isinstance(outcome, ServerFailed):
        pytest.fail(str(outcome))
    url, took, proc, xml = outcome
    record_property("subset_seconds", round(took, 1))
    print(f"Spark Connect {url}: subset {took:.0f} s")
    check_subset(f"Spark Connect server {url}", proc, xml)
