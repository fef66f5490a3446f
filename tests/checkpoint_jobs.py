"""The stateful job the checkpoint tests run, in-process and as a script (``python
checkpoint_jobs.py <checkpoints dir> <backend> [--resume]`` prints its final state as JSON)."""

from __future__ import annotations

import json
import os
import sys
from collections import Counter

from flowpoint import (
    CollectSink,
    DataGeneratorSource,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)

KEYS = 13


def record(i: int) -> int:
    return (i * 7919) % 100_003


def key_of(v: int) -> int:
    return v % KEYS


class Counting(KeyedProcessFunction):
    """Counts per key in value, list and map state; fails on the record ``fail_value`` until
    ``flag`` exists, which the test creates only after the failure happened (or the function
    after ``fail_times`` failures: by default one, then the job's restart gets past it; Spark
    does not retry a task whose user function raised)."""

    def __init__(self, fail_value: int | None = None, flag: str | None = None, fail_times: int = 1):
        self.fail_value = fail_value
        self.flag = flag
        self.fail_times = fail_times

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))
        self.last = ctx.get_list_state(ListStateDescriptor("last"))
        self.by_digit = ctx.get_map_state(MapStateDescriptor("by_digit"))

    def process_element(self, value, ctx):
        if value == self.fail_value and self.flag and not os.path.exists(self.flag):
            failures = self.flag + ".failures"
            with open(failures, "a") as f:
                f.write("x")
            if os.path.getsize(failures) >= self.fail_times:
                open(self.flag, "w").close()
            msg = f"injected failure at record {value}"
            raise RuntimeError(msg)
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.last.update([value])
        d = value % 10
        self.by_digit.put(d, (self.by_digit.get(d) or 0) + 1)
        yield ctx.get_current_key(), n


def build(env: StreamExecutionEnvironment, events: int, rate: float | None = None, function: Counting | None = None) -> CollectSink:
    sink = CollectSink()
    source = DataGeneratorSource(record, count=events, rate_limit_per_second=rate)
    (
        env.from_source(source, source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(function or Counting()).uid("counting")
        .sink_to(sink).uid("collect")
    )
    return sink


def expected_state(events: int) -> dict:
    values = [record(i) for i in range(events)]
    counts = Counter(key_of(v) for v in values)
    by_digit: dict = {}
    for v in values:
        m = by_digit.setdefault(key_of(v), {})
        m[v % 10] = m.get(v % 10, 0) + 1
    return {"count": dict(counts), "by_digit": by_digit}


def expected_outputs(events: int) -> list:
    seen: Counter = Counter()
    out = []
    for i in range(events):
        k = key_of(record(i))
        seen[k] += 1
        out.append((k, seen[k]))
    return sorted(out)


if __name__ == "__main__":
    checkpoints, backend, events, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    settings = {
        "execution.progress.interval": 0,
        "state.backend.type": backend,
        "state.checkpoints.dir": checkpoints,
        "state.checkpoints.num-retained": 3,
    }
    if not os.environ.get("SPARK_REMOTE"):  # (a Spark Connect server has its own master)
        settings["spark.master"] = "local[2,4]"
    env = StreamExecutionEnvironment.get_execution_environment(settings)
    env.set_parallelism(2)
    env.set_epoch_max_records(200)
    env.enable_checkpointing(1)
    sink = build(env, events, rate or None)
    result = env.execute("resumable-count")
    state = result.get_keyed_state("counting")
    print(json.dumps({
        "count": {str(k): v for k, v in state.get("count", {}).items()},
        "checkpoints": [s.checkpoint_id for s in result.get_checkpoint_stats() if s.status == "COMPLETED"],
        "outputs": len(sink.results),
    }), flush=True)
