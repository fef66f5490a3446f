"""A keyed count written into a Delta table, as a script for the kill -9 and ``--resume`` test
(tests/test_delta_resume.py): ``python delta_jobs.py <checkpoints dir> <table> <runtime>
<events> <events a second, 0: unlimited>``."""

from __future__ import annotations

import os
import sys

from checkpoint_jobs import Counting, key_of, record

from flowpoint import DataGeneratorSource, DeltaSink, StreamExecutionEnvironment, Types
from flowpoint.api.row import Row

COUNTS = Types.ROW_NAMED(["key", "n"], [Types.LONG(), Types.LONG()])


def as_row(pair):
    return Row(key=pair[0], n=pair[1])


if __name__ == "__main__":
    checkpoints, table, runtime, events, rate = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), float(sys.argv[5])
    settings = {
        "execution.progress.interval": 0,
        "execution.runtime": runtime,
        "state.checkpoints.dir": checkpoints,
        "state.checkpoints.num-retained": 3,
    }
    if runtime == "continuous":
        settings["execution.buffer-timeout"] = 5
    if not os.environ.get("SPARK_REMOTE"):
        settings["spark.master"] = "local[2,4]"
    env = StreamExecutionEnvironment.get_execution_environment(settings)
    env.set_parallelism(2)
    env.set_epoch_max_records(200)
    env.enable_checkpointing(1 if runtime == "epoch" else 200)
    (
        env.from_source(DataGeneratorSource(record, count=events, rate_limit_per_second=rate or None), source_name="numbers")
        .uid("numbers")
        .key_by(key_of)
        .process(Counting()).uid("counting")
        .map(as_row, output_type=COUNTS).uid("rows")
        .sink_to(DeltaSink.builder().set_table_path(table).build()).uid("delta")
    )
    env.execute(f"delta-resume-{runtime}")
