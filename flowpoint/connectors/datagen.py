"""``NumberSequenceSource`` and ``DataGeneratorSource``, as in Flink.

Both are index based: split ``i`` covers a range of indexes and its position is the next index,
so any position can be replayed. ``DataGeneratorSource`` calls ``generator_function(index)``
(records must be a pure function of the index) and can be rate limited; with ``count=None``
it is unbounded and the job runs until it is cancelled.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from typing import Any

import numpy as np
import pyarrow as pa

from flowpoint.api.types import TypeInformation, Types
from flowpoint.connectors.source import (
    Batch,
    Source,
    SourceReader,
    SourceSplit,
    SplitPlan,
    split_range,
)
from flowpoint.errors import ConfigurationError

BATCH_SIZE = 16384
UNBOUNDED = sys.maxsize
MAX_BURST_S = 1.0  # a rate-limited split keeps unused records for at most this long (Guava's default)


class _IndexSource(Source):
    """Splits over ``[start, end)``; the position of a split is its next index."""

    start: int
    end: int
    rate_limit_per_second: float | None = None

    _num_splits = 1

    def is_bounded(self) -> bool:
        return self.end != UNBOUNDED

    def total_records(self) -> int | None:
        return self.end - self.start if self.is_bounded() else None

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        self._num_splits = parallelism
        if self.end == UNBOUNDED:
            # an unbounded sequence: split i takes indexes i, i + p, ... (stride p); its
            # position counts the records it has produced
            return [SourceSplit(f"index-{i}", (i, parallelism), 0) for i in range(parallelism)]
        ranges = split_range(self.start, self.end, parallelism)
        return [SourceSplit(f"index-{i}", (a, b), a) for i, (a, b) in enumerate(ranges)]

    def _strided(self, split: SourceSplit) -> bool:
        return self.end == UNBOUNDED

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        limit = UNBOUNDED if self._strided(split) else split.payload[1]
        end = min(limit, position + budget)
        if self.rate_limit_per_second:
            end = min(end, position + self._permits(split.split_id, elapsed_s, end - position))
        return SplitPlan(end, end - position, end >= limit)

    def _permits(self, split_id: str, now_s: float, wanted: int) -> int:
        """Flink's rate limiter (Guava's smooth bursty limiter): each split earns
        ``rate / splits`` records per second, and what it did not use is kept for at most
        ``MAX_BURST_S`` (a slow first epoch does not make the next one read a burst). Takes up to
        ``wanted`` of the earned records."""
        rate = self.rate_limit_per_second / self._num_splits
        buckets = self.__dict__.setdefault("_buckets", {})  # split id -> (time, records earned)
        last, earned = buckets.get(split_id, (0.0, 0.0))  # elapsed counts from the start of reading
        earned = min(rate * MAX_BURST_S, earned + rate * max(0.0, now_s - last))
        take = max(0, min(wanted, int(earned)))
        buckets[split_id] = (now_s, earned - take)
        return take

    def read_spec(self, split: SourceSplit, start: int, end: int) -> Any:
        if self._strided(split):
            offset, stride = split.payload
            return ("strided", self.start + offset + start * stride, stride, end - start)
        return ("range", start, end)


class _SequenceReader(SourceReader):
    def read(self, split: SourceSplit, spec: Any) -> Iterator[Batch]:
        yield from _index_batches(spec, lambda idx: pa.record_batch([pa.array(idx, pa.int64())], names=["value"]))


def _index_batches(spec: Any, make: Any) -> Iterator[Batch]:
    if spec[0] == "range":
        _, start, end = spec
        for a in range(start, end, BATCH_SIZE):
            yield make(np.arange(a, min(end, a + BATCH_SIZE), dtype=np.int64))
    else:
        _, first, stride, count = spec
        for a in range(0, count, BATCH_SIZE):
            n = min(BATCH_SIZE, count - a)
            yield make(first + stride * np.arange(a, a + n, dtype=np.int64))


class NumberSequenceSource(_IndexSource):
    """The numbers ``start`` .. ``end`` inclusive (Flink's ``NumberSequenceSource``)."""

    def __init__(self, start: int, end: int):
        if end < start:
            msg = f"NumberSequenceSource: end {end} is smaller than start {start}"
            raise ConfigurationError(msg)
        self.start, self.end = start, end + 1
        self.output_type = Types.LONG()

    def create_reader(self) -> SourceReader:
        return _SequenceReader()

    def default_name(self) -> str:
        return "Sequence Source"


class RateLimiterStrategy:
    """``RateLimiterStrategy.per_second(n)`` as in Flink's datagen connector."""

    def __init__(self, per_second: float | None):
        self.per_second_rate = per_second

    @staticmethod
    def per_second(records_per_second: float) -> RateLimiterStrategy:
        if records_per_second <= 0:
            msg = f"rate limit must be positive; got {records_per_second}"
            raise ConfigurationError(msg)
        return RateLimiterStrategy(records_per_second)

    @staticmethod
    def no_op() -> RateLimiterStrategy:
        return RateLimiterStrategy(None)


class _GeneratorReader(SourceReader):
    def __init__(self, generator_function: Any):
        self.generator_function = generator_function

    def read(self, split: SourceSplit, spec: Any) -> Iterator[Batch]:
        fn = self.generator_function
        vectorized = getattr(fn, "batch", None)
        if spec[0] == "range" and vectorized is not None:
            _, start, end = spec
            for a in range(start, end, BATCH_SIZE):
                yield vectorized(a, min(end, a + BATCH_SIZE))
            return
        for idx in _index_batches(spec, lambda x: x):
            yield [fn(i) for i in idx.tolist()]


class DataGeneratorSource(_IndexSource):
    """``DataGeneratorSource(generator_function, count, rate_limit_per_second, type_info)``.

    ``generator_function(index)`` returns the record at ``index``; it must depend only on the
    index, so replay yields the same records. ``count=None`` makes the source unbounded.
    ``rate_limit_per_second`` is a number or a :class:`RateLimiterStrategy`.
    A generator object may also offer ``batch(start, end) -> pyarrow.RecordBatch`` (as
    :class:`~flowpoint.connectors.clicks.ClickEventGenerator` does) to generate whole batches.
    """

    def __init__(
        self,
        generator_function: Any,
        count: int | None = None,
        rate_limit_per_second: float | RateLimiterStrategy | None = None,
        type_info: TypeInformation | None = None,
    ):
        if not callable(generator_function):
            msg = f"DataGeneratorSource needs a callable generator_function(index); got {generator_function!r:.80}"
            raise ConfigurationError(msg)
        if count is not None and count < 0:
            msg = f"DataGeneratorSource count must be >= 0 or None (unbounded); got {count}"
            raise ConfigurationError(msg)
        if isinstance(rate_limit_per_second, RateLimiterStrategy):
            rate_limit_per_second = rate_limit_per_second.per_second_rate
        if rate_limit_per_second is not None and rate_limit_per_second <= 0:
            msg = f"DataGeneratorSource rate_limit_per_second must be positive; got {rate_limit_per_second}"
            raise ConfigurationError(msg)
        self.generator_function = generator_function
        self.start = 0
        self.end = UNBOUNDED if count is None else count
        self.rate_limit_per_second = rate_limit_per_second
        self.output_type = type_info if type_info is not None else getattr(generator_function, "output_type", None)

    def create_reader(self) -> SourceReader:
        return _GeneratorReader(self.generator_function)

    def default_name(self) -> str:
        return "Data Generator Source"
