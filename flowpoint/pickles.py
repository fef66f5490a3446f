"""Pickling records and state values, on any side."""

from __future__ import annotations

import pickle
from typing import Any


def dumps(obj: Any) -> bytes:
    """Pickle records or state values; classes defined in the job's ``__main__`` (which workers
    cannot import) are pickled by value through cloudpickle. ``pickle.loads`` reads both."""
    try:
        return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    except (pickle.PicklingError, AttributeError, TypeError):
        import cloudpickle

        return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)


def _str_opcode(s: str) -> bytes:
    """The opcode pickling ``s`` without memoizing it (SHORT_BINUNICODE, or BINUNICODE)."""
    b = s.encode("utf-8", "surrogatepass")  # as the pickler encodes a str
    return (b"\x8c" + bytes([len(b)]) if len(b) < 256 else b"X" + len(b).to_bytes(4, "little")) + b


def dumps_tagged(tag: str, key: str, inner: bytes) -> bytes | None:
    """The pickle of ``(tag, {key: obj})`` built around ``inner``, the bytes :func:`dumps` made of
    ``obj``, so that a large ``obj`` is pickled once for two files (the HashMap base and the
    checkpoint's part at a job's final barrier). None when ``inner`` is not a protocol 5 pickle.

    ``pickle.loads`` of the result is ``(tag, {key: obj})``. Why it stays valid: the opcodes put
    before ``inner``'s own remember nothing (no MEMOIZE), so the memo indices ``inner`` assigns and
    refers to (MEMOIZE numbers implicitly, from 0) stay the same; they stand before its first
    FRAME, outside any frame; and ``inner``'s final STOP becomes SETITEM, one byte for one, so
    its last frame keeps its length. TUPLE2 and STOP follow, outside any frame."""
    if inner[:2] != b"\x80\x05" or inner[-1:] != b".":
        return None
    head = b"\x80\x05" + _str_opcode(tag) + b"}" + _str_opcode(key)  # PROTO 5, tag, EMPTY_DICT, key
    return b"".join((head, memoryview(inner)[2:-1], b"s\x86."))  # obj, SETITEM, TUPLE2, STOP
