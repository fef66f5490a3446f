"""A checkpointed job on local-cluster whose function kills its executor's JVM once
(tests/test_cluster.py): Spark loses the executor, its tasks and shuffle output; the job must
still end with exact state."""

import json
import os
import signal
import sys

from checkpoint_jobs import Counting, build, expected_state

from flowpoint import StreamExecutionEnvironment


class KillsItsExecutor(Counting):
    def __init__(self, flag: str):
        super().__init__()
        self.flag = flag

    def process_element(self, value, ctx):
        if value == 1200 * 7919 % 100_003 and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            daemon = os.getppid()
            with open(f"/proc/{daemon}/stat") as f:
                executor_jvm = int(f.read().rsplit(")", 1)[1].split()[1])
            os.kill(executor_jvm, signal.SIGKILL)
        yield from super().process_element(value, ctx)


if __name__ == "__main__":
    master, root, backend = sys.argv[1], sys.argv[2], sys.argv[3]
    env = StreamExecutionEnvironment.get_execution_environment({
        "spark.master": master, "state.working.dir": os.path.join(root, "working"),
        "execution.progress.interval": 0, "state.backend.type": backend,
        "state.checkpoints.dir": os.path.join(root, "ck"),
    })
    env.set_parallelism(2)
    env.set_epoch_max_records(200)
    env.enable_checkpointing(1)
    events = 3_000
    build(env, events, function=KillsItsExecutor(os.path.join(root, "killed")))
    result = env.execute("executor killed")
    state = result.get_keyed_state("counting")
    ok = state["count"] == expected_state(events)["count"] and state["by_digit"] == expected_state(events)["by_digit"]
    print(json.dumps({"killed": os.path.exists(os.path.join(root, "killed")), "exact": ok}), flush=True)
    from pyspark.sql import SparkSession

    SparkSession.getActiveSession().stop()
