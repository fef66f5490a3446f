"""``env.from_collection(...)``: a bounded, non-parallel source over a Python list."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from flowpoint.api.typed_values import converter
from flowpoint.api.types import TypeInformation
from flowpoint.connectors.source import Batch, Source, SourceReader, SourceSplit, SplitPlan

BATCH_SIZE = 8192


class _CollectionReader(SourceReader):
    def __init__(self, batch_size: int):
        self.batch_size = batch_size

    def read(self, split: SourceSplit, spec: Any) -> Iterator[Batch]:
        records, size = spec, self.batch_size
        for i in range(0, len(records), size):
            yield records[i : i + size]


class CollectionSource(Source):
    """One split; the position is the index of the next element. Each epoch ships its slice."""

    def __init__(self, collection: list, type_info: TypeInformation | None = None, batch_size: int = BATCH_SIZE):
        convert = converter(type_info)  # the values the type makes, as in PyFlink (typed_values.py)
        self.collection = list(collection) if convert is None else [convert(x) for x in collection]
        self.output_type = type_info
        self.batch_size = max(1, batch_size)

    def is_parallel(self) -> bool:
        return False

    def is_bounded(self) -> bool:
        return True

    def total_records(self) -> int:
        return len(self.collection)

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [SourceSplit("collection-0", None, 0)]

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        end = min(len(self.collection), position + budget)
        return SplitPlan(end, end - position, end >= len(self.collection))

    def read_spec(self, split: SourceSplit, start: int, end: int) -> Any:
        return self.collection[start:end]

    def create_reader(self) -> SourceReader:
        return _CollectionReader(self.batch_size)

    def default_name(self) -> str:
        return "Collection Source"
