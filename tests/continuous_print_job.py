"""A continuous job that prints while it runs (tests/test_continuous_flow.py): ``python
continuous_print_job.py <count> <rate>`` prints ``tick <index> <wall time the source read it>``."""

from __future__ import annotations

import sys
import time

from flowpoint import DataGeneratorSource, StreamExecutionEnvironment


def stamp(i: int) -> str:
    return f"tick {i} {time.time():.3f}"  # the map is chained to the source: the time of the read


if __name__ == "__main__":
    count, rate = int(sys.argv[1]), float(sys.argv[2])
    env = StreamExecutionEnvironment.get_execution_environment({
        "spark.master": "local[2]",
        "execution.runtime": "continuous",
        "execution.buffer-timeout": 5,
        "execution.progress.interval": -1,
    })
    env.set_parallelism(1)
    env.from_source(DataGeneratorSource(lambda i: i, count=count, rate_limit_per_second=rate), source_name="ticks").map(stamp).print()
    env.execute("print while running")
