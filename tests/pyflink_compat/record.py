"""Record what PyFlink prints for each compatibility program: ``<name>.expected`` next to it.

Run once per program, with PyFlink installed in its own virtualenv
(``bash benchmarks/baselines/setup_pyflink.sh``)::

    python tests/pyflink_compat/record.py [program.py ...]

The program runs under ``benchmarks/.venv-pyflink/bin/python`` (its ``bin`` first on PATH, so
PyFlink's Python workers run there too); its standard output is stored as it is. A program
that fails is reported and nothing is written for it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
VENV = HERE.parents[1] / "benchmarks" / ".venv-pyflink"


def programs(names: list[str]) -> list[Path]:
    if names:
        return [Path(n).resolve() for n in names]
    return sorted(p for p in HERE.glob("*.py") if not p.name.startswith(("record", "test_", "__init__", "conftest")))


def main(argv: list[str]) -> int:
    python = VENV / "bin" / "python"
    if not python.exists():
        print(f"no PyFlink virtualenv at {VENV}: run bash benchmarks/baselines/setup_pyflink.sh", file=sys.stderr)
        return 2
    env = {**os.environ, "PATH": f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    failed = 0
    for program in programs(argv):
        with tempfile.TemporaryDirectory() as cwd:  # programs that write files write them there
            r = subprocess.run([str(python), str(program)], cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
        if r.returncode != 0:
            failed += 1
            print(f"FAILED {program.name} (exit {r.returncode}):\n{r.stderr[-3000:]}", file=sys.stderr)
            continue
        program.with_suffix(".expected").write_text(r.stdout)
        print(f"recorded {program.with_suffix('.expected').name}: {len(r.stdout.splitlines())} lines")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
