"""What the source tasks of a continuous run read, and where a barrier's cut leaves each split.

Planned splits (files, generators, collections) get read specs from the split planner exactly
as for an epoch, at most ``AHEAD`` unfinished assignments per source task, in the same ordered
control stream as the barriers: the cut of barrier ``n`` is after the reads assigned before it.
Splits of a source that :meth:`~flowpoint.connectors.source.Source.supports_open_reads`
(Kafka) are opened once in their task, which reads records as they come and reports, with each
barrier's acknowledgement, where each split was at the barrier.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowpoint.driver.restore import split_position

if TYPE_CHECKING:
    from flowpoint.driver.splits import SplitPlanner
    from flowpoint.graph.jobgraph import JobGraph
    from flowpoint.partition.protocol import TaskAck

AHEAD = 2  # unfinished read assignments per source task


class SourceAssignment:
    def __init__(self, graph: JobGraph, config: Any, splits: SplitPlanner, send: Callable[[int, tuple], None]) -> None:
        self.graph = graph
        self.splits = splits
        self.send = send
        self.budget = int(config.get("execution.epoch.max-records"))
        self.discovery_s = int(config.get("execution.epoch.interval")) / 1000.0
        self.parts = [(s.id, p) for s in graph.stages if s.is_source for p in range(s.parallelism)]
        self.node_of = {n.stage_id: n.id for n in graph.sources()}
        self.start()

    def start(self) -> None:
        """A new run: nothing assigned or opened yet."""
        self.outstanding = dict.fromkeys(self.parts, 0)
        self.opened: set = set()
        self.assignments = 0
        self.read_started = time.monotonic()
        self.next_discovery = 0.0

    # -- assigning -----------------------------------------------------------------------------

    def assign(self) -> None:
        elapsed = time.monotonic() - self.read_started
        now = time.monotonic()
        if now >= self.next_discovery:  # a directory listing or metadata call: not every few ms
            self.next_discovery = now + self.discovery_s
            self.splits.discover()
        for node in self.graph.sources():
            if node.t.source.supports_open_reads():
                self._open(node, elapsed)
                continue
            for p in range(node.parallelism):
                if self.outstanding.get((node.stage_id, p), 0) >= AHEAD:
                    continue
                plan = self.splits.plan_partition(node, p, self.budget, elapsed)
                reads = [r for r in (plan.reads.get(node.stage_id) or [[]] * node.parallelism)[p] if r[2] is not None or r[3]]
                if reads:
                    self.splits.advance(plan.positions)  # the cut of the next barrier is after these reads
                    self._read(node.stage_id, p, reads)

    def _read(self, stage_id: int, p: int, reads: list) -> None:
        self.assignments += 1
        self.outstanding[(stage_id, p)] = self.outstanding.get((stage_id, p), 0) + 1
        self.send(p, ("read", stage_id, p, reads, self.assignments))

    def _open(self, node: Any, elapsed: float) -> None:
        """Each split opened once in its task, at its position (a plan without records settles
        where an out-of-range position starts)."""
        for st in self.splits.states():
            if st.node.id != node.id or st.finished or st.key in self.opened:
                continue
            start = node.t.source.plan(st.split, st.position, 0, elapsed).end
            self.opened.add(st.key)
            p = st.index % node.parallelism
            self.send(p, ("open", node.stage_id, p, [(st.index, st.split, start)]))

    def final_watermarks(self) -> None:
        """``stop --drain``: every split sends its final +infinity watermark, no records."""
        for stage_id, rows in self.splits.final_watermarks().items():
            for p, reads in enumerate(rows):
                if reads:
                    self._read(stage_id, p, reads)

    def end(self) -> None:
        """The sources read nothing more (after the last barrier)."""
        for stage_id, p in self.parts:
            self.send(p, ("end", stage_id, p))

    # -- what the tasks report -----------------------------------------------------------------

    def read_done(self, stage_id: int, p: int) -> None:
        self.outstanding[(stage_id, p)] -= 1

    def split_finished(self, stage_id: int, index: int, position: Any) -> None:
        self.splits.advance({(self.node_of[stage_id], index): (position, True)})

    def all_read(self) -> bool:
        return self.splits.all_finished() and all(v == 0 for v in self.outstanding.values())

    # -- the cut -------------------------------------------------------------------------------

    def planned(self) -> dict:
        """Every split's position after the reads assigned so far (a barrier's cut, when it is
        injected, for planned splits)."""
        return {st.key: (st.position, st.finished) for st in self.splits.states()}

    def cut(self, planned: dict, acks: list[TaskAck]) -> list:
        """The split positions of a barrier's cut as ``_metadata`` holds them: ``planned`` (at
        its injection), and for open splits where their tasks were at the barrier."""
        reached: dict = {}
        for a in acks:
            for index, (position, finished) in a.positions.items():
                reached[(self.node_of[a.stage_id], index)] = (position, finished)
        cut = {**planned, **reached}
        # the planner never goes back: an open split may have reported its end after this barrier
        self.splits.advance({k: v for k, v in reached.items() if not self.splits.finished(k)})
        return [split_position(st.node, st.index, st.split, *cut.get(st.key, (st.position, st.finished))) for st in self.splits.states()]
