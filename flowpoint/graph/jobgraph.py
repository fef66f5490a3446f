"""Compile the recorded transformations into a job graph of stages, and validate it.

A *stage* is a chain of operators that run inside one Spark task per partition: a head (a source,
or an operator fed by exchanges) and every operator chained below it (same parallelism, forward
edge, single input). Edges between stages are exchanges: ``keyed`` (by key-group range, docs/architecture.md, section 5),
``forward`` (partition i to partition i) or ``rebalance`` (round robin).
"""

from __future__ import annotations

import hashlib
import json
import logging
from dataclasses import dataclass
from typing import Any

from flowpoint.errors import JobGraphError
from flowpoint.graph.nodes import Edge, Node, Stage
from flowpoint.graph.transformation import Transformation
from flowpoint.graph.validation import check_keyed_state_use, check_serializable
from flowpoint.state.keygroups import check_parallelism, compute_default_max_parallelism

log = logging.getLogger("flowpoint")


@dataclass(frozen=True)
class GraphOptions:
    """What the job graph is built from besides the transformations: the environment's defaults
    and the settings that shape the graph (the API resolves them; the graph never sees the
    environment)."""

    parallelism: int
    max_parallelism: int
    periodic_watermarks: bool = True  # pipeline.auto-watermark-interval > 0
    runtime_mode: str = "STREAMING"  # execution.runtime-mode
    auto_generate_uids: bool = True  # pipeline.auto-generate-uids
    chaining: bool = True  # pipeline.operator-chaining.enabled

    @classmethod
    def of(cls, env: Any) -> GraphOptions:
        """From a StreamExecutionEnvironment (or anything with its getters)."""
        config = env.get_configuration()
        return cls(
            env.get_parallelism(), env.get_max_parallelism(),
            int(config.get("pipeline.auto-watermark-interval")) > 0, str(config.get("execution.runtime-mode")).upper(),
            bool(config.get("pipeline.auto-generate-uids")), bool(config.get("pipeline.operator-chaining.enabled")),
        )


@dataclass
class JobGraph:
    job_name: str
    nodes: dict[int, Node]
    stages: list[Stage]
    edges: list[Edge]
    batch: bool = False  # RuntimeExecutionMode.BATCH: final results only (api/execution_mode.py)

    def node_by_uid(self, uid: str) -> Node:
        for n in self.nodes.values():
            if n.uid == uid:
                return n
        msg = f"no operator with uid {uid!r}; uids: {sorted(n.uid for n in self.nodes.values())}"
        raise JobGraphError(msg)

    def execution_plan(self) -> str:
        """The plan as JSON in Flink's shape (``nodes`` with ``id``, ``type``, ``pact``,
        ``contents``, ``parallelism`` and ``predecessors`` with their ``ship_strategy``)."""
        pacts = {"source": "Data Source", "sink": "Data Sink"}
        strategies = {"forward": "FORWARD", "keyed": "HASH", "rebalance": "REBALANCE", "broadcast": "BROADCAST", "custom": "CUSTOM"}
        nodes = []
        for n in sorted(self.nodes.values(), key=lambda n: n.id):
            preds = [{"id": u.id, "ship_strategy": strategies.get(part, part.upper()), "side": "second" if i else "first"}
                     for i, (u, part, _) in enumerate(_resolve_inputs(n.t))]
            node: dict[str, Any] = {"id": n.id, "type": n.kind, "pact": pacts.get(n.kind, "Operator"),
                                    "contents": n.name, "uid": n.uid, "parallelism": n.parallelism}
            if preds:
                node["predecessors"] = preds
            nodes.append(node)
        return json.dumps({"nodes": nodes}, indent=2)

    def sinks(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == "sink"]

    def sources(self) -> list[Node]:
        return [n for n in self.nodes.values() if n.kind == "source"]

    def consumers(self, stage: Stage) -> list[Edge]:
        return [e for e in self.edges if self.nodes[e.upstream].stage_id == stage.id]

    @staticmethod
    def build(transformations: list[Transformation], options: GraphOptions | Any, job_name: str) -> JobGraph:
        """``options``: :class:`GraphOptions` (an environment is read into them)."""
        if not isinstance(options, GraphOptions):
            options = GraphOptions.of(options)
        return _Builder(transformations, options, job_name).build()


