"""flowpoint's PyFlink mirror modules are generated from one table.

``flowpoint_modules.json`` says, for every module of PyFlink's tree (``pyflink_modules.json``,
keyed the same way) and for the flat ``flowpoint`` namespace, which names the module has and
where each comes from in flowpoint's code, or why it is refused. ``scripts/generate_mirror.py``
writes the modules from it; these tests check that the files in the package are what it writes,
and that the table covers every name PyFlink has.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

from flowpoint import refused as refusals

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent


def _generator():
    spec = importlib.util.spec_from_file_location("generate_mirror", REPO / "scripts" / "generate_mirror.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GENERATOR = _generator()
TABLE = GENERATOR.load()
RECORD = json.loads((HERE / "pyflink_modules.json").read_text())


def test_the_mirror_modules_are_the_generated_ones(tmp_path):
    files = GENERATOR.generate(TABLE)
    assert set(GENERATOR.write(files, tmp_path)) == set(files)  # all written afresh
    differ = []
    for path in files:
        package_file = REPO / path
        if not package_file.exists():
            differ.append(f"{path} is missing")
        elif package_file.read_bytes() != (tmp_path / path).read_bytes():
            differ.append(f"{path} differs")
    assert not differ, (
        f"{', '.join(differ)}: the mirror modules are generated from tests/pyflink_compat/flowpoint_modules.json; "
        f"edit the table, not the module, and run: {GENERATOR.COMMAND}")


def test_the_mirror_packages_hold_only_generated_modules():
    generated = set(GENERATOR.generate(TABLE))
    stray = [
        path.relative_to(REPO).as_posix()
        for package in ("flowpoint/datastream", "flowpoint/common")
        for path in sorted((REPO / package).rglob("*.py"))
        if path.relative_to(REPO).as_posix() not in generated
    ]
    assert not stray, (f"{stray}: flowpoint/datastream and flowpoint/common hold only the modules generated from "
                       "tests/pyflink_compat/flowpoint_modules.json; put code in flowpoint's own modules and "
                       "point the table at it")


def test_the_table_has_pyflinks_modules():
    assert list(TABLE["modules"]) == list(RECORD["modules"])


def test_every_pyflink_name_is_exported_or_refused():
    missing = [f"{module}.{name}" for module, names in RECORD["modules"].items()
               for name in names if name not in TABLE["modules"][module]]
    assert not missing, f"PyFlink names the table neither exports nor refuses: {missing}"


def test_every_refusal_has_a_reason_in_flowpoint_refused():
    unknown = []
    for module, names in [*TABLE["modules"].items(), ("flowpoint", TABLE["flowpoint"])]:
        for name, origin in names.items():
            if origin.startswith(GENERATOR.REFUSED):
                reason = origin[len(GENERATOR.REFUSED):]
                if not isinstance(getattr(refusals, reason, None), refusals.Refusal):
                    unknown.append(f"{module}.{name}: {reason}")
    assert not unknown, f"refusals naming no flowpoint.refused.Refusal: {unknown}"
