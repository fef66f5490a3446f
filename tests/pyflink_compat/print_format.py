# print(): subtask prefixes at parallelism > 1, Java's toString of typed tuples, str() of untyped values.
# compat: sorted
from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
ds = env.from_collection([("hi", 0, 5, 4), ("yo", 1, 2, 3)],
                         type_info=Types.TUPLE([Types.STRING(), Types.INT(), Types.INT(), Types.INT()]))
ds.print()
ds.map(lambda t: (t[0], t[1] + 1)).print("untyped")
ds.map(lambda t: [t[1], t[2]], output_type=Types.LIST(Types.INT())).print("list")
ds.map(lambda t: t[0], output_type=Types.STRING()).print("string")
ds.map(lambda t: t[2] > 4, output_type=Types.BOOLEAN()).print("bool")
env.execute("print")
