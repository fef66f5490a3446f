"""What the driver holds of a job between commits: its committed state (driver side).

Per stateful task the chain of committed state files; the watermark of every channel and the
state of every watermark generator; CheckpointedFunction state; the kinds and schemas states
were declared with; operator metrics; how many records the sources produced. A loop commits the
acknowledgements of one unit of work (an epoch; in the continuous runtime, the work up to a
checkpoint) with :meth:`CommittedState.accept` and :meth:`CommittedState.commit`; the numbers
it commits under are its own. Source positions are the split planner's (driver/splits.py).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from flowpoint.api.operator_state import redistribute
from flowpoint.api.time import MIN_WATERMARK
from flowpoint.errors import CheckpointError, JobExecutionError
from flowpoint.metrics.store import MetricStore, OperatorInfo
from flowpoint.partition.committed_chain import CommittedChain

if TYPE_CHECKING:
    from flowpoint.driver.restore import RestoredJob
    from flowpoint.graph.jobgraph import JobGraph
    from flowpoint.partition.protocol import TaskAck

log = logging.getLogger("flowpoint")

TaskKey = tuple[int, int]  # (stage id, partition)


class CommittedState:
    def __init__(self, graph: JobGraph):
        self.graph = graph
        self.chains: dict[TaskKey, CommittedChain] = {}
        # event time (docs/architecture.md, section 8): every watermark channel's committed mark, generator states
        self.watermarks: dict[str, tuple[int, bool]] = {}
        self.generators: dict[str, bytes] = {}
        self.operator_state: dict[str, dict] = {}  # "<uid>:<subtask>" -> CheckpointedFunction state
        # uid -> state name -> {kind, schema} registered in this run; the checkpoint coordinator
        # holds the same dict (never replaced)
        self.declared_states: dict[str, dict[str, dict]] = {}
        self.restored_uids: frozenset[str] = frozenset()  # uids whose operator state was restored
        self.metrics: dict[str, int] = {}  # committed counts (exact: one per accepted epoch or segment)
        self.live = MetricStore(operator_infos(graph))  # the tasks' metric reports, as they arrive
        self.records_read = 0
        self.channel_state: dict[str, tuple] = {}  # restored in-flight records: stage head uid -> files
        # unaligned checkpoints: "<stage head uid>:<partition>" -> the marks that subtask had seen
        # on each input channel at the cut (the records in flight came after them)
        self.input_marks: dict[str, dict[str, tuple[int, bool]]] = {}

    def reset(self) -> None:
        """A restart: the failed run's state is gone (metrics and declared states stay)."""
        self.chains = {}
        self.records_read = 0
        self.watermarks, self.generators = {}, {}
        self.operator_state, self.restored_uids = {}, frozenset()
        self.channel_state, self.input_marks = {}, {}

    def apply_restore(self, restore: RestoredJob, allow_non_restored: bool) -> None:
        """State from a checkpoint or savepoint (sinks separately: :meth:`restore_sinks`)."""
        self.watermarks, self.generators = restored_watermarks(restore.watermarks, self.graph)
        self.operator_state = restored_operator_state(restore.watermarks.get("operator_state") or {}, self.graph, allow_non_restored)
        self.restored_uids = frozenset(uid.rsplit(":", 1)[0] for uid in self.operator_state)
        self.chains = dict(restore.chains)
        self.records_read = restore.records_read
        self.channel_state = dict(restore.channel_state)
        self.input_marks = restored_input_marks(restore.watermarks.get("input_marks") or {}, self.graph)

    def restore_sinks(self, sinks: dict[str, Any] | None) -> None:
        """The sinks' driver state from a checkpoint or savepoint; None: from the beginning."""
        for node in self.graph.sinks():
            node.t.sink.restore_driver_state(None if sinks is None else sinks.get(node.uid))

    # -- committing ----------------------------------------------------------------------------

    def tasks(self) -> list[TaskKey]:
        """Every task of the job, ``(stage, partition)``: each acknowledges every commit."""
        return [(s.id, p) for s in self.graph.stages for p in range(s.parallelism)]

    def stateful_tasks(self) -> list[TaskKey]:
        """The tasks whose stages hold keyed state: each writes parts of every checkpoint."""
        return [(s.id, p) for s in self.graph.stages if any(self.graph.nodes[n].keyed for n in s.nodes) for p in range(s.parallelism)]

    def accept(self, acks: list[TaskAck], what: str) -> dict[TaskKey, TaskAck]:
        """The acknowledgements of ``what`` (e.g. "epoch 7"), one per task, or the error a task
        reported; a task that did not acknowledge fails it (JobExecutionError)."""
        latest: dict[TaskKey, TaskAck] = {}
        for ack in acks:
            latest[(ack.stage_id, ack.partition)] = ack  # a recomputed task reports the same result
        for ack in latest.values():
            if ack.error is not None:
                raise ack.error
        missing = [k for k in self.tasks() if k not in latest]
        if missing:
            msg = f"{what}: no acknowledgement from tasks (stage, partition) {missing}; not committed"
            raise JobExecutionError(msg)
        return latest

    def commit_chains(self, accepted: dict[TaskKey, TaskAck]) -> None:
        """The tasks' new state files become the base of their next work."""
        for key, ack in accepted.items():
            chain = self.chains.get(key) or CommittedChain()
            self.chains[key] = chain.committed(ack.unit, ack.token, ack.state)

    def commit(self, accepted: dict[TaskKey, TaskAck], number: int, skip_sinks: frozenset[int] | set[int] = frozenset()) -> None:
        """Watermarks, generator and operator state, declared states, metrics, records read; the
        sinks hear that their output of commit ``number`` (the epoch) is final (except
        ``skip_sinks``: the continuous runtime passed their output on as it arrived)."""
        ordered = sorted(accepted.values(), key=lambda a: (a.stage_id, a.partition))
        for ack in ordered:
            self.watermarks.update(ack.watermarks)
            seen = f"{self.graph.nodes[self.graph.stages[ack.stage_id].head].uid}:{ack.partition}"
            if ack.input_marks:
                self.input_marks[seen] = dict(ack.input_marks)
            else:  # aligned at this cut: nothing in flight to it
                self.input_marks.pop(seen, None)
            self.generators.update(ack.generators)
            self.operator_state.update(ack.operator_state)
            for uid, states in ack.declared.items():
                self.declared_states.setdefault(uid, {}).update(states)
            for name, n in ack.metrics.items():
                self.metrics[name] = self.metrics.get(name, 0) + n
            if ack.report is not None:  # the epoch runtime's (the continuous loop adds its own on arrival)
                self.live.add(ack.report)
                ack.report = None
        source_stages = {n.stage_id for n in self.graph.sources()}
        self.records_read += sum(a.records_in for a in accepted.values() if a.stage_id in source_stages)
        for node in self.graph.sinks():
            if node.id in skip_sinks:
                continue
            payloads = sorted(
                (a.partition, a.sink_payloads[node.id])
                for a in accepted.values()
                if a.stage_id == node.stage_id and node.id in a.sink_payloads
            )
            node.t.sink.on_epoch_committed(number, payloads, node.parallelism)

    def count_state_tasks(self, acks: list[TaskAck]) -> None:
        """Metrics ``stateTasks`` and ``stateTasksInMemory``: did a stateful task find its state
        in its process?"""
        for ack in acks:
            if ack.state is not None:
                self.metrics["stateTasks"] = self.metrics.get("stateTasks", 0) + 1
                self.metrics["stateTasksInMemory"] = self.metrics.get("stateTasksInMemory", 0) + (0 if ack.fresh_state else 1)

    # -- what a checkpoint or savepoint records ------------------------------------------------

    def event_time(self) -> dict[str, Any]:
        """Watermark channels, generator states and operator state, as ``_metadata`` holds them."""
        return {
            "channels": {c: [wm, idle] for c, (wm, idle) in self.watermarks.items()},
            "generators": dict(self.generators),
            "operator_state": dict(self.operator_state),
            **({"input_marks": self._saved_input_marks()} if self.input_marks else {}),
        }

    def _saved_input_marks(self) -> dict[str, Any]:
        """``{stage head uid: [parallelism, {partition: {channel: [wm, idle]}}]}``"""
        parallelism = {self.graph.nodes[s.head].uid: s.parallelism for s in self.graph.stages}
        out: dict[str, Any] = {}
        for task, marks in self.input_marks.items():
            uid, _, p = task.rpartition(":")
            out.setdefault(uid, [parallelism[uid], {}])[1][p] = {c: [wm, idle] for c, (wm, idle) in marks.items()}
        return out

    def sink_states(self) -> dict[str, Any]:
        return {n.uid: n.t.sink.snapshot_driver_state() for n in self.graph.sinks()}

    def chain(self, key: TaskKey) -> CommittedChain:
        return self.chains.get(key) or CommittedChain()

    def current_watermark(self) -> int | None:
        """The lowest watermark over the job's channels (None without event time)."""
        active = [wm for wm, idle in self.watermarks.values() if not idle]
        return min(active) if active else None


