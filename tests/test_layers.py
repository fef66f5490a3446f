"""The package's layers (CONTRIBUTING.md, "The layers"): the ``layers`` contract in pyproject.toml,
which ``lint-imports`` checks in .ci/run. Here: every module is in exactly one of its layers, no
import goes up (counting imports in functions and under ``TYPE_CHECKING``, as lint-imports
does), the contracts are kept, and no import circle is left but the stream classes' loop and one
type-only pair.
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent / "flowpoint"
CONFIG = tomllib.loads((ROOT.parent / "pyproject.toml").read_text())["tool"]["importlinter"]
CONTRACT = next(c for c in CONFIG["contracts"] if c["type"] == "layers")
# bottom first: each layer a list of modules (a module is in it with everything below it)
LAYERS = [[m.strip() for m in layer.split(":")] for layer in reversed(CONTRACT["layers"])]
# package __init__ modules that cannot be listed (a layer holding one would hold its whole
# package): each is in the layer of the module named
UNLISTED = {"flowpoint": "flowpoint.cli", "flowpoint.api": "flowpoint.api.environment",
            "flowpoint.metrics": "flowpoint.metrics.group"}

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


def layers_of(module: str) -> list[int]:
    """The layers (bottom first) that hold ``module``."""
    module = UNLISTED.get(module, module)
    return [i for i, layer in enumerate(LAYERS) if any(module == m or module.startswith(m + ".") for m in layer)]


def layer(module: str) -> int:
    found = layers_of(module)
    return found[0] if len(found) == 1 else -1


def name(i: int) -> str:
    return " : ".join(LAYERS[i]) if len(LAYERS[i]) < 3 else f"{LAYERS[i][0]} : ... ({len(LAYERS[i])} parts)"


def test_no_import_goes_up_a_layer():
    mods = modules()
    up = set()
    for m, targets in imports(mods).items():
        for t in targets:
            if layer(t) > layer(m):
                up.add((m, t))
    assert not up, "imports that go up a layer (CONTRIBUTING.md, 'The layers'):\n" + "\n".join(
        f"  {m} ({name(layer(m))}) -> {t} ({name(layer(t))})" for m, t in sorted(up))


def test_every_module_is_in_exactly_one_layer():
    """A new module needs a layer: its package's, or a line in pyproject.toml's contract."""
    assert {m: layers_of(m) for m in modules() if len(layers_of(m)) != 1} == {}


def test_lint_imports_keeps_every_contract():
    """What .ci/run runs; here so that the fast loop sees a broken layer too."""
    exe = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")
    proc = subprocess.run([exe, "--no-cache"], cwd=ROOT.parent, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-2000:]
    assert "0 broken" in proc.stdout


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


def _imports_in_functions():
    """``(module, path, source lines, function, import node)`` of every first-party import
    inside a function of flowpoint/."""
    for m, path in modules().items():
        lines = path.read_text().split("\n")
        for fn in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and (
                        isinstance(node, ast.ImportFrom) and (node.module or "").startswith("flowpoint")
                        or isinstance(node, ast.Import) and node.names[0].name.startswith("flowpoint")):
                    yield m, path, lines, fn, node


def test_every_import_inside_a_function_says_why():
    """A module imports what it uses at its top; an import left inside a function (to keep
    ``import flowpoint`` or a worker from loading what only some jobs need, or in the stream
    classes' loop) has a comment just above it, or above the group of imports it is in."""
    silent = []
    for m, path, lines, _fn, node in _imports_in_functions():
        i = node.lineno - 2  # the line above, skipping the group's other imports
        while i >= 0 and lines[i].strip().startswith(("from flowpoint", "import flowpoint")):
            i -= 1
        if i < 0 or not lines[i].strip().startswith("#"):
            silent.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} ({m})")
    assert silent == []


# every first-party import left inside a function, and why (issue 28: "a handful")
LAZY_IMPORTS = {
    # the stream classes' loop (ALLOWED_CIRCLES): a DataStream method returns a stream class
    # whose module imports DataStream
    ("flowpoint.api.datastream", "broadcast"), ("flowpoint.api.datastream", "connect"),
    ("flowpoint.api.windowed_stream", "_build"),
    # pyspark and the launcher (Spark, Prometheus, the control endpoint) are not for `import flowpoint`
    ("flowpoint.api.environment", "execute_async"), ("flowpoint.api.environment", "default_parallelism"),
    ("flowpoint.state_io", "_adapter"),
}


def test_no_more_than_a_handful_of_imports_inside_functions():
    """A new import inside a function is a design decision: it goes into LAZY_IMPORTS with its
    reason, or (better) to the top of its module."""
    found = {(m, fn.name) for m, _path, _lines, fn, _node in _imports_in_functions()}
    assert sorted(found - LAZY_IMPORTS) == []
    assert sorted(LAZY_IMPORTS - found) == []  # (a stale entry: the import went to the top)


def _longer_than(kinds: tuple[type, ...], limit: int) -> list[str]:
    """Every definition of ``kinds`` in flowpoint/ longer than ``limit`` lines (decorators and
    docstring included)."""
    long = []
    for m, path in modules().items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, kinds):
                start = min([node.lineno] + [d.lineno for d in node.decorator_list])
                n = node.end_lineno - start + 1
                if n > limit:
                    long.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name} ({m}): {n} lines")
    return long


def test_no_class_over_300_lines():
    """A class holds one concept (issue 28): one that grows past 300 lines is split, by
    composition with small named classes or into functions in a module named after what they
    do (as ``tasks/subtask.py`` and ``state/rocksdb.py`` were)."""
    assert _longer_than((ast.ClassDef,), 300) == []


def test_no_function_over_80_lines():
    assert _longer_than((ast.FunctionDef, ast.AsyncFunctionDef), 80) == []
