"""The driver JVM's standard error, without the line no user can act on.

Spark 4's launcher starts every JVM with ``--add-modules=jdk.incubator.vector``, and Java then
prints ``WARNING: Using incubator modules: jdk.incubator.vector`` before any code of its own
runs: no JVM option or log setting silences it (Java 17 to 25), so every run began with it.
When flowpoint starts the driver's JVM itself (not under ``spark-submit``, whose JVM is running
already), it starts it as PySpark does (``launch_gateway``) but with its standard error in a
pipe; a thread copies every line to this process's standard error (file descriptor 2, where the
JVM would have written it) but that one. Spark's log (``log4j2.properties``) and the Python
workers' standard error reach the terminal as before.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Mapping

DROPPED = (b"WARNING: Using incubator modules:",)


def start_driver_jvm(launch_conf: Mapping[str, str]) -> bool:
    """Start the driver's JVM with ``launch_conf`` (the settings a new session's JVM starts
    with) and its standard error filtered. False (nothing done) when a JVM is running already
    or ``spark-submit`` started one."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return False
    with SparkContext._lock:
        if SparkContext._gateway is not None:
            return False
        read_fd, write_fd = os.pipe()
        threading.Thread(target=_copy, args=(read_fd,), name="flowpoint-jvm-stderr", daemon=True).start()
        try:
            conf = SparkConf(loadDefaults=False).setAll(list(launch_conf.items()))
            gateway = launch_gateway(conf, popen_kwargs={"stderr": write_fd})
        finally:
            os.close(write_fd)  # the JVM holds its own copy: the pipe ends when the JVM does
        SparkContext._gateway = gateway
        SparkContext._jvm = gateway.jvm
    return True


def _copy(read_fd: int) -> None:
    with open(read_fd, "rb") as pipe:
        for line in iter(pipe.readline, b""):
            if line.startswith(DROPPED):
                continue
            with contextlib.suppress(OSError):
                view = memoryview(line)
                while view:
                    view = view[os.write(2, view):]
