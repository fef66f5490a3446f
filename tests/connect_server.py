"""A local Spark Connect server for the tests: PySpark's own ``SparkConnectServer`` through
``spark-submit``, master ``local[2,4]``, on loopback at a free port, stopped by its pid.

Used by tests/test_spark_connect.py (its ``connect_url`` fixture) and tests/test_connect_compat.py
(the compatibility subset against one server). Its Python workers import this checkout and the
tests' helper modules (``PYTHONPATH``), as executors import what the job ships.

``python tests/connect_server.py`` starts one and prints its address until interrupted (Ctrl-C,
SIGTERM): then
``FLOWPOINT_TEST_SPARK_REMOTE=sc://127.0.0.1:<port> python -m pytest -m compat ...`` runs the
compatibility subset against it.
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MASTER = "local[2,4]"
SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"


class ServerFailed(RuntimeError):
    """The server exited, or did not listen in time (the message names its log)."""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def connect_server(log_dir: str | Path, name: str = "flowpoint-connect-tests", start_timeout: float = 120) -> Iterator[str]:
    """``sc://127.0.0.1:<port>`` of a server running for the ``with`` block; its output goes to
    ``<log_dir>/server.log``. Raises :class:`ServerFailed` when it does not come up."""
    import pyspark

    spark_home = os.path.dirname(pyspark.__file__)
    port = free_port()
    env = dict(os.environ, SPARK_HOME=spark_home, PYSPARK_PYTHON=sys.executable,
               PYTHONPATH=os.pathsep.join([ROOT, HERE, os.environ.get("PYTHONPATH", "")]))
    for var in ("SPARK_REMOTE", "SPARK_API_MODE", "SPARK_CONNECT_MODE_ENABLED"):  # the server is classic Spark
        env.pop(var, None)
    log_path = Path(log_dir) / "server.log"
    with open(log_path, "wb") as log:
        server = subprocess.Popen(
            [os.path.join(spark_home, "bin", "spark-submit"), "--class", SERVER_CLASS, "--name", name, "--master", MASTER,
             "--conf", f"spark.connect.grpc.binding.port={port}", "--conf", "spark.connect.grpc.binding.address=127.0.0.1",
             "--conf", "spark.driver.bindAddress=127.0.0.1", "--conf", "spark.driver.host=127.0.0.1",
             "--conf", "spark.ui.enabled=false", "--conf", "spark.python.worker.reuse=true",
             "--conf", "spark.sql.shuffle.partitions=4"],
            env=env, stdout=log, stderr=subprocess.STDOUT,
        )
        try:
            deadline = time.monotonic() + start_timeout
            while True:
                if server.poll() is not None:
                    msg = f"the Spark Connect server exited with {server.returncode} (log: {log_path})"
                    raise ServerFailed(msg)
                try:
                    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        msg = f"the Spark Connect server did not listen on port {port} within {start_timeout:.0f} s (log: {log_path})"
                        raise ServerFailed(msg) from None
                    time.sleep(0.3)
            yield f"sc://127.0.0.1:{port}"
        finally:
            server.terminate()  # this server's pid only
            try:
                server.wait(30)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


if __name__ == "__main__":
    import signal
    import tempfile

    signal.signal(signal.SIGTERM, signal.default_int_handler)  # kill <pid> stops the server as Ctrl-C does
    with contextlib.suppress(KeyboardInterrupt), connect_server(tempfile.mkdtemp(prefix="flowpoint-connect-")) as url:
        print(f"Spark Connect server at {url} (Ctrl-C or SIGTERM stops it)", flush=True)
        while True:
            time.sleep(3600)
