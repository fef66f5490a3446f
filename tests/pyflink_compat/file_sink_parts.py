# FileSink with OutputFileConfig and a rolling policy: Flink's bucket directories, part file
# names and the records written by simple_string_encoder (Java's toString of typed values).
import os
import re

from pyflink.common import Types
from pyflink.common.serialization import Encoder
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSink, OutputFileConfig, RollingPolicy

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
ds = env.from_collection([("a", 1), ("b", 2), ("c", 3)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
sink = FileSink.for_row_format("out", Encoder.simple_string_encoder()) \
    .with_output_file_config(OutputFileConfig.builder().with_part_prefix("clicks").with_part_suffix(".txt").build()) \
    .with_rolling_policy(RollingPolicy.default_rolling_policy()) \
    .build()
ds.sink_to(sink)
env.execute("files")

for root, dirs, files in sorted(os.walk("out")):
    for name in sorted(files):
        if name.startswith("."):
            continue
        bucket = os.path.relpath(root, "out")
        print("bucket", re.fullmatch(r"\d{4}-\d{2}-\d{2}--\d{2}", bucket) is not None)
        print("file", re.sub(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}", "UUID", name))
        with open(os.path.join(root, name)) as f:
            for line in sorted(f.read().splitlines()):
                print("line", line)