def restored_watermarks(saved: dict[str, Any], graph: JobGraph) -> tuple[dict[str, tuple[int, bool]], dict[str, bytes]]:
    """Watermark channels and generator states from a checkpoint, mapped onto ``graph``.

    Split channels (``s:<uid>:<i>``) restore as saved. Task channels (``t:<head uid>:<p>``)
    restore, for every partition of the stage now, as the lowest saved watermark of that stage:
    after a rescale the partitions differ, and the minimum never lets a record count as late
    that the uninterrupted job would have accepted.
    """
    channels = saved.get("channels") or {}
    out: dict[str, tuple[int, bool]] = {}
    lowest: dict[str, int] = {}
    for name, (wm, idle) in channels.items():
        if name.startswith("s:"):
            out[name] = (int(wm), bool(idle))
        elif name.startswith("t:"):
            uid = name[2:].rsplit(":", 1)[0]
            lowest[uid] = min(lowest.get(uid, int(wm)), int(wm))
    for stage in graph.stages:
        uid = graph.nodes[stage.head].uid
        if uid in lowest:
            for p in range(stage.parallelism):
                out[f"t:{uid}:{p}"] = (lowest[uid], False)
    return out, dict(saved.get("generators") or {})


def restored_input_marks(saved: dict[str, Any], graph: JobGraph) -> dict[str, dict[str, tuple[int, bool]]]:
    """The marks each subtask had seen at an unaligned checkpoint's cut (``{stage head uid:
    [parallelism, {partition: {channel: [wm, idle]}}]}``), mapped onto ``graph``: as saved when
    the stage and its task inputs kept their parallelism; otherwise one floor per stage (the
    lowest saved mark: every record in flight to any old subtask came after it)."""
    out: dict[str, dict[str, tuple[int, bool]]] = {}
    for stage in graph.stages:
        uid = graph.nodes[stage.head].uid
        if uid not in saved:
            continue
        parallelism, parts = saved[uid]
        marks = {int(p): {c: (int(wm), bool(idle)) for c, (wm, idle) in m.items()} for p, m in parts.items()}
        ups = [graph.stages[graph.nodes[e.upstream].stage_id] for e in stage.inputs]
        now = {f"t:{graph.nodes[u.head].uid}:{i}" for u in ups if not u.is_source for i in range(u.parallelism)}
        then = {c for m in marks.values() for c in m if c.startswith("t:")}
        if int(parallelism) == stage.parallelism and then <= now:
            out.update({f"{uid}:{p}": m for p, m in marks.items()})
            continue
        floor = min((wm for m in marks.values() for wm, _ in m.values()), default=MIN_WATERMARK)
        out.update({f"{uid}:{p}": {"*": (floor, False)} for p in range(stage.parallelism)})
    return out


