"""The source contract: splits, positions, and epoch planning (DESIGN section 9).

A :class:`Source` lives on the driver. It divides its input into splits; the coordinator keeps
one position per split. For every epoch the coordinator asks :meth:`Source.plan` how far each
split may advance, and ships a small *read spec* to the task that reads it with the source's
:class:`SourceReader` (a light, picklable object). Reading the same spec always yields the same
records, which is what makes replay after a failure exact.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from flowpoint.api.types import TypeInformation


@dataclass(frozen=True)
class SourceSplit:
    """One independently readable part of a source. ``payload`` says what to read."""

    split_id: str
    payload: Any = None
    start: Any = 0  # the position reading begins at


@dataclass(frozen=True)
class SplitPlan:
    """How far a split advances in one epoch."""

    end: Any  # the new position
    records: int  # records between the old position and ``end`` (an estimate for files)
    finished: bool  # no more records will ever come from this split


Batch = list | pa.RecordBatch


class SourceReader(ABC):
    """Executor side: reads one split between two positions."""

    @abstractmethod
    def read(self, split: SourceSplit, spec: Any) -> Iterator[Batch]:
        """Yield the records of ``spec`` (from :meth:`Source.read_spec`) in order, in batches."""


class Source(ABC):
    """Driver side: splits, boundedness and epoch planning."""

    output_type: TypeInformation | None = None

    def is_parallel(self) -> bool:
        return True

    @abstractmethod
    def is_bounded(self) -> bool: ...

    @abstractmethod
    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        """The initial splits. They are assigned to tasks round robin."""

    def discover_splits(self, known: list[SourceSplit]) -> list[SourceSplit]:
        """Splits that appeared since the last call (e.g. new files in a directory)."""
        return []

    @abstractmethod
    def plan(self, split: SourceSplit, position: Any, budget: int, elapsed_s: float) -> SplitPlan:
        """Advance ``split`` from ``position`` by at most ``budget`` records.

        ``elapsed_s`` is the time since the job started reading (for rate limits).
        """

    def read_spec(self, split: SourceSplit, start: Any, end: Any) -> Any:
        """What the task needs to read ``start``..``end`` of ``split`` (must be small to ship)."""
        return (start, end)

    @abstractmethod
    def create_reader(self) -> SourceReader: ...

    def default_name(self) -> str:
        return type(self).__name__


def split_range(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into ``parts`` contiguous, nearly equal ranges."""
    total = max(0, end - start)
    parts = max(1, parts)
    bounds = [start + total * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]
