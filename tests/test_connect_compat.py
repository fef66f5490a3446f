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
and so does this test. One server serves the whole subset (about 2 minutes on 2 busy cores).
"""

from __future__ import annotations

import sys

import pytest
from compat_subset import check_subset, run_subset
from compat_subset import child_env as subset_env
from connect_server import ServerFailed, connect_server

pytestmark = pytest.mark.slow

# what this process's own Spark or test settings set: never for the subset's process
INHERITED_NOT = ("PYSPARK_GATEWAY_PORT", "PYSPARK_GATEWAY_SECRET", "FLOWPOINT_TEST_RUNTIME", "FLOWPOINT_TEST_MASTER",
                 "SPARK_REMOTE", "SPARK_API_MODE", "SPARK_CONNECT_MODE_ENABLED", "FLOWPOINT_EXPECT_PYSPARK")


@pytest.mark.timeout(1500)
def test_the_compatibility_subset_passes_on_a_spark_connect_server(tmp_path, record_property):
    pytest.importorskip("grpc")
    xml = tmp_path / "compat.xml"
    try:
        with connect_server(tmp_path, name="flowpoint-connect-compat") as url:
            took, proc = run_subset(sys.executable, xml, subset_env(INHERITED_NOT, FLOWPOINT_TEST_SPARK_REMOTE=url),
                                    timeout=1400)
    except ServerFailed as e:
        pytest.fail(str(e))
    record_property("subset_seconds", round(took, 1))
    print(f"Spark Connect {url}: subset {took:.0f} s")
    check_subset(f"Spark Connect server {url}", proc, xml)
