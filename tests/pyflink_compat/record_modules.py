"""Record PyFlink's public module tree: ``pyflink_modules.json`` next to this file.

Reads the sources of an unpacked PyFlink package without importing it (PyFlink needs a JVM)::

    pip download apache-flink==2.3.0 --no-deps -d /tmp/pyflink && unzip /tmp/pyflink/*.whl -d /tmp/pyflink
    python tests/pyflink_compat/record_modules.py /tmp/pyflink/pyflink

For every module of the DataStream API (``pyflink.datastream`` and its submodules), of
``pyflink.common`` and of ``pyflink.metrics`` (tests and examples left out) it records the public
names: the module's ``__all__``, or, for a module without one, the public classes, functions and
constants it defines. For the classes among them it records their public nested classes
(``KeyedProcessFunction.Context``), and for ``Types`` its factory methods.
"""

from __future__ import annotations

import ast
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
PACKAGES = ("datastream", "common", "metrics")


def module_name(package: Path, file: Path) -> str:
    parts = ["pyflink", *file.relative_to(package).with_suffix("").parts]
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def public(name: str) -> bool:
    return not name.startswith("_")


def record(package: Path) -> dict:
    modules: dict[str, list[str]] = {}
    classes: dict[str, dict] = {}  # "module.Class" -> {"nested": [...]} for classes a module defines
    types_methods: list[str] = []
    for file in sorted(package.rglob("*.py")):
        rel = file.relative_to(package).parts
        if rel[0] not in PACKAGES or "tests" in rel or "examples" in rel:
            continue
        tree = ast.parse(file.read_text())
        name = module_name(package, file)
        declared, defined = None, []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
                declared = list(dict.fromkeys(ast.literal_eval(node.value)))
            elif isinstance(node, (ast.ClassDef, ast.FunctionDef)):
                defined.append(node.name)
            elif isinstance(node, ast.Assign):
                defined += [t.id for t in node.targets if isinstance(t, ast.Name)]
        names = declared if declared is not None else [n for n in defined if public(n)]
        modules[name] = names
        for node in tree.body:
            if not isinstance(node, ast.ClassDef) or not public(node.name) or node.name not in names:
                continue
            nested = [n.name for n in node.body if isinstance(n, ast.ClassDef) and public(n.name)]
            if nested:
                classes[f"{name}.{node.name}"] = nested
            if node.name == "Types" and name == "pyflink.common.typeinfo":
                types_methods = [n.name for n in node.body if isinstance(n, ast.FunctionDef) and public(n.name)]
    version = ast.literal_eval(
        next(n.value for n in ast.parse((package / "version.py").read_text()).body
             if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", None) == "__version__"))
    return {
        "recorded_from": f"apache-flink=={version} (PyPI wheel), pyflink/{{{','.join(PACKAGES)}}}/**/*.py read by "
                         "tests/pyflink_compat/record_modules.py: each module's __all__, else the public names it defines",
        "modules": modules,
        "nested_classes": classes,
        "types": types_methods,
    }


def main(argv: list[str]) -> int:
    if len(argv) != 1 or not (Path(argv[0]) / "version.py").exists():
        print(__doc__, file=sys.stderr)
        return 2
    data = record(Path(argv[0]))
    out = HERE / "pyflink_modules.json"
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(f"recorded {len(data['modules'])} modules, {sum(map(len, data['modules'].values()))} names in {out.name}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
