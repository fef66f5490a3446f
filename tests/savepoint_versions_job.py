"""The counting job of tests/checkpoint_jobs.py as a script for tests/test_pyspark_versions.py,
run by another PySpark's python:

``python savepoint_versions_job.py savepoint <target dir> <parallelism> <runtime> [<restore>]``
runs it (rate-limited) until two commits passed, takes a savepoint into ``<target dir>`` and
cancels it; ``... finish <unused> <parallelism> <runtime> <restore>`` restores and runs it to the
end. Either prints one JSON line: the PySpark version, the savepoint path, the outputs up to it
(``savepoint``) or all outputs and the final state (``finish``).
"""

from __future__ import annotations

import json
import sys
import time

from checkpoint_jobs import build

from flowpoint import StreamExecutionEnvironment
from flowpoint.errors import JobCancelledError

EVENTS = 2_000


def main(mode: str, target: str, parallelism: int, runtime: str, restore: str | None) -> dict:
    import pyspark

    settings = {
        "spark.master": "local[3,4]",
        "execution.progress.interval": -1,
        "execution.runtime": runtime,
        "execution.buffer-timeout": 5,
        "state.backend.type": "rocksdb",
    }
    if restore:
        settings["execution.savepoint.path"] = restore
    env = StreamExecutionEnvironment.get_execution_environment(settings)
    env.set_parallelism(parallelism)
    env.set_epoch_max_records(100)
    out: dict = {"pyspark": pyspark.__version__}
    if mode == "finish":
        sink = build(env, EVENTS)
        result = env.execute("moved between PySpark versions")
        state = result.get_keyed_state("counting")
        out.update(outputs=list(sink.results), count={str(k): v for k, v in state.get("count", {}).items()},
                   by_digit={str(k): {str(d): n for d, n in v.items()} for k, v in state.get("by_digit", {}).items()})
        return out
    sink = build(env, EVENTS, rate=1500 if runtime == "epoch" else 400)
    client = env.execute_async("moved between PySpark versions")
    start = client.progress().epoch
    deadline = time.monotonic() + 120
    while client.progress().epoch < start + 2 and not client.is_done() and time.monotonic() < deadline:
        time.sleep(0.05)
    if client.is_done():
        msg = "the job ended before the savepoint"
        raise SystemExit(msg)
    path = client.trigger_savepoint(target)
    client.cancel()
    try:
        client.wait(60)
    except JobCancelledError:
        pass
    with open(path.removeprefix("file://") + "/_metadata") as f:
        n = json.load(f)["sinks"]["collect"]
    out.update(path=path, outputs=list(sink.results[:n]))
    return out


if __name__ == "__main__":
    mode, target, parallelism, runtime = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    print(json.dumps(main(mode, target, parallelism, runtime, sys.argv[5] if len(sys.argv) > 5 else None)), flush=True)
