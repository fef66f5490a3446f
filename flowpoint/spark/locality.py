"""Locality: a stateful stage's partition runs on the host that holds its state.

A partition's state is cheapest where its last task ran: in that Python worker's memory (HashMap),
in that executor's local copies of the durable files, or in its RocksDB directory. Elsewhere it is
rebuilt from durable storage (correct, at a cost proportional to the partition's state). Spark has
no Python API for a task's preferred location, so flowpoint uses what its scheduler already does:

- Each parallelism ``p`` has an *anchor*: an RDD of one empty element per partition, made with
  ``SparkContext.makeRDD`` and a preferred host per element (so partition ``i``'s element is
  produced on its assigned host), then partitioned exactly as a stateful stage's input
  (``partitionBy(p, identity)``, so each anchor partition's only map output is on that host) and
  cached there.
- A stage's input is the union of its shuffled inputs (each input edge and the partitions'
  slices, each shuffled on its own by one partitioner); a stateful stage's union also holds the
  anchor, repeated once more than there are other inputs. With one partitioner, Spark's union is
  a ``PartitionerAwareUnionRDD``: its partition ``i`` reads partition ``i`` of each parent, and
  prefers the host most of those parents prefer (a shuffle prefers the hosts holding a fifth of
  its map output or more): the anchor's, outvoting the rest. Delay scheduling
  (``spark.locality.wait``, 3 s) then runs the task there whenever that host has a free core.

Partitions are spread round-robin over the executors' hosts. When hosts change, the assignment
changes as little as it can: a lost host's partitions go to the least loaded hosts that remain;
a new host takes partitions from the most loaded ones until the spread is even. Spark's union
reports hosts, so the preference is per host (one executor per host is the usual deployment).
Local masters (``local[...]``, ``local-cluster[...]``: one host) need none of this.
"""

from __future__ import annotations

import logging
from typing import Any

from pyspark import StorageLevel
from pyspark.rdd import RDD
from pyspark.serializers import BatchedSerializer, CPickleSerializer

log = logging.getLogger(__name__)


def destination(k: int) -> int:
    """The partitioner of every flowpoint shuffle: records carry their destination partition.
    One function object, so Spark sees one partitioner (``PythonPartitioner`` compares by it)."""
    return k


def spread(partitions: int, hosts: list[str], previous: dict[int, str] | None = None) -> dict[int, str]:
    """Partition -> host, even over ``hosts`` (counts differ by at most one), keeping as many of
    ``previous``'s assignments as that allows."""
    if not hosts:
        return {}
    hosts = sorted(hosts)
    placed = {i: h for i, h in (previous or {}).items() if h in hosts and i < partitions}
    load = {h: [i for i in sorted(placed) if placed[i] == h] for h in hosts}
    base, extra = divmod(partitions, len(hosts))
    # the most loaded hosts may keep base + 1 partitions; take the rest away
    allowed = {h: base + (1 if rank < extra else 0) for rank, h in enumerate(sorted(hosts, key=lambda h: (-len(load[h]), h)))}
    free = [i for i in range(partitions) if i not in placed]
    for h in hosts:
        while len(load[h]) > allowed[h]:
            i = load[h].pop()
            del placed[i]
            free.append(i)
    for i in sorted(free):
        h = min(hosts, key=lambda h: (len(load[h]) - allowed[h], len(load[h]), h))
        load[h].append(i)
        placed[i] = h
    return placed


def executor_hosts(sc: Any) -> list[str]:
    """The hosts of the application's live executors (not the driver's), or [] in local mode."""
    try:
        return live_executor_hosts(sc)
    except Exception as e:  # noqa: BLE001 - locality is an optimization; never fail an epoch for it
        log.debug("cannot list executors for locality: %s", e)
        return []


def live_executor_hosts(sc: Any) -> list[str]:
    """:func:`executor_hosts` from Spark's status store (no Python API), raising what it raises."""
    executors = sc._jsc.sc().statusStore().executorList(True)  # noqa: SLF001
    hosts = set()
    for k in range(executors.size()):
        e = executors.apply(k)
        if e.id() != "driver":
            hosts.add(e.hostPort().rsplit(":", 1)[0])
    return sorted(hosts)


def located_rdd(sc: Any, items: list, hosts: list[str]) -> RDD:
    """An RDD with one partition per item, partition ``i`` preferring ``hosts[i]``
    (``SparkContext.makeRDD`` with location preferences, which PySpark does not expose)."""
    jvm = sc._jvm  # noqa: SLF001
    ser = CPickleSerializer()
    pairs = jvm.java.util.ArrayList()
    for item, host in zip(items, hosts, strict=True):
        where = jvm.java.util.ArrayList()
        where.append(host)
        pairs.append(jvm.scala.Tuple2(ser.dumps([item]), jvm.PythonUtils.toSeq(where)))
    tag = sc._jsc.emptyRDD().classTag()  # noqa: SLF001 - ClassTag[Object], as PySpark's own RDDs
    jrdd = sc._jsc.sc().makeRDD(jvm.PythonUtils.toSeq(pairs), tag)  # noqa: SLF001
    return RDD(jrdd.toJavaRDD(), sc, BatchedSerializer(ser, 1))


class StateLocality:
    """The anchors of one job's stateful stages (see the module doc)."""

    def __init__(self, sc: Any):
        self.sc = sc
        # local[...] and local-cluster[...]: every executor is on this host, a host preference is moot
        self.single_host = str(getattr(sc, "master", "")).startswith("local")
        self.hosts: list[str] = []
        self.placement: dict[int, dict[int, str]] = {}  # parallelism -> partition -> host
        self.anchors_by_p: dict[int, RDD] = {}

    def refresh(self) -> None:
        """Once per epoch: if the executors' hosts changed, move as few partitions as needed."""
        if self.single_host:
            return
        hosts = executor_hosts(self.sc)
        if hosts == self.hosts:
            return
        if self.hosts:
            log.info("executor hosts changed from %s to %s: stateful partitions are placed again", self.hosts, hosts)
        self.hosts = hosts
        for p in list(self.anchors_by_p):
            self._drop(p)
        self.placement = {p: spread(p, hosts, old) for p, old in self.placement.items()}

    def anchors(self, p: int, votes: int) -> list[RDD]:
        """The anchor of parallelism ``p``, ``votes`` times, to union with a stateful stage's
        shuffled inputs (all partitioned by ``partitionBy(p, destination)``); with more votes
        than all other inputs together, its host is the one the union prefers. [] in local mode."""
        if not self.hosts:
            return []
        anchor = self.anchors_by_p.get(p)
        if anchor is None:
            placement = self.placement.get(p) or spread(p, self.hosts)
            self.placement[p] = placement
            items = [(i, None) for i in range(p)]
            anchor = located_rdd(self.sc, items, [placement[i] for i in range(p)]).partitionBy(p, destination)
            anchor = self.anchors_by_p[p] = anchor.persist(StorageLevel.MEMORY_ONLY)
        return [anchor] * votes

    def _drop(self, p: int) -> None:
        rdd = self.anchors_by_p.pop(p, None)
        if rdd is not None:
            try:
                rdd.unpersist(blocking=False)
            except Exception:  # noqa: BLE001 - best effort (e.g. on shutdown)
                pass

    def close(self) -> None:
        for p in list(self.anchors_by_p):
            self._drop(p)
