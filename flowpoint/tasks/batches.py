"""Batches of records inside a task and on the wire between tasks.

Inside a task a batch is a Python list of records or a ``pyarrow.RecordBatch`` (sources that
produce columns keep them columnar until a Python function needs rows). Every batch carries an
*origin*: ``(source node, split index, sequence number)`` of the source batch it came from.
Receiving tasks order their input by origin, so a task's input order does not depend on the
order Spark fetched shuffle blocks in, and a retried task computes exactly what the first
attempt computed.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator
from typing import Any

import pyarrow as pa

from flowpoint.api.types import arrow_to_rows, iter_arrow_rows
from flowpoint.pickles import dumps

Origin = tuple


class KeyedBatch:
    """Records of a keyed exchange that stayed columnar: a batch whose key is the tuple of the
    ``fields`` columns (one field: the value itself). Operators that cannot use columns get
    ``(key, value)`` pairs from :meth:`pairs`."""

    __slots__ = ("batch", "fields")

    def __init__(self, batch: pa.RecordBatch, fields: tuple[str, ...]):
        self.batch = batch
        self.fields = fields

    def __len__(self) -> int:
        return self.batch.num_rows

    def keys(self) -> list:
        cols = [self.batch.column(f).to_pylist() for f in self.fields]
        return cols[0] if len(cols) == 1 else list(zip(*cols, strict=True))

    def pairs(self, type_info: Any = None) -> list:
        keys, rows = self.keys_and_rows(type_info)
        return list(zip(keys, rows, strict=True))

    def keys_and_rows(self, type_info: Any = None) -> tuple[list, list]:
        """The keys and the records (as :meth:`pairs` pairs them), each column converted once."""
        keys, rows = self.keys_and_row_iter(type_info)
        return list(keys), list(rows)

    def keys_and_row_iter(self, type_info: Any = None) -> tuple[Iterable, Iterator]:
        """:meth:`keys_and_rows` with the records (and tuple keys) built as they are iterated
        (``iter_arrow_rows``: a per-record loop that never holds the batch's Rows at once keeps
        the cyclic GC idle)."""
        batch = self.batch
        names = batch.schema.names
        columns = [c.to_pylist() for c in batch.columns]
        rows = iter_arrow_rows(batch, type_info, columns)
        key_columns = []
        for f in self.fields:
            i = names.index(f)
            t = batch.schema.field(i).type
            # a key of scalars shares the rows' Python objects (one conversion of the column);
            # a nested one (a list) is a copy of its own, as user code may change the row's
            shared = pa.types.is_string(t) or pa.types.is_integer(t) or pa.types.is_large_string(t)
            key_columns.append(columns[i] if shared else batch.column(i).to_pylist())
        keys = key_columns[0] if len(key_columns) == 1 else zip(*key_columns, strict=True)
        return keys, rows


def as_rows(data: Any, type_info: Any = None) -> list:
    if isinstance(data, list):
        return data
    if isinstance(data, KeyedBatch):
        return arrow_to_rows(data.batch, type_info)
    return arrow_to_rows(data, type_info)


def num_records(data: Any) -> int:
    return len(data) if isinstance(data, (list, KeyedBatch)) else data.num_rows


def _arrow_bytes(data: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, data.schema) as writer:
        writer.write_batch(data)
    return sink.getvalue().to_pybytes()


def encode(data: Any, ts: list | None = None) -> tuple[str, Any]:
    """A batch (and its event timestamps, if the stream has them) as a picklable blob."""
    if isinstance(data, KeyedBatch):
        return ("arrow+keys", (_arrow_bytes(data.batch), None if ts is None else dumps(ts), data.fields))
    if isinstance(data, pa.RecordBatch):
        payload = _arrow_bytes(data)
        return ("arrow", payload) if ts is None else ("arrow+ts", (payload, dumps(ts)))
    return ("pickle", dumps(data)) if ts is None else ("pickle+ts", dumps((data, ts)))


def _arrow(payload: bytes) -> pa.RecordBatch:
    batches = list(pa.ipc.open_stream(payload))
    return batches[0] if len(batches) == 1 else pa.Table.from_batches(batches).combine_chunks().to_batches()[0]


def decode(blob: tuple[str, Any]) -> tuple[Any, list | None]:
    """``(data, timestamps or None)`` of a blob made by :func:`encode`."""
    fmt, payload = blob
    if fmt == "arrow":
        return _arrow(payload), None
    if fmt == "arrow+ts":
        return _arrow(payload[0]), pickle.loads(payload[1])
    if fmt == "arrow+keys":
        batch, ts, fields = payload
        return KeyedBatch(_arrow(batch), fields), None if ts is None else pickle.loads(ts)
    if fmt == "pickle+ts":
        data, ts = pickle.loads(payload)
        return data, ts
    return pickle.loads(payload), None
