"""Turns one epoch of a job graph into one Spark job and returns the tasks' acknowledgements.

Per stage: a source stage is ``parallelize`` over its partitions (each element: the split reads
of that partition and its slice); any other stage reads, partition by partition, each input edge
shuffled with ``partitionBy(p, destination)`` (the destination partition was computed from the
key group in the upstream task, in the same Python pipeline as the upstream task); then
``mapPartitionsWithIndex`` runs the stage task. A stage's partitions get their slices through
the first input edge: the upstream tasks pass them on as records. Acknowledgements travel
through an accumulator, which Spark merges only for successful task attempts.

Locality: a stateful stage's partitions prefer the hosts that hold their state
(``flowpoint.spark.locality``).
"""

from __future__ import annotations

import hashlib
from collections import deque
from dataclasses import replace
from typing import Any

import cloudpickle
from pyspark import AccumulatorParam, StorageLevel, TaskContext

from flowpoint.errors import JobExecutionError
from flowpoint.graph.jobgraph import JobGraph
from flowpoint.partition.protocol import TaskAck, TaskSlice, UnitSpec
from flowpoint.spark.locality import StateLocality, destination
from flowpoint.spark.tasks_common import executor_id, spark_failure  # noqa: F401 - spark_failure: the continuous loop's too
from flowpoint.spark.ui import group_job_ids
from flowpoint.tasks.plan import StagePlan
from flowpoint.tasks.stage_task import run_stage_task
from flowpoint.worker_resources import BoundedCache, worker

_PLAN_JOBS = 16  # jobs whose decoded plans a worker keeps


def _plans() -> BoundedCache:
    """Executor side: (job id, plans' SHA-256) -> {stage id: StagePlan}, decoded once per worker process (the
    broadcast holds every stage's plan of the job)."""
    return worker().cache("epoch-executor.plans", _PLAN_JOBS)


class _ListParam(AccumulatorParam):
    def zero(self, value: list) -> list:
        return []

    def addInPlace(self, value1: list, value2: list) -> list:  # noqa: N802 - PySpark's name
        value1.extend(value2)
        return value1




def _make_task(plans_key: tuple[str, str], stage_id: int, plans_bc: Any, spec: UnitSpec, acc: Any):
    """``plans_key``: the job id and the plans' SHA-256 (a job id can come again, a resubmitted
    job or a test's fixed id, with other plans: a stale plan would run the other job's functions)."""

    def task(partition: int, iterator: Any):
        plan = _plans().get_or_create(plans_key, lambda: cloudpickle.loads(plans_bc.value))[stage_id]
        tc = TaskContext.get()
        attempt = tc.attemptNumber() if tc else 0
        token = f"{tc.stageId()}.{tc.taskAttemptId()}" if tc else f"local.{partition}"
        task_slice = None
        inputs = []
        if plan.source_reader is not None:
            for element_slice, reads in iterator:  # one element: this partition's slice and split reads
                task_slice = element_slice
                inputs.extend(reads)
        else:
            for _, payload in iterator:
                if payload is None:  # the partition's locality anchor (_Anchors)
                    continue
                if isinstance(payload, TaskSlice):
                    task_slice = payload
                else:
                    inputs.append(payload)
        if task_slice is None or task_slice.partition != partition:
            msg = f"stage {stage_id} partition {partition} of epoch {spec.unit} received no task slice of its own; not run"
            raise JobExecutionError(msg)
        outputs, ack = run_stage_task(plan, spec, task_slice, attempt, token, inputs)
        ack.host = executor_id()
        acc.add([ack])
        outputs.extend(task_slice.forward)  # downstream partitions' slices, whatever this task's outcome
        return iter(outputs)

    return task


