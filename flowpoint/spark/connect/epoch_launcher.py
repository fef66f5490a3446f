"""One epoch as one DataFrame query on a Spark Connect session (the classic adapter's
``epoch_launcher.py`` without RDDs, broadcast variables or accumulators).

Per stage: the stage's input is a local DataFrame of its partitions' task slices (a source
stage's also carry the partitions' split reads), unioned with, per upstream stage, the rows of
the upstream stage's output on the edges into this stage; ``repartitionById(p, "dest")`` puts
every row into the partition the upstream task computed (key group, forward, rebalance,
broadcast, custom: as on the classic adapter); ``mapInArrow`` runs the stage task. The stage's
plan travels in the function's closure (pickled once per job, decoded once per worker process).

Acknowledgements are rows of the result (``edge`` = ``frames.ACK``): each task emits its own
and passes on those its input carried, towards one consumer of its stage (the *carrier*), so
that the rows of every task reach the query's result through exactly one path and each stage's
output is computed once. A stage with several consumers is cached for the query, as the classic
adapter persists it. Only successful task attempts contribute rows to a shuffle or the result,
so a retried or speculative task is counted once (Spark's accumulator gave the same).
"""

from __future__ import annotations

import hashlib
import pickle
from collections import deque
from typing import Any

import cloudpickle

from flowpoint.errors import JobExecutionError
from flowpoint.graph.jobgraph import JobGraph
from flowpoint.partition.protocol import TaskAck, TaskSlice, UnitSpec
from flowpoint.pickles import dumps
from flowpoint.spark.connect.frames import (
    ACK,
    DDL,
    SLICE,
    batches,
    by_destination,
    local_frame,
    rows_of,
)
from flowpoint.spark.tasks_common import executor_id, spark_failure
from flowpoint.tasks.plan import StagePlan
from flowpoint.tasks.stage_task import run_stage_task
from flowpoint.worker_resources import worker

_PLANS = 64  # (job, stage) plans a worker keeps decoded


def _plan(key: tuple[str, int, str], blob: bytes) -> StagePlan:
    """Executor side: the stage's plan, decoded once per worker process (LRU). ``key``: the job
    id, the stage id and the plan's SHA-256, computed on the driver (a job id can come again, a
    resubmitted job or a test's fixed id, with other plans: a stale plan would run the other
    job's functions and sinks)."""
    plans = worker().cache("connect-epoch-executor.plans", _PLANS)
    return plans.get_or_create(key, lambda: cloudpickle.loads(blob))


def _stage_task(plan_key: tuple[str, int, str], plan_blob: bytes, spec: UnitSpec, source: bool, carrier_p: int | None):
    """The ``mapInArrow`` function of one stage. ``carrier_p``: the parallelism of the consumer
    that carries this stage's acknowledgements (None: the stage is terminal, its rows are the
    result)."""

    def task(iterator: Any) -> Any:
        from pyspark import TaskContext

        plan = _plan(plan_key, plan_blob)
        stage_id = plan_key[1]
        tc = TaskContext.get()
        attempt = tc.attemptNumber() if tc else 0
        token = f"{tc.stageId()}.{tc.taskAttemptId()}" if tc else "local"
        # dest -> [slice (and reads), inputs, acknowledgements passed on]: a Spark task normally
        # holds one destination; should Spark ever merge partitions, each still runs on its own
        received: dict[int, list] = {}
        for batch in iterator:
            for dest, edge, blob in rows_of(batch):
                entry = received.setdefault(dest, [None, [], []])
                if edge == SLICE:
                    entry[0] = pickle.loads(blob)
                elif edge == ACK:
                    entry[2].append(blob)
                else:
                    entry[1].append(pickle.loads(blob))
        out: list[tuple[int, int, bytes]] = []
        for partition in sorted(received):
            described, inputs, passed = received[partition]
            if source and described is not None:
                described, inputs = described
            if not isinstance(described, TaskSlice) or described.partition != partition:
                msg = f"stage {stage_id} partition {partition} of epoch {spec.unit} received no task slice of its own; not run"
                raise JobExecutionError(msg)
            outputs, ack = run_stage_task(plan, spec, described, attempt, token, inputs)
            ack.host = executor_id()
            out.extend((dest, edge_id, dumps(payload)) for edge_id, dest, payload in outputs)
            ack_dest = partition % carrier_p if carrier_p else 0
            out.extend((ack_dest, ACK, blob) for blob in (dumps(ack), *passed))
        yield from batches(out)

    return task


