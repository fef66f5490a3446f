"""``Point``: a named tuple class whose definition a test changes between the job that writes
state and the job that restores it, in every process that unpickles it (the driver and Spark's
reused Python workers, which keep their imported modules from one job to the next).

``Point`` is looked up through the module's ``__getattr__`` (PEP 562), as pickle looks it up:
its fields are the ones :func:`define` last wrote to a file under ``$FLOWPOINT_HOME`` (set by
conftest.py for the test session and inherited by the workers). Each definition is one class
object, so a value pickles by reference as ``evolving_values.Point``."""

from __future__ import annotations

import collections
import json
import os
from typing import Any

DEFAULT = (["name", "count", "last"], [])  # (fields, defaults of the trailing fields)
_classes: dict[str, type] = {}


def _path() -> str:
    return os.path.join(os.environ["FLOWPOINT_HOME"], "evolving-values-point.json")


def define(fields: list[str], defaults: list[Any] | None = None) -> type:
    """Make ``Point`` a named tuple of ``fields`` (the last ``len(defaults)`` with defaults), in
    this process and in every process that looks it up from now on."""
    text = json.dumps([fields, defaults or []])
    with open(_path() + ".tmp", "w") as f:
        f.write(text)
    os.replace(_path() + ".tmp", _path())
    return __getattr__("Point")


def __getattr__(name: str) -> Any:
    if name != "Point":
        raise AttributeError(name)
    try:
        with open(_path()) as f:
            text = f.read()
    except FileNotFoundError:
        text = json.dumps(DEFAULT)
    cls = _classes.get(text)
    if cls is None:
        fields, defaults = json.loads(text)
        cls = _classes[text] = collections.namedtuple("Point", fields, defaults=defaults, module=__name__)
    return cls
