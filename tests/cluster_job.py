"""A stateful job for tests/test_cluster.py, run in its own process (one SparkContext each)."""

import json
import sys

from flowpoint import CollectSink, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield ctx.get_current_key(), n


if __name__ == "__main__":
    master, working_dir = sys.argv[1], sys.argv[2]
    env = StreamExecutionEnvironment.get_execution_environment(
        {"spark.master": master, "state.working.dir": working_dir, "execution.progress.interval": -1}
    )
    env.set_parallelism(4)
    env.set_epoch_max_records(2_000)
    sink = CollectSink()
    env.from_sequence(0, 19_999).key_by(lambda v: v % 101).process(Count()).uid("count").sink_to(sink)
    result = env.execute("cluster")
    print(json.dumps({"state": {str(k): v for k, v in result.get_keyed_state("count", "count").items()},
                      "outputs": len(sink.results), "epochs": result.epochs}), flush=True)
    from pyspark.sql import SparkSession

    SparkSession.getActiveSession().stop()
