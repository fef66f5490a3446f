"""The job the dashboard's browser test (tests/test_dashboard.py) and its screenshots
(docs/images/capture.py) run: rate-limited click events, timestamps and watermarks, a keyed count
that fails once (the job restarts from its last checkpoint), event-time windows that drop late
events, and a print sink of parallelism 1.

    flowpoint run -m 'local[2]' tests/dashboard_job.py NAME WORKDIR [RATE] [FAIL_AT]

Four vertices: [clicks -> timestamps -> channels] =HASH=> [counting] =HASH=> [windows -> format]
=REBALANCE=> [print]. Checkpoints every second to WORKDIR/checkpoints, savepoints to
WORKDIR/savepoints. The failure: the first channel whose count reaches FAIL_AT raises once (a
flag file in WORKDIR remembers it); run with a master without task retries (``local[2]``) so
that the failure restarts the job instead of being retried by Spark.
"""

from __future__ import annotations

import os
import sys

from flowpoint import (
    ClickEventGenerator,
    DataGeneratorSource,
    Duration,
    KeyedProcessFunction,
    ProcessWindowFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
    TimestampAssigner,
    TumblingEventTimeWindows,
    ValueStateDescriptor,
    WatermarkStrategy,
)


class ClickTimestamps(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value.ts


class CountClicks(KeyedProcessFunction):
    """A running count per channel; raises once when a count reaches ``fail_at``."""

    def __init__(self, fail_at: int, flag: str):
        self.fail_at = fail_at
        self.flag = flag

    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        if n == self.fail_at and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            msg = f"injected failure at click {n} of channel {ctx.get_current_key()}"
            raise RuntimeError(msg)
        self.count.update(n)
        yield value


class CountWindow(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield context.window().start, key, sum(1 for _ in elements)


def build(env: StreamExecutionEnvironment, workdir: str, rate: float, fail_at: int) -> None:
    env.set_parallelism(2)
    env.enable_checkpointing(1000)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3, 200))
    clicks = ClickEventGenerator(num_users=1000, max_lateness_ms=3000)
    source = DataGeneratorSource(clicks, count=None, rate_limit_per_second=rate)
    channels = (
        env.from_source(source, source_name="clicks").uid("clicks")
        .assign_timestamps_and_watermarks(
            WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(1000)).with_timestamp_assigner(ClickTimestamps())
        ).uid("timestamps")
        .map(lambda e: e.channel).name("channels").uid("channels")
    )
    counted = channels.key_by(lambda c: c).process(CountClicks(fail_at, os.path.join(workdir, "failed-once"))).name("counting").uid("counting")
    windows = (
        counted.key_by(lambda c: c)
        .window(TumblingEventTimeWindows.of(Duration.of_millis(2000)))
        .process(CountWindow()).name("windows").uid("windows")
        .map(lambda t: f"{t[0]} {t[1]} {t[2]}").name("format").uid("format")
    )
    windows.print().set_parallelism(1).uid("print")


if __name__ == "__main__":
    name, workdir = sys.argv[1], os.path.abspath(sys.argv[2])
    rate = float(sys.argv[3]) if len(sys.argv) > 3 else 100.0
    fail_at = int(sys.argv[4]) if len(sys.argv) > 4 else 150
    env = StreamExecutionEnvironment.get_execution_environment({
        "execution.runtime": "epoch",  # the epoch timeline is one of the pages' sections
        "execution.progress.interval": -1,
        "state.checkpoints.dir": f"file://{workdir}/checkpoints",
        "state.savepoints.dir": f"file://{workdir}/savepoints",
        "state.checkpoints.num-retained": 3,
    })
    build(env, workdir, rate, fail_at)
    env.execute(name)