def restored_operator_state(saved: dict[str, dict], graph: JobGraph, allow_non_restored: bool = False) -> dict[str, dict]:
    """CheckpointedFunction state from a checkpoint or savepoint, by uid, redistributed over the
    operator's parallelism now (list state split evenly, union list state to every instance)."""
    by_uid: dict[str, dict[int, dict]] = {}
    for key, states in saved.items():
        uid, index = key.rsplit(":", 1)
        by_uid.setdefault(uid, {})[int(index)] = {name: (mode, list(items)) for name, (mode, items) in states.items()}
    out: dict[str, dict] = {}
    parallelism = {n.uid: n.parallelism for n in graph.nodes.values()}
    for uid, old in by_uid.items():
        p = parallelism.get(uid)
        if p is None:
            if allow_non_restored:
                log.warning("dropping operator state of uid %r: the job has no such operator (--allow-non-restored-state)", uid)
                continue
            msg = (
                f"the restored state holds operator state of uid {uid!r}, but the job has no operator with this uid. "
                "Give the operator its old uid, or allow dropping that state (--allow-non-restored-state)"
            )
            raise CheckpointError(msg)
        for i, states in redistribute(old, p).items():
            out[f"{uid}:{i}"] = states
    return out


def operator_infos(graph: JobGraph) -> list[OperatorInfo]:
    return [OperatorInfo(n.uid, n.name, n.stage_id, n.kind, n.parallelism) for n in graph.nodes.values()]