class ConnectEpochLauncher:
    def __init__(self, spark: Any, graph: JobGraph, plans: dict[int, StagePlan], job_id: str, tag: str):
        self.spark = spark
        self.graph = graph
        self.job_id = job_id
        self.tag = tag
        self.plan_blobs = {sid: cloudpickle.dumps(plan) for sid, plan in plans.items()}
        self.plan_keys = {sid: (job_id, sid, hashlib.sha256(blob).hexdigest()) for sid, blob in self.plan_blobs.items()}
        self.consumers = {s.id: graph.consumers(s) for s in graph.stages}
        self.spark_jobs: deque[tuple[int, tuple[int, ...]]] = deque(maxlen=1000)  # Spark's job ids: not on Connect
        # the consumer that carries each stage's acknowledgements: the first (None: terminal)
        self.carrier: dict[int, int | None] = {}
        for s in graph.stages:
            consumers = self._consumer_ids(s.id)
            self.carrier[s.id] = consumers[0] if consumers else None

    def _consumer_ids(self, stage_id: int) -> list[int]:
        ids: list[int] = []
        for e in self.consumers[stage_id]:
            cid = e.stage_id
            if cid not in ids:
                ids.append(cid)
        return ids

    def run_epoch(self, spec: UnitSpec, source_reads: dict[int, list[list]], slices: dict[int, list[TaskSlice]]) -> list[TaskAck]:
        """Run one epoch (arguments as the classic executor's ``run_epoch``)."""
        frames: dict[int, Any] = {}
        cached: list[Any] = []
        parallelism = {s.id: s.parallelism for s in self.graph.stages}
        for stage in self.graph.stages:
            p = stage.parallelism
            if stage.is_source:
                reads = source_reads.get(stage.id) or [[] for _ in range(p)]
                rows = [(i, SLICE, dumps((s, r))) for i, (s, r) in enumerate(zip(slices[stage.id], reads, strict=True))]
            else:
                rows = [(i, SLICE, dumps(s)) for i, s in enumerate(slices[stage.id])]
            frame = local_frame(self.spark, rows)
            edges_from: dict[int, list[int]] = {}
            for e in stage.inputs:
                edges_from.setdefault(self.graph.nodes[e.upstream].stage_id, []).append(e.edge_id)
            for up, edge_ids in edges_from.items():
                wanted = f"edge IN ({', '.join(str(i) for i in edge_ids)})"
                if self.carrier[up] == stage.id:
                    wanted += f" OR edge = {ACK}"
                frame = frame.union(frames[up].filter(wanted))
            carrier = self.carrier[stage.id]
            task = _stage_task(self.plan_keys[stage.id], self.plan_blobs[stage.id], spec, stage.is_source,
                               None if carrier is None else parallelism[carrier])
            out = by_destination(frame, p).mapInArrow(task, DDL)
            if len(self._consumer_ids(stage.id)) > 1:
                out = out.cache()  # computed once for all its consumers
                cached.append(out)
            frames[stage.id] = out
        terminal = [frames[s.id] for s in self.graph.stages if self.carrier[s.id] is None]
        result = terminal[0]
        for other in terminal[1:]:
            result = result.union(other)
        try:
            rows = result.filter(f"edge = {ACK}").collect()
        except Exception as e:
            raise spark_failure(e, spec.unit) from e
        finally:
            for df in cached:
                try:
                    df.unpersist()
                except Exception:  # noqa: BLE001 - a cache left behind costs memory, not results
                    pass
            self.spark_jobs.append((spec.unit, ()))
        return [pickle.loads(row[2]) for row in rows]

    def close(self) -> None:
        self.plan_blobs = {}