def _resolve_inputs(t: Transformation) -> list[tuple[Transformation, str, Any]]:
    """The physical operators feeding ``t`` with the partitioning of each path."""
    return [r for i in t.inputs for r in _resolve_input(i)]


def _resolve_input(first: Transformation) -> list[tuple[Transformation, str, Any]]:
    """The physical operators behind one input (through key_by, unions, rebalance, ...)."""
    out: list[tuple[Transformation, str, Any]] = []

    def walk(u: Transformation, part: str | None, key: Any) -> None:
        if u.kind == "key_by":
            if part is None:
                part, key = "keyed", u.key_selector
            walk(u.inputs[0], part, key)
        elif u.kind == "rebalance":
            walk(u.inputs[0], part or "rebalance", key)
        elif u.kind == "forward":
            walk(u.inputs[0], part or "forward", key)
        elif u.kind == "partition_custom":
            if part is None:
                part, key = "custom", (u.options["partitioner"], u.key_selector)
            walk(u.inputs[0], part, key)
        elif u.kind == "broadcast":
            walk(u.inputs[0], part or "broadcast", key)
        elif u.kind == "union":
            for i in u.inputs:
                walk(i, part, key)
        else:
            out.append((u, part or "forward", key))

    walk(first, None, None)
    return out


TWO_INPUT_KINDS = frozenset({"co_map", "co_flat_map", "co_process", "keyed_co_process"})


def _input_sides(t: Transformation) -> list[int]:
    """For each resolved input of ``t`` (in :func:`_resolve_inputs` order, so the stage's input
    edge index), which of ``t.inputs`` it belongs to: 0 or 1 for a two-input operator."""
    return [side for side, i in enumerate(t.inputs) for _ in _resolve_input(i)]


