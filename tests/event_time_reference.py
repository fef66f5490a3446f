"""A plain, slow, obviously-correct model of Flink's event-time windows, for differential tests.

It simulates a flowpoint job element by element, with no flowpoint runtime in it:

* **Input**: one ordered list of records per source split; ``None`` stands for a split of an
  unbounded source that never produces a record (it never finishes).
* **Epochs and batches** (DESIGN section 4, ``SplitPlanner.plan``): every epoch each unfinished
  split advances by ``max(1, epoch_max_records // unfinished splits)`` records, read in source
  batches of ``batch_size``. The keyed stage sees an epoch's records in global split order: all
  of split 0's records of the epoch, then split 1's, and so on.
* **Watermarks** (DESIGN section 8): one generator per split (:class:`BoundedOutOfOrderness` or
  any object with Flink's ``on_event(event, ts, output)`` / ``on_periodic_emit(output)``).
  ``on_event`` runs right *after* its record has gone downstream (so a punctuated watermark is
  seen from the next record on); ``on_periodic_emit`` runs after every source batch and at every
  epoch end. A split's watermark never decreases; a fully read split counts as +infinity from
  the end of its last slice on. The window operator's watermark is the minimum over the splits
  not listed in ``idle_splits``; it never decreases. Bounded input ends with +infinity.
* **Windows** (Flink's ``WindowOperator`` with ``EventTimeTrigger``): an element goes into each
  of its windows unless that window is late (``max_timestamp + allowed_lateness <= watermark``;
  for sessions the check is on the window after merging). A window fires when the watermark
  reaches ``max_timestamp = end - 1``; an element added to a window whose ``max_timestamp`` the
  watermark has already reached fires it again at once, with all its contents. Window state is
  dropped once ``max_timestamp + allowed_lateness <= watermark``. An element none of whose
  windows took it goes to the late output (Flink: ``side_output_late_data``).

Output: a :class:`ReferenceResult` with the multiset of fired windows
``(key, window_start, window_end, result)``, repeated late firings included, and the multiset of
late records. Nothing here is clever: windows are dicts, every step scans everything.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

MIN_WATERMARK = -(1 << 63)  # Long.MIN_VALUE, as flowpoint.api.time.MIN_WATERMARK
MAX_WATERMARK = (1 << 63) - 1  # Long.MAX_VALUE, as flowpoint.api.time.MAX_WATERMARK


# -- window assigners ------------------------------------------------------------------------


def window_start(timestamp: int, offset: int, size: int) -> int:
    """Flink's ``TimeWindow.getWindowStartWithOffset`` (Python's ``%`` is already the floored
    remainder Flink computes by hand for negative timestamps)."""
    return timestamp - (timestamp - offset) % size


@dataclass(frozen=True)
class Tumbling:
    size: int
    offset: int = 0

    def assign(self, ts: int) -> list[tuple[int, int]]:
        start = window_start(ts, self.offset, self.size)
        return [(start, start + self.size)]


@dataclass(frozen=True)
class Sliding:
    size: int
    slide: int
    offset: int = 0

    def assign(self, ts: int) -> list[tuple[int, int]]:
        windows = []
        start = window_start(ts, self.offset, self.slide)
        while start > ts - self.size:
            windows.append((start, start + self.size))
            start -= self.slide
        return windows


@dataclass(frozen=True)
class Session:
    gap: int

    def assign(self, ts: int) -> list[tuple[int, int]]:
        return [(ts, ts + self.gap)]


def intersects(a: tuple[int, int], b: tuple[int, int]) -> bool:
    """Flink's ``TimeWindow.intersects``: windows that merely touch ([0,10) and [10,20)) merge."""
    return a[0] <= b[1] and a[1] >= b[0]


def max_timestamp(window: tuple[int, int]) -> int:
    return window[1] - 1


# -- watermark generators --------------------------------------------------------------------


