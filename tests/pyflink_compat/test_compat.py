"""PyFlink programs run on flowpoint with only their imports changed, printing what PyFlink prints.

Each ``<name>.py`` here is written for PyFlink 2.3; ``<name>.expected`` is its standard output
under real PyFlink, recorded by ``record.py``. Each program runs twice in this process on the
suite's Spark session: once with every ``from pyflink... import`` replaced by the flat ``from
flowpoint import``, once with ``pyflink`` renamed to ``flowpoint`` in its text (PyFlink's module
paths kept: ``flowpoint.datastream.window``, ...). Both compare standard output: line for line, or as sorted lines where the program says
``# compat: sorted`` (PyFlink's order across subtasks is not defined). Subtask numbers in print
prefixes (``2> ``, ``name:1> ``) become ``*``: which subtask a record lands on is not defined in
PyFlink either (rebalance starts at a random subtask) and keys land on other subtasks in
flowpoint (docs/pyflink.md).
"""

from __future__ import annotations

import contextlib
import io
import re
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
PROGRAMS = sorted(p for p in HERE.glob("*.py") if p.with_suffix(".expected").exists())
IMPORT = re.compile(r"^(\s*)from pyflink(?:\.[\w.]+)? import", re.M)
SUBTASK = re.compile(r"^(\w*:)?\d+> ", re.M)


def flowpoint_source(program: Path) -> str:
    """The program with its PyFlink imports replaced by flowpoint's, and nothing else changed."""
    source = program.read_text()
    changed = IMPORT.sub(r"\1from flowpoint import", source)
    assert "pyflink" not in re.sub(r"#.*", "", changed).replace("from flowpoint import", ""), "a PyFlink name outside the imports"
    return changed


def normalize(text: str, ordered: bool) -> list[str]:
    lines = SUBTASK.sub(lambda m: f"{m.group(1) or ''}*> ", text).splitlines()
    return lines if ordered else sorted(lines)


def renamed_source(program: Path) -> str:
    """The program with every ``pyflink`` replaced by ``flowpoint`` (``sed s/pyflink/flowpoint/g``):
    its imports keep PyFlink's module paths (``flowpoint.datastream.window``, ...)."""
    changed = program.read_text().replace("pyflink", "flowpoint")
    assert re.search(r"^from flowpoint\.\w", changed, re.M), "the program imports no PyFlink module path"
    return changed


def run_program(program: Path, spark, source: str | None = None) -> str:
    out = io.StringIO()
    code = compile(flowpoint_source(program) if source is None else source, str(program), "exec")
    with contextlib.redirect_stdout(out):
        exec(code, {"__name__": "__main__", "__file__": str(program)})  # noqa: S102 - the test's own programs
    return out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_pyflink_program_prints_what_pyflink_prints(program, spark, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # programs that write files write them here
    ordered = "# compat: sorted" not in program.read_text()
    got = normalize(run_program(program, spark), ordered)
    expected = normalize(program.with_suffix(".expected").read_text(), ordered)
    assert got == expected


@pytest.mark.slow
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.stem for p in PROGRAMS])
def test_the_program_renamed_to_flowpoint_prints_the_same(program, spark, monkeypatch, tmp_path):
    """The port a PyFlink user tries first: ``pyflink`` renamed to ``flowpoint`` everywhere,
    PyFlink's module paths kept."""
    monkeypatch.chdir(tmp_path)
    ordered = "# compat: sorted" not in program.read_text()
    got = normalize(run_program(program, spark, renamed_source(program)), ordered)
    expected = normalize(program.with_suffix(".expected").read_text(), ordered)
    assert got == expected


def test_every_program_has_its_recorded_output():
    programs = sorted(p for p in HERE.glob("*.py") if not p.name.startswith(("record", "test_", "__init__")))
    assert programs, "no compatibility programs"
    missing = [p.name for p in programs if not p.with_suffix(".expected").exists()]
    assert not missing, f"run python tests/pyflink_compat/record.py {' '.join(missing)} (PyFlink's output is recorded once)"


def _api_table() -> list[tuple[list[str], str, str]]:
    """``(names, status, notes)`` of the rows of docs/pyflink.md's name-by-name tables."""
    text = (HERE.parents[1] / "docs" / "pyflink.md").read_text()
    section = text[text.index("## The API, name by name"):]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[1] in ("supported", "differs", "accepted", "refused"):
            rows.append((re.findall(r"`(\w+)`", cells[0]), cells[1], cells[2]))
    return rows


def test_the_api_table_lists_every_pyflink_name_honestly():
    """Every name PyFlink 2.3 exports from its main modules has a row; a name the table calls
    supported, differs or accepted imports from its PyFlink module renamed to flowpoint, and one
    it calls refused raises the ImportError that says what to use instead."""
    import importlib
    import json

    from flowpoint.errors import UnsupportedApiError

    exported = json.loads((HERE / "pyflink_api.json").read_text())  # name -> PyFlink 2.3 module
    rows = _api_table()
    listed = {n for names, _, _ in rows for n in names}
    assert not sorted(set(exported) - listed), "PyFlink names without a row in docs/pyflink.md"
    for names, status, _ in rows:
        for name in names:
            if name not in exported:
                continue  # a flowpoint name mentioned beside PyFlink's (AllWindowedStream)
            module = importlib.import_module("flowpoint" + exported[name][len("pyflink"):])
            if status == "refused":
                with pytest.raises(UnsupportedApiError):
                    getattr(module, name)
            else:
                assert getattr(module, name) is not None, f"docs/pyflink.md says {name} is {status}"
