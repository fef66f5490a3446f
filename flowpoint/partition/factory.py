"""The partition backend a task's state lives in, by the job's state backend."""

from __future__ import annotations

from flowpoint.partition.backend import HashMapPartitionBackend, PartitionBackend
from flowpoint.partition.protocol import StateLocation
from flowpoint.partition.rocksdb_backend import RocksDBPartitionBackend
from flowpoint.partition.working import TaskStateCache


def partition_backend(location: StateLocation, max_parallelism: int, stateful: bool = True, cache: TaskStateCache | None = None) -> PartitionBackend:
    """The factory: the partition backend named by ``location.backend`` (a stage without keyed
    state keeps only its opened operators, in this process, as the HashMap backend does)."""
    if location.backend == "rocksdb" and stateful:
        return RocksDBPartitionBackend(location, max_parallelism, cache)
    return HashMapPartitionBackend(location, max_parallelism, cache)