class _Output:
    """What a generator emits into: the split's watermark, which never decreases."""

    def __init__(self) -> None:
        self.watermark = MIN_WATERMARK

    def emit_watermark(self, watermark: Any) -> None:
        ts = watermark if isinstance(watermark, int) else watermark.timestamp
        self.watermark = max(self.watermark, ts)

    def mark_idle(self) -> None:
        pass

    def mark_active(self) -> None:
        pass


class BoundedOutOfOrderness:
    """Periodic: ``max timestamp seen - bound - 1`` (``MIN_WATERMARK`` before any record)."""

    def __init__(self, bound: int):
        self.bound = bound
        self.max_ts: int | None = None

    def on_event(self, event: Any, ts: int, output: _Output) -> None:
        self.max_ts = ts if self.max_ts is None else max(self.max_ts, ts)

    def on_periodic_emit(self, output: _Output) -> None:
        if self.max_ts is not None:
            output.emit_watermark(self.max_ts - self.bound - 1)


class Punctuated:
    """``watermark_of(record, ts)`` returns the watermark to emit right after the record, or
    None. Periodic emission does nothing."""

    def __init__(self, watermark_of: Callable[[Any, int], int | None]):
        self.watermark_of = watermark_of

    def on_event(self, event: Any, ts: int, output: _Output) -> None:
        wm = self.watermark_of(event, ts)
        if wm is not None:
            output.emit_watermark(wm)

    def on_periodic_emit(self, output: _Output) -> None:
        pass


# -- window functions ------------------------------------------------------------------------


def count(elements: Sequence[Any]) -> int:
    return len(elements)


def sum_of(value: Callable[[Any], Any]) -> Callable[[Sequence[Any]], Any]:
    return lambda elements: sum(value(e) for e in elements)


def elements_in_order(elements: Sequence[Any]) -> tuple:
    """The window's elements in the order they reached it."""
    return tuple(elements)


def sorted_elements(elements: Sequence[Any]) -> tuple:
    return tuple(sorted(elements))


def reduce_with(f: Callable[[Any, Any], Any]) -> Callable[[Sequence[Any]], Any]:
    return lambda elements: functools.reduce(f, elements)


# -- the simulation --------------------------------------------------------------------------


@dataclass
class ReferenceResult:
    windows: Counter = field(default_factory=Counter)  # (key, start, end, result) -> times fired
    late: Counter = field(default_factory=Counter)  # late record -> how many times
    firings: list = field(default_factory=list)  # (key, start, end, result, watermark) in order

    def window_list(self) -> list:
        return sorted(self.windows.elements(), key=repr)


class _WindowOperator:
    """One keyed window operator; the key partitioning of the real one cannot change results."""

    def __init__(self, assigner: Any, allowed_lateness: int, window_fn: Callable[[Sequence[Any]], Any], result: ReferenceResult):
        self.assigner = assigner
        self.lateness = allowed_lateness
        self.window_fn = window_fn
        self.result = result
        self.watermark = MIN_WATERMARK
        self.windows: dict[Any, dict[tuple[int, int], list]] = {}  # key -> window -> elements

    def is_late(self, window: tuple[int, int]) -> bool:
        return max_timestamp(window) + self.lateness <= self.watermark

    def fire(self, key: Any, window: tuple[int, int]) -> None:
        res = self.window_fn(self.windows[key][window])
        self.result.windows[(key, window[0], window[1], res)] += 1
        self.result.firings.append((key, window[0], window[1], res, self.watermark))

    def advance(self, watermark: int) -> None:
        """The watermark moves to ``watermark``: fire the windows it reaches, drop the expired."""
        if watermark <= self.watermark:
            return
        old, self.watermark = self.watermark, watermark
        due = [
            (max_timestamp(w), repr(k), k, w)
            for k, ws in self.windows.items()
            for w in ws
            if old < max_timestamp(w) <= watermark
        ]
        for _, _, k, w in sorted(due, key=lambda d: d[:2]):
            self.fire(k, w)
        for k in list(self.windows):
            ws = self.windows[k]
            for w in [w for w in ws if self.is_late(w)]:
                del ws[w]
            if not ws:
                del self.windows[k]

    def process(self, key: Any, ts: int, record: Any) -> None:
        ws = self.windows.setdefault(key, {})
        taken = False
        for w in self.assigner.assign(ts):
            if isinstance(self.assigner, Session):
                w = self.merge(ws, w)
            if self.is_late(w):
                continue
            taken = True
            ws.setdefault(w, []).append(record)
            if max_timestamp(w) <= self.watermark:
                self.fire(key, w)  # EventTimeTrigger.on_element: FIRE for a late-but-allowed element
        if not ws:
            del self.windows[key]
        if not taken:
            self.result.late[record] += 1

    @staticmethod
    def merge(ws: dict[tuple[int, int], list], new: tuple[int, int]) -> tuple[int, int]:
        """Merge ``new`` with every existing session it (transitively) intersects; the merged
        window keeps the contents of the windows it swallowed (in their start order)."""
        merged, absorbed = new, []
        changed = True
        while changed:
            changed = False
            for w in list(ws):
                if w not in absorbed and intersects(merged, w):
                    absorbed.append(w)
                    merged = (min(merged[0], w[0]), max(merged[1], w[1]))
                    changed = True
        if absorbed == [merged]:
            return merged
        contents: list = []
        for w in sorted(absorbed):
            contents.extend(ws.pop(w))
        if absorbed:
            ws[merged] = contents
        return merged


