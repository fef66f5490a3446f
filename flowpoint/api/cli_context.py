"""What ``flowpoint run`` and ``flowpoint info`` hand the job script they run in this process, as
Flink's context environment does: one value, built by the CLI from its options and in force
while the script runs (:func:`cli_context`), read by every environment the script creates.

- ``defaults``: settings of ``-p``, ``-m``, ``-D`` (checked by the CLI), the defaults of every
  environment below what its code and configuration set;
- ``conf_path``: ``--conf <file or folder>``, the ``flowpoint.yaml`` every environment reads;
- ``strict``: ``-D config.strict``, how a configuration dict and ``flowpoint.yaml`` check keys
  they do not check themselves (None: warn about typos);
- ``print_plan``: ``flowpoint info``: ``execute()`` prints the plan and stops the script.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class CliContext:
    defaults: Mapping[str, Any] = field(default_factory=dict)
    conf_path: str | None = None
    strict: bool | None = None
    print_plan: bool = False


_NONE = CliContext()
_current = _NONE


def current() -> CliContext:
    """The CLI's context of the script running in this process (empty outside the CLI)."""
    return _current


@contextlib.contextmanager
def cli_context(context: CliContext) -> Iterator[CliContext]:
    """``context`` in force for the body (the script's run); the one before it after."""
    global _current
    before, _current = _current, context
    try:
        yield context
    finally:
        _current = before