class SparkEpochLauncher:
    def __init__(self, spark: Any, graph: JobGraph, plans: dict[int, StagePlan], job_id: str):
        self.spark = spark
        self.sc = spark.sparkContext
        self.graph = graph
        self.job_id = job_id
        blob = cloudpickle.dumps(plans)
        self.plans_bc = self.sc.broadcast(blob)
        self.plans_key = (job_id, hashlib.sha256(blob).hexdigest())  # what a worker caches the decoded plans under
        self.acc = self.sc.accumulator([], _ListParam())
        self.consumers = {s.id: graph.consumers(s) for s in graph.stages}
        self.stateful = {s.id for s in graph.stages if not s.is_source and any(graph.nodes[n].keyed for n in s.nodes)}
        self.locality = StateLocality(self.sc)
        self.spark_jobs: deque[tuple[int, tuple[int, ...]]] = deque(maxlen=1000)  # (epoch, its Spark job ids)

    def run_epoch(self, spec: UnitSpec, source_reads: dict[int, list[list]], slices: dict[int, list[TaskSlice]]) -> list[TaskAck]:
        """Run one epoch. ``source_reads[stage][partition]`` lists ``(split index, split, read spec)``;
        ``slices[stage][partition]`` is what that partition alone receives."""
        sc = self.sc
        rdds: dict[int, Any] = {}
        persisted = []
        description = f"flowpoint {self.graph.job_name} epoch {spec.unit}"
        sc.setJobDescription(description)
        if self.stateful:
            self.locality.refresh()
        slices = self._routed(slices)
        for stage in self.graph.stages:
            p = stage.parallelism
            if stage.is_source:
                reads = source_reads.get(stage.id) or [[] for _ in range(p)]
                base = sc.parallelize(list(zip(slices[stage.id], reads, strict=True)), p)  # element i: partition i's slice and split reads
            else:
                # each input edge is shuffled on its own, by one partitioner, then read partition
                # by partition (a PartitionerAwareUnionRDD): a union before the shuffle would cut
                # the upstream Python pipeline in two. The slices come with the first edge.
                shuffled = []
                for e in stage.inputs:
                    up_stage = self.graph.nodes[e.upstream].stage_id
                    edge = rdds[up_stage].filter(lambda x, eid=e.edge_id: x[0] == eid).map(lambda x: (x[1], x[2]))
                    shuffled.append(edge.partitionBy(p, destination))
                if stage.id in self.stateful:
                    shuffled.extend(self.locality.anchors(p, votes=len(shuffled) + 1))
                base = shuffled[0] if len(shuffled) == 1 else sc.union(shuffled)
                if base.getNumPartitions() != p:
                    msg = f"stage {stage.id}: Spark did not union its {len(shuffled)} shuffled inputs partition by partition"
                    raise JobExecutionError(msg)
            out = base.mapPartitionsWithIndex(_make_task(self.plans_key, stage.id, self.plans_bc, spec, self.acc))
            if len(self.consumers[stage.id]) > 1:
                out = out.persist(StorageLevel.MEMORY_AND_DISK)
                persisted.append(out)
            rdds[stage.id] = out
        terminal = [rdds[s.id] for s in self.graph.stages if not self.consumers[s.id]]
        self.acc.value = []
        before = group_job_ids(sc, self.job_id)
        try:
            (terminal[0] if len(terminal) == 1 else sc.union(terminal)).count()
        except Exception as e:
            raise spark_failure(e, spec.unit) from e
        finally:
            for r in persisted:
                r.unpersist(blocking=False)
            self.spark_jobs.append((spec.unit, tuple(sorted(group_job_ids(sc, self.job_id) - before))))
        acks: list[TaskAck] = list(self.acc.value)
        self.acc.value = []
        return acks

    def _routed(self, slices: dict[int, list[TaskSlice]]) -> dict[int, list[TaskSlice]]:
        """The slices with each downstream stage's slices forwarded by the tasks of its first
        input edge's upstream stage (partition ``i`` by upstream partition ``i % upstream p``),
        so that they reach their tasks through the epoch's own shuffle, no extra Spark task."""
        routed = {sid: list(row) for sid, row in slices.items()}
        for stage in reversed(self.graph.stages):  # downstream first: a forwarded slice carries its own forwards
            if stage.is_source:
                continue
            first = stage.inputs[0]
            up = self.graph.nodes[first.upstream].stage_id
            up_row = routed[up]
            extra: dict[int, list] = {}
            for s in routed[stage.id]:
                extra.setdefault(s.partition % len(up_row), []).append((first.edge_id, s.partition, s))
            for j, items in extra.items():
                up_row[j] = replace(up_row[j], forward=(*up_row[j].forward, *items))
        return routed

    def close(self) -> None:
        self.locality.close()
        try:
            self.plans_bc.destroy()
        except Exception:  # noqa: BLE001 - best effort on shutdown
            pass