def _batches(records: Sequence[Any], size: int) -> Iterable[Sequence[Any]]:
    for i in range(0, len(records), size):
        yield records[i : i + size]


def simulate(
    splits: Sequence[Sequence[Any]],
    timestamp: Callable[[Any], int],
    key: Callable[[Any], Any],
    assigner: Any,
    window_fn: Callable[[Sequence[Any]], Any] = count,
    watermarks: Callable[[], Any] | None = None,
    allowed_lateness: int = 0,
    epoch_max_records: int | None = None,
    batch_size: int = 8192,
    idle_splits: Iterable[int] = (),
    end_of_input: bool = True,
) -> ReferenceResult:
    """Run the model. ``watermarks()`` makes one generator per split (default: bounded
    out-of-orderness 0); ``epoch_max_records=None`` reads everything in one epoch; splits in
    ``idle_splits`` are left out of the watermark minimum for the whole run; ``end_of_input``
    adds the final +infinity watermark of a bounded job."""
    watermarks = watermarks or (lambda: BoundedOutOfOrderness(0))
    idle = set(idle_splits)
    silent = {i for i, s in enumerate(splits) if s is None}  # unbounded, never a record
    splits = [[] if s is None else s for s in splits]
    n = len(splits)
    gens = [watermarks() for _ in range(n)]
    outs = [_Output() for _ in range(n)]
    positions = [0] * n
    finished = [False] * n
    result = ReferenceResult()
    op = _WindowOperator(assigner, allowed_lateness, window_fn, result)

    def combined() -> int:
        considered = [outs[i].watermark for i in range(n) if i not in idle]
        return min(considered) if considered else op.watermark

    budget = epoch_max_records if epoch_max_records is not None else 1 << 62
    while not all(finished[i] for i in range(n) if i not in silent):
        active = [i for i in range(n) if not finished[i]]
        per_split = max(1, budget // len(active))
        for i in range(n):  # the keyed stage takes the epoch's input in global split order
            if finished[i]:
                continue
            start = positions[i]
            end = min(len(splits[i]), start + per_split)
            for batch in _batches(splits[i][start:end], batch_size):
                for record in batch:
                    ts = timestamp(record)
                    op.advance(combined())
                    op.process(key(record), ts, record)
                    gens[i].on_event(record, ts, outs[i])
                gens[i].on_periodic_emit(outs[i])
            positions[i] = end
            if end >= len(splits[i]) and i not in silent:
                finished[i] = True
                outs[i].watermark = MAX_WATERMARK
        for i in range(n):  # epoch end
            gens[i].on_periodic_emit(outs[i])
        op.advance(combined())
    if end_of_input and not silent:
        op.advance(MAX_WATERMARK)
    return result
