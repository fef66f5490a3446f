# execute_and_collect(limit=n) gives exactly n records (fewer when the stream has fewer), at
# parallelism 1 and 2, and refuses limit=0; a keyed stream's records are Row(f0=key, f1=value) converted by the key's
# and the stream's types; nested row and tuple types.
from pyflink.common import Row, Types
from pyflink.datastream import StreamExecutionEnvironment

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
numbers = env.from_collection(list(range(10)), type_info=Types.INT())
print(numbers.map(lambda n: n * 2, output_type=Types.INT()).execute_and_collect(limit=3))
try:
    numbers.execute_and_collect(limit=0)
    print("limit=0 accepted")
except Exception:
    print("limit=0 refused")
print(len(numbers.execute_and_collect(limit=20)))
print(len(numbers.map(lambda n: n, output_type=Types.INT()).set_parallelism(2).execute_and_collect(limit=3)))
with numbers.execute_and_collect() as results:
    print(sorted(results))

pairs = env.from_collection([("a", 1), ("b", 2), ("a", 3)], type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
keyed = pairs.key_by(lambda p: p[0], key_type=Types.STRING())
for record in keyed.execute_and_collect(limit=2):
    print(type(record).__name__, repr(record))
by_pair = pairs.key_by(lambda p: (p[0], p[1] % 2), key_type=Types.TUPLE([Types.STRING(), Types.INT()]))
for record in by_pair.execute_and_collect():
    print(type(record).__name__, repr(record), type(record[0]).__name__)
rows = pairs.map(lambda p: Row(name=p[0], inner=Row(p[1], (p[1], p[0]))),
                 output_type=Types.ROW_NAMED(["name", "inner"], [
                     Types.STRING(), Types.ROW([Types.INT(), Types.TUPLE([Types.LONG(), Types.STRING()])])]))
for record in rows.key_by(lambda r: r.name, key_type=Types.STRING()).execute_and_collect():
    print(type(record).__name__, repr(record), type(record[1]).__name__, type(record[1][1]).__name__)
for record in rows.execute_and_collect(limit=3):
    print(repr(record), record.name, record.inner[1])
