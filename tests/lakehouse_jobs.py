"""A keyed count written into a Delta table and an Iceberg table at once, as a script for the
kill -9 and ``--resume`` test (tests/test_lakehouse_resume.py): ``python lakehouse_jobs.py
<checkpoints dir> <Delta table> <Iceberg warehouse> <runtime> <events> <events a second, 0:
unlimited>``; the Iceberg table is ``db.counts`` in the warehouse's embedded catalog."""

from __future__ import annotations

import os
import sys

from checkpoint_jobs import Counting, key_of, record

from flowpoint import DataGeneratorSource, DeltaSink, IcebergSink, StreamExecutionEnvironment, Types
from flowpoint.api.row import Row

ICEBERG_TABLE = "db.counts"
COUNTS = Types.ROW_NAMED(["key", "n"], [Types.LONG(), Types.LONG()])


def as_row(pair):
    return Row(key=pair[0], n=pair[1])


if __name__ == "__main__":
    checkpoints, table, warehouse, runtime = sys.argv[1:5]
    events, rate = int(sys.argv[5]), float(sys.argv[6])
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
    rows = (
        env.from_source(DataGeneratorSource(record, count=events, rate_limit_per_second=rate or None), source_name="numbers")
        .uid("numbers")
        .key_by(key_of)
        .process(Counting()).uid("counting")
        .map(as_row, output_type=COUNTS).uid("rows")
    )
    rows.sink_to(DeltaSink.builder().set_table_path(table).build()).uid("delta")
    rows.sink_to(IcebergSink.builder().set_table(ICEBERG_TABLE).set_warehouse(warehouse).build()).uid("iceberg")
    env.execute(f"lakehouse-resume-{runtime}")
