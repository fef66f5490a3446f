# A FileSource with for_monotonous_timestamps() and no assigner: records keep Long.MIN_VALUE.
from pyflink.common import Types, WatermarkStrategy
from pyflink.datastream import ProcessFunction, StreamExecutionEnvironment
from pyflink.datastream.connectors.file_system import FileSource, StreamFormat


class Stamp(ProcessFunction):
    def process_element(self, value, ctx):
        yield value.upper() + " " + str(ctx.timestamp())


with open("input.txt", "w") as f:
    f.write("a\nb\nc\n")
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), "input.txt").build()
ds = env.from_source(source, WatermarkStrategy.for_monotonous_timestamps(), "file")
ds.process(Stamp(), output_type=Types.STRING()).print()
env.execute("file")
