"""The coordinator: runs a job's epoch loop in the driver (DESIGN sections 3 and 4).

For every epoch it plans how far each source split advances, runs the epoch on Spark, and
commits it: only when every task of the epoch succeeded do the new split positions, the tasks'
state files and the sinks' output become the base of the next epoch. It never touches records.
"""

from __future__ import annotations

import atexit
import logging
import sys
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowpoint.errors import FlowpointError, JobExecutionError
from flowpoint.runtime.job import JobExecutionResult, JobStatus, new_job_id
from flowpoint.state.working import (
    CommittedChain,
    default_working_dir,
    read_committed_tables,
    remove_job_dir,
)
from flowpoint.tasks.stage_task import EpochSpec, TaskAck

if TYPE_CHECKING:
    from flowpoint.api.environment import StreamExecutionEnvironment
    from flowpoint.connectors.source import Source, SourceSplit
    from flowpoint.graph.jobgraph import JobGraph, Node

log = logging.getLogger("flowpoint")


@dataclass
class SplitState:
    node: Node
    index: int  # position among the source's splits: the order of its records
    split: SourceSplit
    position: Any
    finished: bool = False


class Coordinator:
    def __init__(self, graph: JobGraph, env: StreamExecutionEnvironment, spark: Any):
        self.graph = graph
        self.spark = spark
        self.config = env.get_configuration()
        self.env = env
        self.job_id = new_job_id()
        self.job_name = graph.job_name
        self.status = JobStatus.CREATED
        self.failure: BaseException | None = None
        self.done = threading.Event()
        self.thread: threading.Thread | None = None
        self._cancel = threading.Event()
        self.epoch = 0
        self.records_read = 0
        self.chains: dict[tuple[int, int], CommittedChain] = {}
        self.splits: dict[int, list[SplitState]] = {}
        self.working_dir = self.config.get("state.working.dir") or default_working_dir()
        self._started = 0.0
        self._ended = 0.0
        self._executor: Any = None
        self._last_progress = 0.0

    # -- control -------------------------------------------------------------------------------

    def cancel(self) -> None:
        if self.done.is_set():
            return
        self._cancel.set()
        self.status = JobStatus.CANCELLING
        executor = self._executor
        if executor is not None:
            try:
                executor.sc.cancelJobGroup(self.job_id)
            except Exception:  # noqa: BLE001 - the job may already be between epochs
                pass

    def result(self) -> JobExecutionResult:
        return JobExecutionResult(
            self.job_id, self.job_name, int((self._ended - self._started) * 1000), self.epoch, self.records_read, self
        )

    # -- the epoch loop ------------------------------------------------------------------------

    def run(self) -> None:
        from flowpoint.spark.epoch_executor import SparkEpochExecutor
        from flowpoint.tasks.plan import build_stage_plans

        self._started = time.monotonic()
        try:
            spark = self.spark
            params = self.env.get_config().get_global_job_parameters()
            plans = build_stage_plans(self.graph, self.job_id, params)
            self._executor = SparkEpochExecutor(spark, self.graph, plans, self.job_id)
            spark.sparkContext.setJobGroup(self.job_id, f"flowpoint job {self.job_name}", interruptOnCancel=True)
            atexit.register(remove_job_dir, self.working_dir, self.job_id)
            self._init_splits()
            self.status = JobStatus.RUNNING
            self._progress(f"job {self.job_name!r} ({self.job_id}) running on Spark {spark.sparkContext.master}")
            self._loop()
            self.status = JobStatus.CANCELED if self._cancel.is_set() else JobStatus.FINISHED
        except BaseException as e:  # noqa: BLE001 - reported through the client
            if self._cancel.is_set():
                self.status = JobStatus.CANCELED
            else:
                self.status = JobStatus.FAILED
                self.failure = e
                if not isinstance(e, FlowpointError):
                    log.exception("job %s failed", self.job_id)
        finally:
            self._ended = time.monotonic()
            for node in self.graph.sinks():
                try:
                    node.t.sink.on_job_end(self.status.value)
                except Exception:  # noqa: BLE001
                    log.exception("sink %s failed at job end", node.name)
            if self._executor is not None:
                self._executor.close()
            self._final_progress()
            self.done.set()

    def _init_splits(self) -> None:
        for node in self.graph.sources():
            source: Source = node.t.source
            splits = source.create_splits(node.parallelism)
            self.splits[node.id] = [SplitState(node, i, s, s.start) for i, s in enumerate(splits)]

    def _discover(self) -> None:
        for node in self.graph.sources():
            states = self.splits[node.id]
            for s in node.t.source.discover_splits([st.split for st in states]):
                states.append(SplitState(node, len(states), s, s.start))

    def _plan(self, elapsed: float) -> tuple[dict[int, list[list]], dict[tuple[int, int], tuple[Any, bool]], int]:
        """Decide the epoch's reads: ``reads[stage][partition]`` and the new positions."""
        budget = int(self.config.get("execution.epoch.max-records"))
        active = [st for states in self.splits.values() for st in states if not st.finished]
        per_split = max(1, budget // max(1, len(active)))
        reads: dict[int, list[list]] = {}
        new_positions: dict[tuple[int, int], tuple[Any, bool]] = {}
        planned = 0
        for st in active:
            source: Source = st.node.t.source
            plan = source.plan(st.split, st.position, per_split, elapsed)
            new_positions[(st.node.id, st.index)] = (plan.end, plan.finished)
            if plan.end != st.position:
                stage = st.node.stage_id
                p = st.node.parallelism
                parts = reads.setdefault(stage, [[] for _ in range(p)])
                parts[st.index % p].append((st.index, st.split, source.read_spec(st.split, st.position, plan.end)))
                planned += plan.records
        return reads, new_positions, planned

    def _all_finished(self, new_positions: dict | None = None) -> bool:
        for states in self.splits.values():
            for st in states:
                finished = st.finished
                if new_positions and (st.node.id, st.index) in new_positions:
                    finished = new_positions[(st.node.id, st.index)][1]
                if not finished:
                    return False
        return all(n.t.source.is_bounded() for n in self.graph.sources())

    def _loop(self) -> None:
        idle_s = int(self.config.get("execution.epoch.interval")) / 1000.0
        compaction_bytes = int(self.config.get("state.working.compaction-bytes"))
        read_started = time.monotonic()
        while not self._cancel.is_set():
            self._discover()
            reads, new_positions, planned = self._plan(time.monotonic() - read_started)
            last = self._all_finished(new_positions)
            if planned == 0 and not last:
                self._cancel.wait(idle_s)
                continue
            if planned == 0 and last and self.epoch > 0:
                break
            self.epoch += 1
            compact = {k for k, c in self.chains.items() if c.wants_base(compaction_bytes)}
            spec = EpochSpec(self.job_id, self.epoch, self.working_dir, dict(self.chains), compact, last)
            t0 = time.monotonic()
            acks = self._executor.run_epoch(spec, reads)
            self._commit(acks, new_positions)
            self._report(planned, time.monotonic() - t0)
            if last:
                break

    def _commit(self, acks: list[TaskAck], new_positions: dict) -> None:
        latest: dict[tuple[int, int], TaskAck] = {}
        for ack in acks:
            latest[(ack.stage_id, ack.partition)] = ack  # a recomputed task reports the same result
        for ack in latest.values():
            if ack.error is not None:
                raise ack.error
        missing = [(s.id, p) for s in self.graph.stages for p in range(s.parallelism) if (s.id, p) not in latest]
        if missing:
            msg = f"epoch {self.epoch}: no acknowledgement from tasks (stage, partition) {missing}; not committed"
            raise JobExecutionError(msg)
        for key, ack in latest.items():
            chain = self.chains.get(key) or CommittedChain()
            self.chains[key] = chain.committed(ack.epoch, ack.token, ack.state)
        for (node_id, index), (end, finished) in new_positions.items():
            st = self.splits[node_id][index]
            st.position, st.finished = end, finished
        source_stages = {n.stage_id for n in self.graph.sources()}
        self.records_read += sum(a.records_in for a in latest.values() if a.stage_id in source_stages)
        for node in self.graph.sinks():
            payloads = sorted(
                (a.partition, a.sink_payloads[node.id])
                for a in latest.values()
                if a.stage_id == node.stage_id and node.id in a.sink_payloads
            )
            node.t.sink.on_epoch_committed(self.epoch, payloads, node.parallelism)

    # -- progress ------------------------------------------------------------------------------

    def _progress(self, line: str) -> None:
        if int(self.config.get("execution.progress.interval")) >= 0:
            print(f"[flowpoint] {line}", file=sys.stderr, flush=True)

    def _report(self, records: int, seconds: float) -> None:
        interval = int(self.config.get("execution.progress.interval"))
        now = time.monotonic()
        if interval < 0 or (interval and (now - self._last_progress) * 1000 < interval):
            return
        self._last_progress = now
        rate = records / seconds if seconds > 0 else 0.0
        self._progress(
            f"epoch {self.epoch}: {records:,} records in {seconds:.2f} s ({rate:,.0f} records/s); "
            f"total {self.records_read:,}"
        )

    def _final_progress(self) -> None:
        seconds = (self._ended or time.monotonic()) - self._started
        rate = self.records_read / seconds if seconds > 0 else 0.0
        self._progress(
            f"job {self.job_name!r} ({self.job_id}) {self.status.value}: {self.epoch} epochs, "
            f"{self.records_read:,} records in {seconds:.1f} s ({rate:,.0f} records/s)"
        )

    # -- reading state after the job -----------------------------------------------------------

    def read_keyed_state(self, uid: str, state_name: str | None) -> dict:
        node = self.graph.node_by_uid(uid)
        stage = self.graph.stages[node.stage_id]
        merged: dict[str, dict] = {}
        for p in range(stage.parallelism):
            chain = self.chains.get((stage.id, p))
            if chain is None:
                continue
            for name, table in read_committed_tables(chain).get(uid, {}).items():
                merged.setdefault(name, {}).update(table)
        if state_name is None:
            return merged
        return merged.get(state_name, {})
