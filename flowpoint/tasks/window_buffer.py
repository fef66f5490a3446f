"""Window contents buffered as columns: ``process``/``apply`` windows over columnar batches
(docs/architecture.md, section 8).

When a keyed event-time window runs a ``ProcessWindowFunction`` (or ``WindowFunction``) over all
its elements, on tumbling or sliding windows with the default trigger and no evictor, and its
input arrives as columns (``key_by`` field names), a batch is placed in its windows with numpy
(:func:`~flowpoint.tasks.columnar_window.place`: the same lateness, late-data and re-firing
rules as the aggregations), grouped by (key, window), and each group's records are added to the
window's contents as one Arrow slice (a :class:`~flowpoint.state.chunked_list.ChunkedList`).
The slices become the stream's Python values (Rows or tuples, converted as the per-record path
converts them) when the window fires, in arrival order, and the function gets them as the list
it gets on the per-record path.

The stored form does not change: a checkpoint, savepoint or copy of the contents is the list of
values (``ChunkedList`` pickles as a list), so old snapshots restore into this path (a list value
takes further slices after it) and new ones restore into the per-record path.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa

from flowpoint.api.types import arrow_to_rows
from flowpoint.api.windows import (
    EventTimeTrigger,
    SlidingEventTimeWindows,
    TimeWindow,
    TriggerResult,
    TumblingEventTimeWindows,
)
from flowpoint.errors import StateAccessError
from flowpoint.state.chunked_list import ChunkedList
from flowpoint.state.kinds import ABSENT, immutable
from flowpoint.tasks.batches import KeyedBatch
from flowpoint.tasks.columnar_window import place
from flowpoint.tasks.namespaced import NamespacedListState

CONTINUE = TriggerResult.CONTINUE


def supports_buffered(op: Any) -> bool:
    """Whether the window operator ``op`` can buffer a :class:`KeyedBatch` as columns."""
    return (
        op.incremental_kind is None
        and op.run_window_function.kind in ("process", "apply")
        and op.evictor is None
        and not op.merging
        and type(op.trigger) is EventTimeTrigger
        and isinstance(op.assigner, (TumblingEventTimeWindows, SlidingEventTimeWindows))
    )


class NamespacedBufferState(NamespacedListState):
    """The window contents of a buffering operator: a list (as on the per-record path) or a
    :class:`ChunkedList` per namespace; a value is replaced, never changed in place, once it is
    chunked."""

    __slots__ = ()

    def add(self, value: Any) -> None:
        current = self._t.peek(self._key())  # type: ignore[attr-defined]
        if type(current) is not ChunkedList:
            super().add(value)
            return
        if value is None:
            msg = f"list state {self._descriptor.name!r}: cannot add None"  # type: ignore[attr-defined]
            raise StateAccessError(msg)
        self._t.write(self._key(), current.with_values((value,), immutable(value)))  # type: ignore[attr-defined]

    def add_batch(self, batch: pa.RecordBatch, convert: Any) -> None:
        """Append a batch's records (``convert(batch)``: their Python values)."""
        key = self._key()  # type: ignore[attr-defined]
        current = self._t.peek(key)  # type: ignore[attr-defined]
        if current is ABSENT:
            new = ChunkedList((batch,), convert, batch.num_rows, True)
        elif type(current) is ChunkedList:
            new = current.with_batch(batch)
        else:  # a list: restored, or started by records that came one by one
            values = tuple(current)
            new = ChunkedList((values, batch), convert, len(values) + batch.num_rows, all(map(immutable, values)))
        self._t.write(key, new)  # type: ignore[attr-defined]


def buffered_input(kb: KeyedBatch) -> bool:
    """Whether a batch can be buffered: a record stream of named fields (a stream of bare
    values goes record by record, where a None value is refused as on the per-record path)."""
    names = kb.batch.schema.names
    return not (len(names) == 1 and names[0] == "value")


def process_buffered(op: Any, kb: KeyedBatch, ts: list | None) -> None:
    """Add a columnar batch to the contents of ``op``'s windows (``op`` passed
    :func:`supports_buffered`): one Arrow slice per (key, window), groups in the order of their
    first record, each group's records in arrival order."""
    placed = place(op, kb, ts)
    if placed is None:
        return
    rows, starts, codes = placed.rows, placed.starts, placed.codes
    window_starts, window_index = np.unique(starts, return_inverse=True)
    gid_sparse = codes[rows] * len(window_starts) + window_index.reshape(-1)
    _, first_pos, gid = np.unique(gid_sparse, return_index=True, return_inverse=True)
    gid = gid.reshape(-1)
    order = np.argsort(gid, kind="stable")  # by group, arrival order within each
    counts = np.bincount(gid)
    offsets = np.concatenate(([0], np.cumsum(counts)))
    ordered = placed.batch.take(pa.array(rows[order]))
    tmax = np.maximum.reduceat(placed.stamps[rows[order]], offsets[:-1]).tolist()
    firsts = first_pos.tolist()
    g_rows, g_starts = rows[first_pos].tolist(), starts[first_pos].tolist()
    g_keys = [placed.keys[c] for c in codes[rows[first_pos]].tolist()]
    offs, cnts = offsets.tolist(), counts.tolist()
    for g in sorted(range(len(firsts)), key=lambda j: (g_rows[j], g_starts[j])):
        start = g_starts[g]
        _add_slice(op, g_keys[g], TimeWindow(start, start + placed.size), ordered.slice(offs[g], cnts[g]), tmax[g])


def after_group(op: Any, key: Any, window: Any, tctx: Any, t: int) -> None:
    """The columnar paths' end of adding a group of records to a window's contents (``t``: the
    group's latest timestamp): the trigger, firing or purging, the window's cleanup timer."""
    result = op.trigger.on_element(None, t, window, tctx)
    if result is not CONTINUE:
        if result.is_fire():
            op._fire(key, window)
        if result.is_purge():
            op.contents.clear()
    op._register_cleanup_timer(window, tctx.ns)


def _add_slice(op: Any, key: Any, window: TimeWindow, chunk: pa.RecordBatch, t: int) -> None:
    """The window operator's ``_add`` for a group of records (``t``: the latest timestamp)."""
    op.backend.current_key = key
    tctx = op.tctx.at(key, window)
    contents = op.contents
    contents.namespace = tctx.ns
    contents.add_batch(chunk, op.convert_rows)
    after_group(op, key, window, tctx, t)


def rows_converter(type_info: Any) -> Any:
    """The conversion of a buffered slice to the stream's values (as ``KeyedBatch.pairs``)."""

    def convert(batch: pa.RecordBatch) -> list:
        return arrow_to_rows(batch, type_info)

    return convert
