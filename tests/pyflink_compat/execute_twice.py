# Each env.execute() runs only what was defined since the previous one.
from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
env.from_collection([1, 2, 3], type_info=Types.INT()).map(lambda x: x * 10, output_type=Types.INT()).print()
env.execute("first")
env.from_collection(["x", "y"], type_info=Types.STRING()).map(lambda s: s.upper(), output_type=Types.STRING()).print()
env.execute("second")
