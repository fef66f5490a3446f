"""The package's layers (CONTRIBUTING.md, "The layers"): a module imports modules of its own
layer and the layers below it, never one above, counting every import (module level,
function level and under ``TYPE_CHECKING``). Import circles: only the stream classes' loop and
one type-only pair are left.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "flowpoint"

# bottom first; a module belongs to the layer of its longest matching prefix
LAYERS = [
    ("ground", ["flowpoint.errors", "flowpoint.clock", "flowpoint.version", "flowpoint.private_files", "flowpoint.refused",
                "flowpoint.worker_resources", "flowpoint.home", "flowpoint.pickles", "flowpoint.metrics.group", "flowpoint.metrics.metricbase"]),
    ("user types", ["flowpoint.api.types", "flowpoint.api.row", "flowpoint.api.typed_values", "flowpoint.api.state",
                    "flowpoint.api.state_ttl", "flowpoint.api.functions", "flowpoint.api.time", "flowpoint.api.watermarks",
                    "flowpoint.api.windows", "flowpoint.api.triggers", "flowpoint.api.evictors", "flowpoint.api.aggregates",
                    "flowpoint.api.broadcast_state", "flowpoint.api.collecting", "flowpoint.api.operator_state",
                    "flowpoint.api.config", "flowpoint.api.storage_options", "flowpoint.api.serializer"]),
    ("state", ["flowpoint.state"]),
    ("snapshot storage", ["flowpoint.checkpoint"]),
    ("working state", ["flowpoint.state.working", "flowpoint.state.backend", "flowpoint.state.committed_chain", "flowpoint.state.durable",
                       "flowpoint.tasks.protocol"]),
    ("job graph", ["flowpoint.graph"]),
    ("task code", ["flowpoint.tasks", "flowpoint.connectors", "flowpoint.metrics"]),
    ("spark adapter", ["flowpoint.spark", "flowpoint.python_deps"]),
    ("driver", ["flowpoint.driver", "flowpoint.driver.registry"]),  # the job registry: --resume reads it
    ("control plane", ["flowpoint.control", "flowpoint.launcher"]),
    ("api", ["flowpoint.api", "flowpoint.datastream", "flowpoint.common", "flowpoint.table", "flowpoint.state_io", "flowpoint.testing"]),
    ("cli", ["flowpoint.cli", "flowpoint"]),
]

ALLOWED_CIRCLES = [
    # the stream classes refer to each other by design
    {"flowpoint.api.broadcast", "flowpoint.api.connected_streams", "flowpoint.api.datastream", "flowpoint.api.environment", "flowpoint.api.windowed_stream"},
    # types only: a RuntimeContext hands out states; a state descriptor takes a reduce function
    {"flowpoint.api.functions", "flowpoint.api.state"},
]


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Every flowpoint module each module imports, wherever the import statement is."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and node.module.split(".")[0] == "flowpoint":
                targets = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in mods else node.module for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name for a in node.names if a.name.split(".")[0] == "flowpoint"]
            edges[m].update(t for t in targets if t in mods and t != m)
    return edges


def layer(module: str) -> int:
    best = (-1, -1)
    for i, (_name, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best[1]:
                best = (i, len(p))
    return best[0]


def test_no_import_goes_up_a_layer():
    mods = modules()
    up = set()
    for m, targets in imports(mods).items():
        for t in targets:
            if layer(t) > layer(m):
                up.add((m, t))
    assert not up, "imports that go up a layer (CONTRIBUTING.md, 'The layers'):\n" + "\n".join(
        f"  {m} ({LAYERS[layer(m)][0]}) -> {t} ({LAYERS[layer(t)][0]})" for m, t in sorted(up))


def test_every_module_has_a_layer():
    assert [m for m in modules() if layer(m) < 0] == []


def test_no_import_circle_but_the_stream_classes():
    edges = imports(modules())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    circles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = set()
            while True:
                w = stack.pop()
                on.discard(w)
                part.add(w)
                if w == v:
                    break
            if len(part) > 1:
                circles.append(part)

    import sys

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for v in sorted(edges):
            if v not in index:
                visit(v)
    finally:
        sys.setrecursionlimit(limit)
    assert [sorted(c) for c in circles if c not in ALLOWED_CIRCLES] == []
