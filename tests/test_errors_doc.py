"""docs/errors.md lists every error class flowpoint raises (issue 10: "a FlowpointError subclass
for every refusal, and the docs list them"), with the recoverability the class really has."""

from __future__ import annotations

import importlib
import inspect
import os
import pkgutil
import re

import flowpoint
from flowpoint.errors import FlowpointError

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "errors.md")


def _error_classes() -> dict[str, type]:
    found: dict[str, type] = {}
    for info in pkgutil.walk_packages(flowpoint.__path__, "flowpoint."):
        if ".spark" in info.name:  # imports pyspark; holds no error class of its own
            continue
        try:
            module = importlib.import_module(info.name)
        except ImportError:  # an optional extra (e.g. confluent-kafka) not installed
            continue
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, FlowpointError) and obj.__module__ == info.name:
                found[name] = obj
    return found


def _doc_rows() -> dict[str, str]:
    rows = {}
    with open(DOC, encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\| `(\w+)` \| [^|]+ \| (yes|no) \|", line)
            if m:
                rows[m.group(1)] = m.group(2)
    return rows


def test_every_error_class_is_documented_with_its_recoverability():
    classes = _error_classes()
    assert {"FlowpointError", "CorruptStateError", "InvalidKeyError"} <= set(classes)  # the scan works
    rows = _doc_rows()
    missing = sorted(set(classes) - set(rows))
    assert not missing, f"error classes not listed in docs/errors.md: {missing}"
    wrong = {n: rows[n] for n, cls in classes.items() if rows[n] != ("yes" if cls.recoverable else "no")}
    assert not wrong, f"docs/errors.md gives the wrong recoverability for: {wrong}"
    stale = sorted(set(rows) - set(classes))
    assert not stale, f"docs/errors.md lists classes flowpoint no longer has: {stale}"
