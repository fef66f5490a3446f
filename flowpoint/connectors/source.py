"""The source contract: splits, positions, and epoch planning (docs/architecture.md, section 9).

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
from flowpoint.api.watermarks import Watermark


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


@dataclass(frozen=True)
class TimestampedBatch:
    """Records with their event timestamps, as a source that assigns them yields them."""

    records: list
    timestamps: list


@dataclass(frozen=True)
class SourceMetric:
    """A counter a reader adds to the source operator's metrics (e.g. records it skipped);
    reported as ``<source name>.<name>`` with the epoch's other metrics."""

    name: str
    n: int


class SourceReader(ABC):
    """Executor side: reads one split between two positions."""

    @abstractmethod
    def read(self, split: SourceSplit, spec: Any) -> Iterator[Batch | TimestampedBatch | Any]:
        """Yield the records of ``spec`` (from :meth:`Source.read_spec`) in order, in batches.

        A source that knows event time may also yield :class:`TimestampedBatch` and
        ``Watermark`` objects (or use :class:`EmittingSourceReader`); a watermark applies to
        the records after it, for this split only."""


class OpenRead(ABC):
    """A split read as its records come (the continuous runtime, for sources whose
    :meth:`Source.supports_open_reads`): the task keeps it open, polls it, and reports the
    position it reached at every checkpoint barrier, as Flink's split readers do."""

    @abstractmethod
    def poll(self, max_records: int, timeout_s: float) -> tuple[list, Any, bool]:
        """``(items, position, finished)``: what arrived within ``timeout_s`` (batches,
        :class:`TimestampedBatch`, :class:`SourceMetric`), the position after them, and whether
        the split ended (a bounded split reached its end)."""

    def close(self) -> None:  # noqa: B027 - optional
        """Release the reader's resources."""


class SourceContext:
    """Flink's ``SourceContext`` for :class:`EmittingSourceReader`: ``collect``,
    ``collect_with_timestamp`` and ``emit_watermark`` (seed 000's source with timestamps and
    watermarks)."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self._records: list = []
        self._timestamps: list | None = None

    def collect(self, element: Any) -> None:
        if self._timestamps is not None and self._records:
            self._flush()
        self._records.append(element)

    def collect_with_timestamp(self, element: Any, timestamp: int) -> None:
        if self._timestamps is None:
            if self._records:
                self._flush()
            self._timestamps = []
        self._records.append(element)
        self._timestamps.append(int(timestamp))

    def emit_watermark(self, watermark: Any) -> None:
        if not isinstance(watermark, Watermark):
            watermark = Watermark(int(watermark))
        self._flush()
        self.items.append(watermark)

    def _flush(self) -> None:
        if self._records:
            ts = self._timestamps
            self.items.append(TimestampedBatch(self._records, ts) if ts is not None else self._records)
        self._records = []
        self._timestamps = None

    def drain(self) -> list[Any]:
        self._flush()
        items, self.items = self.items, []
        return items


class EmittingSourceReader(SourceReader):
    """A reader written as Flink's ``SourceFunction.run(ctx)``: ``run(split, spec, ctx)`` calls
    ``ctx.collect_with_timestamp(value, ts)`` and ``ctx.emit_watermark(Watermark(ts))`` for the
    records of ``spec``. Reading the same spec must emit the same things (replay)."""

    @abstractmethod
    def run(self, split: SourceSplit, spec: Any, ctx: SourceContext) -> None: ...

    def read(self, split: SourceSplit, spec: Any) -> Iterator[Any]:
        ctx = SourceContext()
        self.run(split, spec, ctx)
        yield from ctx.drain()


class Source(ABC):
    """Driver side: splits, boundedness and epoch planning."""

    output_type: TypeInformation | None = None

    def is_parallel(self) -> bool:
        return True

    @abstractmethod
    def is_bounded(self) -> bool: ...

    def total_records(self) -> int | None:
        """How many records the source produces in all, when it knows before reading (a bounded
        source of known size): the terminal shows a progress bar with it. None: not known."""
        return None

    @abstractmethod
    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        """The initial splits. They are assigned to tasks round robin."""

    def supports_open_reads(self) -> bool:
        """Whether the continuous runtime may read this source's splits with
        ``create_reader().open(split, position)`` (:class:`OpenRead`) instead of planned
        ranges: the task then reads records as they arrive, without a plan per read."""
        return False

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

    def encode_position(self, split: SourceSplit, position: Any) -> Any:
        """A split and its position as data, for checkpoint and savepoint ``_metadata``, which
        holds no pickles (reading it must run no code). Data is ``None``, ``bool``, ``int``,
        ``float``, ``str``, ``bytes`` and lists, tuples and dicts of them, exactly as
        :mod:`flowpoint.checkpoint.values` stores them. The default takes the split's
        ``payload`` and ``start`` and the position as they are; a source whose splits or
        positions hold other objects overrides this and :meth:`decode_position`."""
        if type(split) is not SourceSplit:
            msg = f"the split is a {type(split).__qualname__}, a subclass of SourceSplit whose fields the default encoding would lose"
            raise TypeError(msg)
        return {"payload": split.payload, "start": split.start, "position": position}

    def decode_position(self, split_id: str, data: Any) -> tuple[SourceSplit, Any]:
        """``(split, position)`` from :meth:`encode_position`'s data."""
        return SourceSplit(split_id, data["payload"], data["start"]), data["position"]

    def notify_checkpoint_complete(self, checkpoint_id: int, positions: list[tuple[SourceSplit, Any]]) -> None:  # noqa: B027 - optional hook
        """Checkpoint ``checkpoint_id`` completed with these ``(split, position)`` at its cut
        (e.g. the Kafka source commits the offsets to its consumer group for monitoring).
        Runs on the driver; an error here fails nothing, the source should log it."""

    def default_name(self) -> str:
        return type(self).__name__


def split_range(start: int, end: int, parts: int) -> list[tuple[int, int]]:
    """``[start, end)`` cut into ``parts`` contiguous, nearly equal ranges."""
    total = max(0, end - start)
    parts = max(1, parts)
    bounds = [start + total * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]
