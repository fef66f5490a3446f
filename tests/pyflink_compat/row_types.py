# Records typed by type_info / output_type: Row field access, Types.FLOAT, Row printing.
# compat: sorted (five print sinks: the order of their lines between sinks is not defined)
from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
ds = env.from_collection([(1, "hi", 0.1), (2, "hello", 2.5)],
                         type_info=Types.ROW_NAMED(["id", "info", "score"], [Types.INT(), Types.STRING(), Types.FLOAT()]))
ds.map(lambda r: r.info + "!" + str(r.id), output_type=Types.STRING()).print("field")
ds.map(lambda r: Row(r.id * 2, r.score), output_type=Types.ROW([Types.INT(), Types.FLOAT()])).print("row")
ds.map(lambda r: (r.info, r.score), output_type=Types.TUPLE([Types.STRING(), Types.FLOAT()])).print("tuple")
ds.map(lambda r: repr(r.score)).print("float")
ds.print("named")
env.execute("rows")
