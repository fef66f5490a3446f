# PyFlink's own module paths with the type information beyond the basic types (BIG_DEC, SQL_DATE,
# SQL_TIME, SQL_TIMESTAMP, INSTANT): the values a map's output_type makes, as a function after an
# exchange sees them (PyFlink converts where records are serialized, not between chained Python
# functions) and as print() shows them; and broadcast() without an argument: every record to every
# instance of the next operator.
# compat: sorted
import datetime
from decimal import Decimal

from pyflink.common.time import Instant
from pyflink.common.typeinfo import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import MapFunction, RuntimeContext


class TagSubtask(MapFunction):
    def open(self, runtime_context: RuntimeContext):
        self.index = runtime_context.get_index_of_this_subtask()

    def map(self, value):
        return "%s@%d" % (value, self.index)


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)

env.from_collection(["a", "b", "c"], type_info=Types.STRING()) \
    .broadcast() \
    .map(TagSubtask(), output_type=Types.STRING()) \
    .print("broadcast")

when = datetime.datetime(2024, 1, 31, 9, 5, 7, 120000)
typed = env.from_collection([1], type_info=Types.INT()).map(
    lambda _: (Decimal("2.50"), when.date(), when.time(), when, Instant.of_epoch_milli(1706691907120)),
    output_type=Types.TUPLE([Types.BIG_DEC(), Types.SQL_DATE(), Types.SQL_TIME(), Types.SQL_TIMESTAMP(), Types.INSTANT()]))
typed.print("typed")
typed.rebalance().map(lambda t: " ".join(repr(v) for v in t), output_type=Types.STRING()).print("values")

env.from_collection([1, 2], type_info=Types.INT()) \
    .map(lambda x: x / 4, output_type=Types.BIG_DEC()) \
    .rebalance() \
    .map(lambda d: repr(d), output_type=Types.STRING()) \
    .print("decimal")
env.from_collection([1], type_info=Types.INT()) \
    .map(lambda _: datetime.datetime(2024, 2, 29, 23, 59), output_type=Types.SQL_DATE()) \
    .rebalance() \
    .map(lambda d: repr(d), output_type=Types.STRING()) \
    .print("date")
env.execute("nested paths with types")
