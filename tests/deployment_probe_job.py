"""Job for tests/test_deployment_settings.py, run with ``flowpoint run`` (its own process).

Runs a tiny job whose map reads ``$FLOWPOINT_PROBE`` on the executor, then prints one JSON line:
the session's values of a few Spark settings, what the executor saw, the driver JVM's listening
addresses, and the job's filesystem options.
"""

import json
import os
import socket
import struct

from flowpoint import CollectSink, StreamExecutionEnvironment
from flowpoint.api.storage_options import storage_options


def _hex_address(text: str) -> str:
    addr = text.split(":")[0]
    raw = bytes.fromhex(addr)
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, struct.pack("<I", int(addr, 16)))
    words = struct.unpack("<4I", raw)
    return socket.inet_ntop(socket.AF_INET6, struct.pack(">4I", *words))


def listening_addresses(pid: int) -> list[str]:
    """The local addresses ``pid`` listens on (TCP, from /proc)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    out = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in inodes:  # LISTEN
                    out.append(_hex_address(cols[1]))
    return sorted(set(out))


def jvm_pids() -> list[int]:
    with open(f"/proc/{os.getpid()}/task/{os.getpid()}/children") as f:
        children = [int(x) for x in f.read().split()]
    return [p for p in children if "java" in open(f"/proc/{p}/cmdline").read()]


def probe(value):
    return value, os.environ.get("FLOWPOINT_PROBE")


if __name__ == "__main__":
    env = StreamExecutionEnvironment.get_execution_environment({"execution.progress.interval": -1})
    env.set_parallelism(1)
    sink = CollectSink()
    env.from_collection([1, 2]).map(probe).sink_to(sink)
    env.execute("deployment-probe")
    from pyspark.sql import SparkSession

    conf = SparkSession.getActiveSession().sparkContext.getConf()
    keys = ["spark.master", "spark.sql.shuffle.partitions", "spark.executorEnv.FLOWPOINT_PROBE", "spark.executorEnv.PYTHONPATH",
            "spark.driver.host", "spark.driver.bindAddress", "spark.app.name"]
    print(json.dumps({
        "conf": {k: conf.get(k, None) for k in keys},
        "executor": sorted({seen for _, seen in sink.results}),
        "listening": sorted({a for p in jvm_pids() for a in listening_addresses(p)}),
        "storage": storage_options(env.get_configuration()),
    }), flush=True)
