# execute_and_collect(): records converted by the stream's type, nested Row and tuple types included.
from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
ds = env.from_collection([(1, "a"), (2, "b")], type_info=Types.TUPLE([Types.INT(), Types.STRING()]))


def show(stream):
    for record in stream.execute_and_collect():
        print(type(record).__name__, repr(record))


show(ds.map(lambda t: (t[1], t[0] * 10)))
show(ds.map(lambda t: Row(t[1], t[0] * 10), output_type=Types.ROW([Types.STRING(), Types.INT()])))
show(ds.map(lambda t: Row(t[1], t[0]), output_type=Types.ROW_NAMED(["name", "n"], [Types.STRING(), Types.INT()])))
show(ds.map(lambda t: Row(t[1], (t[0], [t[0]] * 2)),
            output_type=Types.ROW([Types.STRING(), Types.TUPLE([Types.INT(), Types.LIST(Types.INT())])])))
show(ds.map(lambda t: (t[0], Row(t[1], float(t[0]))),
            output_type=Types.TUPLE([Types.INT(), Types.ROW_NAMED(["s", "f"], [Types.STRING(), Types.DOUBLE()])])))
show(ds.map(lambda t: {t[1]: t[0]}, output_type=Types.MAP(Types.STRING(), Types.INT())))
show(ds.key_by(lambda t: t[1], key_type=Types.STRING()))
print(ds.map(lambda t: Row(t[1], t[0]), output_type=Types.ROW([Types.STRING(), Types.INT()])).execute_and_collect(limit=1))
