"""The picklable description of a stage that travels to executors (built once per job)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from flowpoint.graph.jobgraph import JobGraph, Node, Stage


@dataclass
class EdgeSpec:
    edge_id: int
    index: int
    partitioning: str
    key_selector: Any
    parallelism: int  # of the receiving stage
    max_parallelism: int
    input_type: Any
    target_name: str
    # where the edge's watermarks come from: a source stage's splits, or the upstream tasks
    upstream_source_uid: str | None = None
    upstream_head_uid: str = ""
    upstream_parallelism: int = 1
    target_uid: str = ""  # of the receiving operator (named in a key selector's error)
    upstream_name: str = ""  # the operator whose output the edge carries (named when a record cannot be pickled)
    upstream_uid: str = ""


@dataclass
class OpSpec:
    id: int
    kind: str
    name: str
    uid: str
    function: Any
    options: dict
    input_type: Any
    output_type: Any
    sink: Any
    parallelism: int
    max_parallelism: int
    chained: list[int]
    out_edges: list[EdgeSpec]
    keyed: bool
    accepts_arrow: bool = False


@dataclass
class StagePlan:
    job_id: str
    stage_id: int
    name: str
    head: int
    order: list[int]
    ops: dict[int, OpSpec]
    parallelism: int
    max_parallelism: int
    input_edges: list[EdgeSpec] = field(default_factory=list)
    source_reader: Any = None
    job_parameters: dict = field(default_factory=dict)
    head_uid: str = ""
    batch: bool = False  # RuntimeExecutionMode.BATCH (flowpoint/api/execution_mode.py)

    @property
    def keyed(self) -> bool:
        return any(op.keyed for op in self.ops.values())


def _input_type(graph: JobGraph, node: Node) -> Any:
    ins = node.t.inputs
    return ins[0].output_type if ins else None


def _edge_spec(graph: JobGraph, e: Any) -> EdgeSpec:
    target = graph.nodes[e.target]
    upstream = graph.nodes[e.upstream]
    up_stage = graph.stages[upstream.stage_id]
    up_head = graph.nodes[up_stage.head]
    return EdgeSpec(
        e.edge_id, e.index, e.partitioning, e.key_selector, target.parallelism, target.max_parallelism,
        upstream.t.output_type, target.name,
        upstream_source_uid=up_head.uid if up_stage.is_source else None,
        upstream_head_uid=up_head.uid, upstream_parallelism=up_stage.parallelism, target_uid=target.uid,
        upstream_name=upstream.name, upstream_uid=upstream.uid,
    )


def build_stage_plans(graph: JobGraph, job_id: str, job_parameters: dict) -> dict[int, StagePlan]:
    plans = {}
    for stage in graph.stages:
        plans[stage.id] = _stage_plan(graph, stage, job_id, job_parameters)
    return plans


def _stage_plan(graph: JobGraph, stage: Stage, job_id: str, job_parameters: dict) -> StagePlan:
    ops = {}
    for nid in stage.nodes:
        n = graph.nodes[nid]
        options = dict(n.t.options)
        if n.kind in ("timestamps", "source"):
            options["in_source_stage"] = stage.is_source
        ops[nid] = OpSpec(
            id=nid, kind=n.kind, name=n.name, uid=n.uid, function=n.t.function, options=options,
            input_type=_input_type(graph, n), output_type=n.t.output_type, sink=n.t.sink,
            parallelism=n.parallelism, max_parallelism=n.max_parallelism, chained=list(n.chained),
            out_edges=[_edge_spec(graph, e) for e in n.out_edges], keyed=n.keyed,
            accepts_arrow=bool(getattr(n.t.sink, "accepts_arrow", False)),
        )
    head = graph.nodes[stage.head]
    names = " -> ".join(graph.nodes[i].name for i in stage.nodes)
    return StagePlan(
        job_id=job_id, stage_id=stage.id, name=names, head=stage.head, order=list(stage.nodes), ops=ops,
        parallelism=stage.parallelism, max_parallelism=stage.max_parallelism,
        input_edges=[_edge_spec(graph, e) for e in stage.inputs],
        source_reader=head.t.source.create_reader() if head.kind == "source" else None,
        job_parameters=job_parameters,
        head_uid=head.uid,
        batch=graph.batch,
    )
