"""Built-in window aggregations over columnar batches (docs/architecture.md, section 8).

When a keyed event-time window aggregates with a built-in (``Aggregates.count/sum/min/max/avg``)
on tumbling or sliding windows with the default trigger and no evictor, and its input arrives
as columns (``key_by`` field names on Arrow batches, see ``KeyedWriter``), a batch is handled
as a whole: window starts and lateness are computed with numpy, the batch is grouped by (key,
window) with Arrow, and each group's partial accumulator is merged into the window's single
accumulator. Python runs per group, not per record; the state, timers, firing and late-data
rules are exactly those of the per-record path (the window operator's ``_add_accumulator``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flowpoint.api.aggregates import AvgAggregate, BuiltinAggregate, CountAggregate
from flowpoint.api.types import arrow_to_rows
from flowpoint.api.windows import (
    EventTimeTrigger,
    SlidingEventTimeWindows,
    TimeWindow,
    TumblingEventTimeWindows,
)
from flowpoint.errors import ConfigurationError
from flowpoint.tasks.batches import KeyedBatch

_ARROW_AGG = {"sum": "sum", "min": "min", "max": "max"}


def supports_columnar(op: Any) -> bool:
    """Whether the window operator ``op`` can take a :class:`KeyedBatch` as a whole."""
    fn = op.incremental
    return (
        op.incremental_kind == "aggregate"
        and isinstance(fn, BuiltinAggregate)
        and (isinstance(fn, CountAggregate) or isinstance(fn.field, str))
        and op.evictor is None
        and not op.merging
        and type(op.trigger) is EventTimeTrigger
        and isinstance(op.assigner, (TumblingEventTimeWindows, SlidingEventTimeWindows))
    )


def _key_codes(batch: pa.RecordBatch, fields: tuple[str, ...]) -> tuple[np.ndarray, list]:
    """A dense int code per record and the key of each code (a value, or a tuple of values)."""
    codes = None
    uniques: list[list] = []
    for f in fields:
        enc = pc.dictionary_encode(batch.column(f))
        idx = enc.indices.to_numpy(zero_copy_only=False).astype(np.int64)
        uniques.append(enc.dictionary.to_pylist())
        codes = idx if codes is None else codes * len(uniques[-1]) + idx
    assert codes is not None
    if len(fields) == 1:
        return codes, uniques[0]
    present, dense = np.unique(codes, return_inverse=True)
    keys = []
    for code in present.tolist():
        parts = []
        for values in reversed(uniques):
            code, i = divmod(code, len(values))
            parts.append(values[i])
        keys.append(tuple(reversed(parts)))
    return dense.astype(np.int64), keys


class Placed:
    """A batch's records placed in their windows: record ``rows[i]`` goes to the window starting
    at ``starts[i]`` (windows the watermark has not passed), its key is ``keys[codes[row]]``."""

    __slots__ = ("batch", "codes", "keys", "rows", "starts", "stamps", "size")

    def __init__(self, batch: pa.RecordBatch, codes: np.ndarray, keys: list, rows: np.ndarray, starts: np.ndarray, stamps: np.ndarray, size: int):
        self.batch, self.codes, self.keys, self.rows, self.starts, self.stamps, self.size = batch, codes, keys, rows, starts, stamps, size


def place(op: Any, kb: KeyedBatch, ts: list | None) -> Placed | None:
    """Assign a columnar batch's records to ``op``'s windows, with the per-record path's rules:
    late records go to the late-data side output (or are counted as dropped), records of windows
    the watermark already passed (within the allowed lateness) are added one by one (each fires
    its window); the rest are returned to be added per (key, window) group (None if none)."""
    batch = kb.batch
    n = batch.num_rows
    if n == 0:
        return None
    if ts is None:
        msg = (
            f"operator {op.spec.name!r} (uid {op.spec.uid!r}) uses event-time windows, but its input records have no "
            f"timestamps: assign them with a WatermarkStrategy(...).with_timestamp_assigner(...) first"
        )
        raise ConfigurationError(msg)
    stamps = np.asarray(ts, dtype=np.int64)
    codes, keys = _key_codes(batch, kb.fields)
    assigner = op.assigner
    size, slide, offset = assigner.size, assigner.slide, assigner.offset
    last = stamps - np.mod(stamps - offset, slide)
    per = -(-size // slide)  # windows per element (the last may not contain it)
    rows = np.repeat(np.arange(n, dtype=np.int64), per)
    starts = np.repeat(last, per) - np.tile(np.arange(per, dtype=np.int64) * slide, n)
    inside = starts > np.repeat(stamps, per) - size
    # Flink's lateness: a window is skipped once max_timestamp + allowed lateness <= watermark
    alive = inside & (starts + size - 1 + op.lateness > op.watermark)
    wm = op.watermark
    skipped = ~np.logical_or.reduceat(alive, np.arange(0, n * per, per)) if per > 1 else ~alive
    late = skipped & (stamps + op.lateness <= wm)
    if late.any():
        late_idx = np.flatnonzero(late)
        if op.late_tag_id is not None:
            values = arrow_to_rows(batch.take(pa.array(late_idx)), op.spec.input_type)
            for v, t in zip(values, stamps[late_idx].tolist(), strict=True):
                op.buffer.add_side_id(op.late_tag_id, v, t)
        else:
            op.count("numLateRecordsDropped", int(late_idx.size))
    # elements of windows the watermark already passed (within the allowed lateness) fire
    # their window once each, as in the per-record path: they go one by one
    refire = alive & (starts + size - 1 <= wm)
    if refire.any():
        r_rows, r_starts = rows[refire], starts[refire]
        values = arrow_to_rows(batch.take(pa.array(r_rows)), op.spec.input_type)
        backend = op.backend
        for value, row, start in zip(values, r_rows.tolist(), r_starts.tolist(), strict=True):
            key = keys[codes[row]]
            backend.current_key = key
            op._add(key, TimeWindow(start, start + size), None, value, int(stamps[row]))
        alive &= ~refire
    if not alive.any():
        return None
    return Placed(batch, codes, keys, rows[alive], starts[alive], stamps, size)


def process_columnar(op: Any, kb: KeyedBatch, ts: list | None) -> None:
    """Add a columnar batch to ``op``'s windows (``op`` passed :func:`supports_columnar`)."""
    placed = place(op, kb, ts)
    if placed is None:
        return
    batch, codes, keys, rows, starts, stamps, size = (
        placed.batch, placed.codes, placed.keys, placed.rows, placed.starts, placed.stamps, placed.size,
    )
    fn = op.incremental
    name = fn.builtin[0]
    columns = {"k": pa.array(codes[rows]), "w": pa.array(starts), "i": pa.array(rows), "t": pa.array(stamps[rows])}
    aggs = [("i", "min"), ("i", "count"), ("t", "max")]
    if name != "count":
        columns["v"] = batch.column(fn.field).take(pa.array(rows))
        aggs.append(("v", "sum" if name == "avg" else _ARROW_AGG[name]))
    grouped = pa.table(columns).group_by(["k", "w"], use_threads=False).aggregate(aggs)
    g_keys = grouped.column("k").to_pylist()
    g_starts = grouped.column("w").to_pylist()
    g_first = grouped.column("i_min").to_pylist()
    g_count = grouped.column("i_count").to_pylist()
    g_tmax = grouped.column("t_max").to_pylist()
    if name == "count":
        partials = g_count
    elif isinstance(fn, AvgAggregate):
        partials = list(zip(grouped.column("v_sum").to_pylist(), g_count, strict=True))
    else:
        firsts = arrow_to_rows(batch.take(pa.array(g_first)), op.spec.input_type)
        partials = list(zip(firsts, grouped.column(f"v_{_ARROW_AGG[name]}").to_pylist(), strict=True))
    # groups in the order of their first record, as the per-record path would meet them
    order = sorted(range(len(g_keys)), key=lambda j: (g_first[j], g_starts[j]))
    backend = op.backend
    for j in order:
        key = keys[g_keys[j]]
        backend.current_key = key
        start = g_starts[j]
        op._add_accumulator(key, TimeWindow(start, start + size), partials[j], g_tmax[j])
