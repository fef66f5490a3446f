"""Query a running job's keyed state with Spark SQL, without stopping the job (notebook style:
run it cell by cell in Jupyter, or as a script).

    python examples/live_state_query.py [--queries 3] [--every 5]

The job counts clicks per user (a ValueState, 30 s of click events at 2,000 a second, a
checkpoint every second). While it runs, each query reads the job's latest completed checkpoint
with ``flowpoint.state_reader(spark, job=...)`` and asks Spark SQL for the top users. The
checkpoint is pinned while it is read, so the job's retention keeps it until the ``with`` block
ends. ``flowpoint state <job-id> per-user count --key <id>`` shows the same from a shell.
"""

# %% the job: clicks per user, checkpointed every second
import argparse
import time

from pyspark.sql import SparkSession

import flowpoint
from flowpoint import (
    ClickEventGenerator,
    DataGeneratorSource,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)
from flowpoint.errors import CheckpointError


class ClicksPerUser(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)


def start_job(events: int, rate: int):
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(1)  # a continuous job holds its slots: the queries' Spark tasks need one free
    env.enable_checkpointing(1_000)
    source = DataGeneratorSource(ClickEventGenerator(num_users=50), count=events, rate_limit_per_second=rate)
    clicks = env.from_source(source, source_name="clicks")
    clicks.uid("clicks").key_by("id").process(ClicksPerUser()).uid("per-user")
    return env.execute_async("clicks-per-user")


# %% a query: the top users as of the latest completed checkpoint
TOP = "SELECT key AS user, value AS clicks FROM clicks_per_user ORDER BY clicks DESC, user LIMIT 5"


def query(spark, job_id: str) -> None:
    with flowpoint.state_reader(spark, job=job_id) as reader:
        reader.keyed_state("per-user", "count").createOrReplaceTempView("clicks_per_user")
        total = spark.sql("SELECT count(*) AS users, sum(value) AS clicks FROM clicks_per_user").first()
        print(f"as of checkpoint {reader.checkpoint_id} ({reader.metadata.stats.get('records_read', 0):,} records read): "
              f"{total['users']} users, {total['clicks']:,} clicks")
        spark.sql(TOP).show()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=3)
    parser.add_argument("--every", type=float, default=3.0, help="seconds between queries")
    parser.add_argument("--events", type=int, default=60_000)
    parser.add_argument("--rate", type=int, default=2_000, help="events a second")
    args = parser.parse_args()

    client = start_job(args.events, args.rate)
    spark = SparkSession.builder.getOrCreate()  # the job's own session, in this process
    job_id = client.get_job_id()
    print(f"job {job_id} is running; its state, while it runs:")
    try:
        done = 0
        while done < args.queries and not client.get_job_status().is_globally_terminal_state():
            try:
                query(spark, job_id)
                done += 1
                time.sleep(args.every)
            except CheckpointError:  # before its first checkpoint is in the job registry
                time.sleep(1)
    finally:
        if not client.get_job_status().is_globally_terminal_state():
            client.cancel()


if __name__ == "__main__":
    main()
