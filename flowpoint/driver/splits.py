"""The split planner: where every source split stands and how far it reads next (driver side).

A split's position changes only when the work that read up to a new position committed
(:meth:`SplitPlanner.advance`); planning never moves it. The epoch loop plans every unfinished
split at once (:meth:`SplitPlanner.plan`); a loop that drives one source subtask at a time plans
that subtask's splits alone (:meth:`SplitPlanner.plan_partition`). A split belongs to partition
``index % parallelism`` of its source, in the order the source created or discovered it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from flowpoint.driver.restore import split_position

if TYPE_CHECKING:
    from flowpoint.checkpoint.metadata import SplitPosition
    from flowpoint.connectors.source import Source, SourceSplit
    from flowpoint.graph.jobgraph import JobGraph, Node

SplitKey = tuple[int, int]  # (source node id, split index)


@dataclass
class SplitState:
    node: Node
    index: int  # position among the source's splits: the order of its records
    split: SourceSplit
    position: Any
    finished: bool = False

    @property
    def key(self) -> SplitKey:
        return (self.node.id, self.index)


@dataclass
class ReadPlan:
    """What to read next: ``reads[stage][partition]`` lists ``(split index, split, read spec or
    None, finished)`` for every planned split (also those without records: their watermark
    generators emit, and a split that just finished sends its final watermark); ``positions``
    the positions the splits reach once the reads commit."""

    reads: dict[int, list[list]] = field(default_factory=dict)
    positions: dict[SplitKey, tuple[Any, bool]] = field(default_factory=dict)
    records: int = 0  # records the reads are planned to hold


class SplitPlanner:
    def __init__(self, graph: JobGraph):
        self.graph = graph
        self.splits: dict[int, list[SplitState]] = {}  # source node id -> its splits

    def init(self) -> None:
        """Every source's splits at their start (a run from the beginning)."""
        for node in self.graph.sources():
            source: Source = node.t.source
            splits = source.create_splits(node.parallelism)
            self.splits[node.id] = [SplitState(node, i, s, s.start) for i, s in enumerate(splits)]

    def discover(self) -> None:
        """Splits the sources found since (e.g. new Kafka partitions, new files) join at their start."""
        for node in self.graph.sources():
            states = self.splits[node.id]
            for s in node.t.source.discover_splits([st.split for st in states]):
                states.append(SplitState(node, len(states), s, s.start))

    def restore(self, positions: dict[tuple[str, int], tuple[Any, Any, bool]]) -> None:
        """Positions from a checkpoint or savepoint, ``(source uid, split index) -> (split,
        position, finished)``; a source without saved positions keeps the splits it has."""
        for node in self.graph.sources():
            states = self.splits[node.id]
            saved = sorted((i, v) for (uid, i), v in positions.items() if uid == node.uid)
            if not saved:
                continue
            states.clear()
            for i, (split, position, finished) in saved:
                states.append(SplitState(node, i, split, position, finished))

    # -- planning ------------------------------------------------------------------------------

    def plan(self, budget: int, elapsed: float) -> ReadPlan:
        """The next reads of every unfinished split, ``budget`` records shared evenly among them;
        ``elapsed``: seconds since the job began reading (rate-limited sources use it)."""
        return self._plan([st for states in self.splits.values() for st in states if not st.finished], budget, elapsed)

    def plan_partition(self, node: Node, partition: int, budget: int, elapsed: float) -> ReadPlan:
        """The next reads of the unfinished splits of one source subtask."""
        states = self.splits[node.id]
        return self._plan([st for st in states if not st.finished and st.index % node.parallelism == partition], budget, elapsed)

    def _plan(self, active: list[SplitState], budget: int, elapsed: float) -> ReadPlan:
        per_split = max(1, budget // max(1, len(active)))
        out = ReadPlan()
        for st in active:
            source: Source = st.node.t.source
            plan = source.plan(st.split, st.position, per_split, elapsed)
            out.positions[st.key] = (plan.end, plan.finished)
            spec = source.read_spec(st.split, st.position, plan.end) if plan.end != st.position else None
            p = st.node.parallelism
            parts = out.reads.setdefault(st.node.stage_id, [[] for _ in range(p)])
            parts[st.index % p].append((st.index, st.split, spec, plan.finished))
            if spec is not None:
                out.records += plan.records
        return out

    def final_watermarks(self) -> dict[int, list[list]]:
        """Reads without records for every split, each finished: every split sends its final
        +infinity watermark (stop with ``--drain``)."""
        reads: dict[int, list[list]] = {}
        for st in self.states():
            p = st.node.parallelism
            parts = reads.setdefault(st.node.stage_id, [[] for _ in range(p)])
            parts[st.index % p].append((st.index, st.split, None, True))
        return reads

    # -- positions -----------------------------------------------------------------------------

    def advance(self, positions: dict[SplitKey, tuple[Any, bool]]) -> None:
        """The reads up to ``positions`` committed: they are where the splits stand now."""
        for (node_id, index), (end, finished) in positions.items():
            st = self.splits[node_id][index]
            st.position, st.finished = end, finished

    def states(self) -> list[SplitState]:
        """Every split, by source then index (copied: another thread may read it)."""
        return [st for states in list(self.splits.values()) for st in list(states)]

    def positions(self) -> list[SplitPosition]:
        """Every split's committed position as data, for a checkpoint's or savepoint's ``_metadata``."""
        return [split_position(st.node, st.index, st.split, st.position, st.finished) for st in self.states()]

    def counts(self) -> dict[str, int]:
        """Source uid -> how many splits it has."""
        return {n.uid: len(self.splits[n.id]) for n in self.graph.sources()}

    def finished(self, key: SplitKey) -> bool:
        node_id, index = key
        return any(st.finished for st in self.splits.get(node_id, ()) if st.index == index)

    def all_finished(self, positions: dict[SplitKey, tuple[Any, bool]] | None = None) -> bool:
        """Every split finished (after ``positions`` commit, if given) and every source bounded."""
        for st in self.states():
            finished = st.finished
            if positions and st.key in positions:
                finished = positions[st.key][1]
            if not finished:
                return False
        return all(n.t.source.is_bounded() for n in self.graph.sources())
