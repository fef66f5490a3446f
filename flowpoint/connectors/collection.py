"""``env.from_collection(...)``: a bounded, non-parallel source over a Python list."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flowpoint.api.types import TypeInformation
from flowpoint.connectors.source import Batch, Source, SourceReader, SourceSplit, SplitPlan

BATCH_SIZE = 8192


class _CollectionReader(SourceReader):
    def read(self, split: SourceSplit, spec: Any) -> Iterator[Batch]:
        records = spec
        for i in range(0, len(records), BATCH_SIZE):
            yield records[i : i + BATCH_SIZE]


class CollectionSource(Source):
    """One split; the position is the index of the next element. Each epoch ships its slice."""

    def __init__(self, collection: list, type_info: TypeInformation | None = None):
        self.collection = list(collection)
        self.output_type = type_info

    def is_parallel(self) -> bool:
        return False

    def is_bounded(self) -> bool:
        return True

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [SourceSplit("collection-0", None, 0)]

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        end = min(len(self.collection), position + budget)
        return SplitPlan(end, end - position, end >= len(self.collection))

    def read_spec(self, split: SourceSplit, start: int, end: int) -> Any:
        return self.collection[start:end]

    def create_reader(self) -> SourceReader:
        return _CollectionReader()

    def default_name(self) -> str:
        return "Collection Source"
