"""A job whose state ``count`` of operator uid "counting" is the kind given on the command line
(``python kind_change_job.py value|list|map [fail-at]``): for restoring one kind's state into
another. With ``fail-at``, the record of that value fails the job (which keeps its checkpoints)."""

from __future__ import annotations

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
    def __init__(self, kind: str, fail_at: int | None = None):
        self.kind = kind
        self.fail_at = fail_at

    def open(self, ctx):
        if self.kind == "value":
            self.count = ctx.get_state(ValueStateDescriptor("count"))
        elif self.kind == "list":
            self.count = ctx.get_list_state(ListStateDescriptor("count"))
        else:
            self.count = ctx.get_map_state(MapStateDescriptor("count"))

    def process_element(self, value, ctx):
        if value == self.fail_at:
            msg = f"failing at record {value}, as asked"
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
    fail_at = int(sys.argv[2]) if len(sys.argv) > 2 else None
    env = StreamExecutionEnvironment.get_execution_environment()
    env.set_parallelism(2)
    env.enable_checkpointing(1)
    sink = CollectSink()
    (
        env.from_source(DataGeneratorSource(lambda i: i, count=300), source_name="numbers").uid("numbers")
        .key_by(lambda v: v % 7)
        .process(Counting(kind, fail_at)).uid("counting")
        .sink_to(sink).uid("collect")
    )
    env.execute(f"kind change ({kind})")
    print("records", len(sink.results), flush=True)
