"""A list state value held as chunks: Arrow batches not yet turned into Python values, and runs
of Python values, in order.

A window's buffered elements (``tasks/window_buffer.py``) arrive a columnar batch at a time; a
:class:`ChunkedList` keeps each batch's slice as Arrow and converts it to the stream's Python
values (Rows or tuples, with the same conversion as the per-record path) only when the list is
read: when the window fires, or when the value is pickled or copied. It is never changed in
place (adding gives a new one), so backends need not guard it in their undo logs.

Its stored form is the plain list: pickling (a checkpoint's delta, a savepoint) and
``copy.deepcopy`` give ``list(values)``, so snapshots, savepoints and the state reader see what
the per-record path stores, and a restored value is a list again.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any


class ChunkedList:
    """An immutable sequence of chunks: ``convert(chunk)`` gives the values of an Arrow chunk;
    a tuple chunk holds Python values already. ``frozen``: no chunk holds a value that user
    code could change in place (Arrow chunks never do)."""

    __slots__ = ("chunks", "convert", "size", "frozen")

    def __init__(self, chunks: tuple, convert: Callable[[Any], list], size: int, frozen: bool):
        self.chunks = chunks
        self.convert = convert
        self.size = size
        self.frozen = frozen

    def with_batch(self, batch: Any) -> ChunkedList:
        """A new list: these values, then the batch's."""
        return ChunkedList((*self.chunks, batch), self.convert, self.size + batch.num_rows, self.frozen)

    def with_values(self, values: tuple, frozen: bool) -> ChunkedList:
        """A new list: these values, then ``values`` (``frozen``: none of them is mutable)."""
        return ChunkedList((*self.chunks, values), self.convert, self.size + len(values), self.frozen and frozen)

    def to_list(self) -> list:
        out: list = []
        for chunk in self.chunks:
            out.extend(chunk if type(chunk) is tuple else self.convert(chunk))
        return out

    def __iter__(self) -> Iterator[Any]:
        return iter(self.to_list())

    def __len__(self) -> int:
        return self.size

    def __reduce__(self) -> tuple:
        return (list, (self.to_list(),))

    def __repr__(self) -> str:
        return f"ChunkedList({self.to_list()!r})"
