"""The job graph's parts: physical operators (:class:`Node`), the exchanges between stages
(:class:`Edge`) and the stages (chains of nodes run as one task). jobgraph.py builds them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flowpoint.graph.transformation import KEYED_KINDS, Transformation


@dataclass
class Node:
    """A physical operator of the job graph."""

    t: Transformation
    uid: str
    parallelism: int
    max_parallelism: int
    stage_id: int = -1
    chained: list[int] = field(default_factory=list)  # node ids run in the same task, below this
    out_edges: list[Edge] = field(default_factory=list)  # exchanges to other stages

    @property
    def id(self) -> int:
        return self.t.id

    @property
    def kind(self) -> str:
        return self.t.kind

    @property
    def name(self) -> str:
        return self.t.name

    @property
    def keyed(self) -> bool:
        return self.t.kind in KEYED_KINDS

    def describe(self) -> str:
        return self.t.describe()


@dataclass
class Edge:
    """An exchange from ``upstream`` (a node) into the head of stage ``stage_id``."""

    upstream: int
    target: int
    partitioning: str  # keyed | forward | rebalance | broadcast | custom
    key_selector: Any = None
    stage_id: int = -1
    index: int = 0  # position among the stage's input edges
    edge_id: int = 0  # unique in the job


@dataclass
class Stage:
    id: int
    head: int
    nodes: list[int]  # topological order, head first
    parallelism: int
    max_parallelism: int
    inputs: list[Edge] = field(default_factory=list)

    @property
    def is_source(self) -> bool:
        return not self.inputs
