"""A job whose state ``count`` of operator uid "counting" is the kind given on the command line
(``python kind_change_job.py value|list|map [checkpoint-dir]``): for restoring one kind's state
into another. With a checkpoint directory, the job fails (and so keeps its checkpoints) at the
first record after a checkpoint completed there."""

from __future__ import annotations

import glob
import os
import sys

from flowpoint import (
    CollectSink,
    DataGeneratorSource,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapStateDescriptor,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)


class Counting(KeyedProcessFunction):
    def __init__(self, kind: str, fail_after: str | None = None):
        self.kind = kind
        self.fail_after = fail_after  # a checkpoint directory: fail once it holds a completed checkpoint

    def open(self, ctx):
        if self.kind == "value":
            self.count = ctx.get_state(ValueStateDescriptor("count"))
        elif self.kind == "list":
            self.count = ctx.get_list_state(ListStateDescriptor("count"))
        else:
            self.count = ctx.get_map_state(MapStateDescriptor("count"))

    def process_element(self, value, ctx):
        if self.fail_after and glob.glob(os.path.join(self.fail_after, "*", "chk-*", "_metadata")):
            msg = f"failing at record {value} after a completed checkpoint, as asked"
            raise RuntimeError(msg)
        if self.kind == "value":
            self.count.update((self.count.value() or 0) + 1)
        elif self.kind == "list":
            self.count.add(value)
        else:
            self.count.put(value, True)
        yield value


if __name__ == "__main__":
    kind = sys.argv[1]
    fail_after = sys.argv[2] if len(sys.argv) > 2 else None
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(1)
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(lambda i: i, count=300, rate_limit_per_second=100 if fail_after else None), source_name="numbers").uid("numbers")
        .key_by(lambda v: v % 7)
        .process(Counting(kind, fail_after)).uid("counting")
        .sink_to(sink).uid("collect")
    )
    env.execute(f"kind change ({kind})")
    print("records", len(sink.results), flush=True)
