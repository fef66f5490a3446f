# Names PyFlink exports, generic subscripting, ExecutionConfig, and KeyedStream.name() raising.
from typing import Iterable

from pyflink.common import Types
from pyflink.datastream import (CountWindow, ProcessWindowFunction, RuntimeExecutionMode,
                                StreamExecutionEnvironment, WindowFunction)
from pyflink.datastream.window import SessionWindowTimeGapExtractor
from pyflink.common.time import Time
from pyflink.datastream.window import TimeWindow


class Sum(WindowFunction[tuple, tuple, str, CountWindow]):
    def apply(self, key: str, window: CountWindow, inputs: Iterable[tuple]):
        yield key, sum(x[1] for x in inputs)


class Count(ProcessWindowFunction[tuple, str, str, TimeWindow]):
    def process(self, key: str, context: ProcessWindowFunction.Context[TimeWindow], elements: Iterable[tuple]):
        yield key


print("modes", RuntimeExecutionMode.BATCH.name, RuntimeExecutionMode.STREAMING.name)
print("time", Time.seconds(3).to_milliseconds())
print("extractor", SessionWindowTimeGapExtractor.__name__)
env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
config = env.get_config()
print("watermark interval", config.get_auto_watermark_interval())
config.set_auto_watermark_interval(500)
print("watermark interval", config.get_auto_watermark_interval())
print("object reuse", config.is_object_reuse_enabled())
ds = env.from_collection([("a", 1), ("a", 2), ("b", 3), ("a", 4)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
keyed = ds.key_by(lambda x: x[0], key_type=Types.STRING())
try:
    keyed.name("x")
    print("name accepted")
except Exception:
    print("name raised")
keyed.count_window(2).apply(Sum(), output_type=Types.TUPLE([Types.STRING(), Types.INT()])).print()
env.execute("names")