class _Builder:
    def __init__(self, transformations: list[Transformation], options: GraphOptions, job_name: str):
        self.transformations = transformations
        self.options = options
        self.job_name = job_name

    def build(self) -> JobGraph:
        physical = [t for t in self.transformations if not t.is_virtual]
        if not physical:
            msg = "no operators defined in the streaming topology: add a source and a sink before execute()"
            raise JobGraphError(msg)
        default_p = self.options.parallelism
        default_maxp = self.options.max_parallelism
        inputs = {t.id: _resolve_inputs(t) for t in physical}
        nodes: dict[int, Node] = {}
        for t in _topological(physical, inputs):
            p = t.parallelism or default_p
            if t.kind == "side_output":  # runs in its parent's task
                parent = nodes[inputs[t.id][0][0].id]
                if inputs[t.id][0][1] != "forward":
                    msg = f"get_side_output() must be called on the operator that emits it, not after key_by/rebalance ({t.describe()})"
                    raise JobGraphError(msg)
                p = parent.parallelism
            if t.kind == "source" and not t.source.is_parallel():
                p = 1
            maxp = t.max_parallelism or default_maxp or compute_default_max_parallelism(p)
            check_parallelism(p, maxp, lambda t=t: f"operator {t.describe()}")
            nodes[t.id] = Node(t, "", p, maxp)
        self._assign_uids(nodes, inputs)
        periodic = self.options.periodic_watermarks
        batch = self._batch(nodes)
        for n in nodes.values():
            if "watermark_strategy" in n.t.options:
                n.t.options["periodic_watermarks"] = periodic
            n.t.options["batch"] = batch
            if n.kind in TWO_INPUT_KINDS:
                n.t.options["input_sides"] = _input_sides(n.t)
        for n in nodes.values():
            if n.keyed:
                (_, part, _), *_ = inputs[n.id]
                if any(p not in ("keyed", "broadcast") for _, p, _ in inputs[n.id]):
                    msg = f"operator {n.describe()} needs a keyed input: call key_by(...) right before it"
                    raise JobGraphError(msg)
            check_serializable(n, {id(k): k for _, part, k in inputs[n.id] if part == "keyed"}.values())
            check_keyed_state_use(n)
        stages, edges = self._cut_stages(nodes, inputs)
        graph = JobGraph(self.job_name, nodes, stages, edges, batch)
        log.debug("job graph: %s", graph)
        return graph

    def _batch(self, nodes: dict[int, Node]) -> bool:
        """Whether the job runs with batch semantics (``execution.runtime-mode``)."""
        mode = self.options.runtime_mode
        unbounded = [n for n in nodes.values() if n.kind == "source" and not n.t.source.is_bounded()]
        if mode == "BATCH" and unbounded:
            names = ", ".join(n.describe() for n in unbounded)
            msg = (f"execution.runtime-mode is BATCH but these sources are unbounded: {names}; "
                   f"make them bounded (e.g. KafkaSource.builder().set_bounded(...)) or run in STREAMING mode")
            raise JobGraphError(msg)
        return mode == "BATCH" or (mode == "AUTOMATIC" and not unbounded)

    def _assign_uids(self, nodes: dict[int, Node], inputs: dict[int, list]) -> None:
        seen: dict[str, Node] = {}
        for n in nodes.values():
            if n.t.uid:
                other = seen.get(n.t.uid)
                if other is not None:
                    msg = (
                        f"uid {n.t.uid!r} is used by two operators: {other.describe()} and {n.describe()}; "
                        f"every operator needs its own uid"
                    )
                    raise JobGraphError(msg)
                seen[n.t.uid] = n
                n.uid = n.t.uid
        if not self.options.auto_generate_uids:
            missing = [n.describe() for n in nodes.values() if not n.uid]
            if missing:
                msg = (f"auto-generated uids are disabled (pipeline.auto-generate-uids: false) but these operators have "
                       f"no uid: {', '.join(missing)}; call .uid('...') on each")
                raise JobGraphError(msg)
        # generated uids: a hash of the operator's kind and position in the graph
        counters: dict[str, int] = {}
        for n in nodes.values():
            if n.uid:
                continue
            ups = ",".join(nodes[u.id].uid + ":" + part for u, part, _ in inputs[n.id])
            base = f"{n.kind}|{n.name}|{ups}"
            k = counters.get(base, 0)
            counters[base] = k + 1
            n.uid = f"{n.kind}-" + hashlib.sha1(f"{base}|{k}".encode()).hexdigest()[:16]
            while n.uid in seen:
                n.uid += "x"
            seen[n.uid] = n

    def _cut_stages(self, nodes: dict[int, Node], inputs: dict[int, list]) -> tuple[list[Stage], list[Edge]]:
        stages: list[Stage] = []
        edges: list[Edge] = []
        for n in nodes.values():  # topological order
            ins = inputs[n.id]
            chain_to = None
            if len(ins) == 1:
                u, part, _ = ins[0]
                up = nodes[u.id]
                if (
                    part == "forward"
                    and up.parallelism == n.parallelism
                    and up.kind != "sink"
                    and n.t.options.get("chaining", True)
                    and self.options.chaining
                    and not n.t.options.get("new_chain")
                    and up.t.options.get("chaining", True)
                ) or n.kind == "side_output":
                    chain_to = up
            if chain_to is not None:
                n.stage_id = chain_to.stage_id
                chain_to.chained.append(n.id)
                stages[n.stage_id].nodes.append(n.id)
                if n.keyed:
                    stages[n.stage_id].max_parallelism = n.max_parallelism
                continue
            stage = Stage(len(stages), n.id, [n.id], n.parallelism, n.max_parallelism)
            stages.append(stage)
            n.stage_id = stage.id
            for i, (u, part, key) in enumerate(ins):
                up = nodes[u.id]
                if part == "forward" and up.parallelism != n.parallelism:
                    part = "rebalance"
                e = Edge(u.id, n.id, part, key, stage.id, i, len(edges))
                edges.append(e)
                stage.inputs.append(e)
                up.out_edges.append(e)
        return stages, edges


def _topological(physical: list[Transformation], inputs: dict[int, list]) -> list[Transformation]:
    order: list[Transformation] = []
    done: set[int] = set()
    by_id = {t.id: t for t in physical}

    def visit(t: Transformation, stack: tuple[int, ...] = ()) -> None:
        if t.id in done:
            return
        if t.id in stack:
            msg = f"the job graph has a cycle through {t.describe()}"
            raise JobGraphError(msg)
        for u, _, _ in inputs[t.id]:
            visit(by_id[u.id], (*stack, t.id))
        done.add(t.id)
        order.append(t)

    for t in sorted(physical, key=lambda t: t.id):
        visit(t)
    return order
