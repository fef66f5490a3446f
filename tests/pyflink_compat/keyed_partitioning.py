# The partitionings PyFlink refuses on a KeyedStream: each raises an Exception with PyFlink's
# message; the keyed stream stays usable afterwards.
from pyflink.common import Types
from pyflink.datastream import StreamExecutionEnvironment
from pyflink.datastream.functions import Partitioner


class First(Partitioner):
    def partition(self, key, num_partitions):
        return 0


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(1)
keyed = env.from_collection([("a", 1), ("b", 2), ("a", 3)], type_info=Types.TUPLE([Types.STRING(), Types.INT()])) \
    .key_by(lambda e: e[0], key_type=Types.STRING())
attempts = [
    ("broadcast()", lambda: keyed.broadcast()),
    ("shuffle()", lambda: keyed.shuffle()),
    ("rebalance()", lambda: keyed.rebalance()),
    ("rescale()", lambda: keyed.rescale()),
    ("forward()", lambda: keyed.forward()),
    ("partition_custom(...)", lambda: keyed.partition_custom(First(), lambda e: e[0])),
]
for name, attempt in attempts:
    try:
        attempt()
        print(name, "accepted")
    except Exception as e:
        print(name, "raised:", e)
print("global:", hasattr(keyed, "global"), hasattr(keyed, "global_"))
keyed.sum(1).print()
env.execute("keyed partitioning")
