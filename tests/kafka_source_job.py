"""The Kafka keyed count as a script, for the driver-kill test: ``python kafka_source_job.py
<bootstrap> <topic> <checkpoints dir> <backend> <max records per epoch>`` reads the topic up to
its end at job start (bounded), counts per key with checkpoints at every epoch and prints the
final counts as JSON."""

from __future__ import annotations

import json
import sys

from checkpoint_jobs import Counting, key_of

from flowpoint import CollectSink, KafkaOffsetsInitializer, KafkaSource, SimpleStringSchema, StreamExecutionEnvironment

if __name__ == "__main__":
    bootstrap, topic, checkpoints, backend, max_records = sys.argv[1:6]
    env = StreamExecutionEnvironment.get_execution_environment(
        {
            "spark.master": "local[2,4]",
            "execution.progress.interval": 0,
            "state.backend.type": backend,
            "state.checkpoints.dir": checkpoints,
            "state.checkpoints.num-retained": 3,
        }
    )
    env.set_parallelism(3)
    env.set_epoch_max_records(int(max_records))
    env.enable_checkpointing(1)
    source = (
        KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
        .set_value_only_deserializer(SimpleStringSchema()).set_bounded(KafkaOffsetsInitializer.latest())
        .set_property("default.api.timeout.ms", "10000").build()
    )
    sink = CollectSink()
    (
        env.from_source(source, None, "kafka").uid("kafka")
        .map(int).key_by(key_of)
        .process(Counting()).uid("counting")
        .sink_to(sink).uid("collect")
    )
    result = env.execute("kafka-resumable-count")
    state = result.get_keyed_state("counting")
    print(json.dumps({
        "count": {str(k): v for k, v in state.get("count", {}).items()},
        "checkpoints": [s.checkpoint_id for s in result.get_checkpoint_stats() if s.status == "COMPLETED"],
    }), flush=True)
