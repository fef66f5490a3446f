"""Driver for tests/test_standalone_cluster.py (its own process: one SparkContext each).

``python standalone_isolation_job.py '<spark conf as JSON>' <common path P>``: tasks on every
executor write a marker file into P (created if missing), then (in a second job, after all writes) list P; prints one
JSON line ``{"writes": [[worker_dir, marker], ...], "lists": [[worker_dir, [names]], ...],
"executors": n, "driver": [names the driver sees in P]}``. ``worker_dir`` is the executor's
working directory (``<worker>/work/<app>/<executor>``), which names the worker it runs under.
"""

import json
import os
import sys
import time
import uuid


def write_marker(index, _rows, path):
    os.makedirs(path, exist_ok=True)
    name = f"marker-{uuid.uuid4().hex[:8]}"
    with open(os.path.join(path, name), "w") as f:
        f.write(os.getcwd())
    time.sleep(0.3)  # keep the executor busy so that the other one takes the next task
    yield os.getcwd(), name


def list_dir(_index, _rows, path):
    time.sleep(0.3)
    yield os.getcwd(), sorted(os.listdir(path)) if os.path.isdir(path) else None


if __name__ == "__main__":
    from pyspark.sql import SparkSession

    conf, path = json.loads(sys.argv[1]), sys.argv[2]
    spark = SparkSession.builder.appName("standalone-isolation").config(map=conf).getOrCreate()
    sc = spark.sparkContext
    executors = sc._jsc.sc().getExecutorMemoryStatus().size() - 1  # minus the driver
    n = 8
    writes = sc.parallelize(range(n), n).mapPartitionsWithIndex(lambda i, it: write_marker(i, it, path)).collect()
    lists = sc.parallelize(range(n), n).mapPartitionsWithIndex(lambda i, it: list_dir(i, it, path)).collect()
    print(json.dumps({"writes": writes, "lists": lists, "executors": executors, "driver": sorted(os.listdir(path)) if os.path.isdir(path) else None}), flush=True)
    spark.stop()
