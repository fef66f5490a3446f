"""The job graph as Flink's REST API and web UI show it: job vertices (a stage: a chain of
operators run in one task), their operators, and the edges between vertices with their
partitioning. A read-only copy, built once per job (:func:`plan_view`).

A vertex id is 32 hex characters derived from the uid of the vertex's head operator (Flink's
``JobVertexID`` is its head operator's id, a hash of its uid), so it stays the same across
runs of a job whose head operators keep their uids.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowpoint.graph.jobgraph import JobGraph

# Flink's ship strategies (the plan's "ship_strategy") for flowpoint's partitionings
SHIP_STRATEGIES = {"forward": "FORWARD", "keyed": "HASH", "rebalance": "REBALANCE", "broadcast": "BROADCAST", "custom": "CUSTOM"}


@dataclass(frozen=True)
class OperatorView:
    uid: str
    name: str
    kind: str  # source | map | ... | sink (the transformation's kind)
    parallelism: int
    chained_to: str | None  # the uid of the operator it is chained behind (None: the vertex's head)
    keyed: bool  # it keeps keyed state


@dataclass(frozen=True)
class InputView:
    vertex_id: str  # the upstream vertex
    partitioning: str  # forward | keyed | rebalance | broadcast | custom
    upstream_uid: str  # the operator of the upstream vertex whose records it carries

    @property
    def ship_strategy(self) -> str:
        return SHIP_STRATEGIES.get(self.partitioning, self.partitioning.upper())


@dataclass(frozen=True)
class VertexView:
    id: str
    stage_id: int
    name: str  # its operators' names, "A -> B -> C" as Flink names a chain
    parallelism: int
    max_parallelism: int
    operators: tuple[OperatorView, ...]  # head first
    inputs: tuple[InputView, ...]

    @property
    def is_source(self) -> bool:
        return not self.inputs


@dataclass(frozen=True)
class PlanView:
    job_name: str
    batch: bool
    vertices: tuple[VertexView, ...]  # in topological order

    def vertex(self, vertex_id: str) -> VertexView | None:
        return next((v for v in self.vertices if v.id == vertex_id), None)

    def vertex_of_stage(self, stage_id: int) -> VertexView:
        return next(v for v in self.vertices if v.stage_id == stage_id)

    def emitting(self, vertex: VertexView) -> list[str]:
        """The uids of ``vertex``'s operators whose records leave it (to other vertices)."""
        uids = {op.uid for op in vertex.operators}
        return sorted({i.upstream_uid for v in self.vertices for i in v.inputs if i.upstream_uid in uids})

    @property
    def max_parallelism(self) -> int:
        return max((v.max_parallelism for v in self.vertices), default=128)


def vertex_id(head_uid: str) -> str:
    return hashlib.md5(f"flowpoint-vertex:{head_uid}".encode(), usedforsecurity=False).hexdigest()


def plan_view(graph: JobGraph) -> PlanView:
    chained_to: dict[int, str] = {}
    for n in graph.nodes.values():
        for child in n.chained:
            chained_to[child] = n.uid
    ids = {s.id: vertex_id(graph.nodes[s.head].uid) for s in graph.stages}
    vertices = []
    for s in graph.stages:
        nodes = [graph.nodes[i] for i in s.nodes]
        operators = tuple(
            OperatorView(n.uid, n.name, n.kind, n.parallelism, chained_to.get(n.id), n.keyed) for n in nodes
        )
        inputs = tuple(InputView(ids[graph.nodes[e.upstream].stage_id], e.partitioning, graph.nodes[e.upstream].uid) for e in s.inputs)
        vertices.append(VertexView(ids[s.id], s.id, " -> ".join(n.name for n in nodes), s.parallelism, s.max_parallelism, operators, inputs))
    return PlanView(graph.job_name, graph.batch, tuple(vertices))
