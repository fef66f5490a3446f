"""The RocksDB backend's DB key layout (flowpoint/state/rocksdb.py has the whole picture)::

    key group (2) | state id (1) | len(key) (4) | key | len(namespace) (4) | namespace | [user key]

Keys and user keys are pickled canonically (:func:`key_bytes`: equal keys give equal bytes);
meta entries live under :data:`META`, after every key group.
"""

from __future__ import annotations

import io
import pickle
import struct
from typing import Any

from flowpoint.state.key_identity import StateKey
from flowpoint.state.keygroups import canonical_bytes

META = b"\xff\xff"
META_STATE = META + b"S"  # + name (utf-8) -> state id (1 byte) + kind (ascii)
META_VERSION = META + b"V"  # -> committed epoch (8 bytes)
META_COUNT = META + b"N"  # -> number of (state, key) pairs (8 bytes)
META_FORMAT = META + b"F"  # -> layout version (8 bytes)
FORMAT_VERSION = 1
DATA_END = META  # every data key sorts below this (key groups are < 2**15)
UNKNOWN_KIND = "?"  # restored from a snapshot before the state was declared
MAX_STATES = 256

EMPTY_NS = b"\x00\x00\x00\x00"  # length-prefixed empty namespace
pack_u32 = struct.Struct(">I").pack
pack_u64 = struct.Struct(">Q").pack
unpack_u64 = struct.Struct(">Q").unpack
MISS: Any = object()  # not in a cache (None and ABSENT are values there)
_KEY_ATOMIC = frozenset({int, bool, str, bytes, type(None)})


class _SortedFrozenset:
    """Pickles as ``frozenset(items)`` with the items in canonical order."""

    __slots__ = ("items",)

    def __init__(self, items: tuple) -> None:
        self.items = items

    def __reduce__(self) -> Any:
        return (frozenset, (self.items,))


class _Sorted:
    """Pickles as ``factory(items)`` with the items in canonical order (dict and set keys)."""

    __slots__ = ("factory", "items")

    def __init__(self, factory: Any, items: list) -> None:
        self.factory = factory
        self.items = items

    def __reduce__(self) -> Any:
        return (self.factory, (self.items,))


_NAN = float("nan")  # every NaN key pickles as this one


def _normalize(key: Any) -> Any:
    """The form of a key that is pickled: equal keys (as ``keygroups.canonical_bytes`` sees
    them) give equal pickles."""
    t = type(key)
    if t in _KEY_ATOMIC:
        return key
    if t is StateKey:
        return _normalize(key.key)
    if t is float:
        return _NAN if key != key else 0.0 if key == 0.0 else key
    if isinstance(key, tuple):
        return tuple(_normalize(x) for x in key)
    if isinstance(key, list):
        return [_normalize(x) for x in key]
    if isinstance(key, dict):
        items = sorted(((_normalize(k), _normalize(v)) for k, v in key.items()), key=lambda kv: canonical_bytes(kv))
        return _Sorted(dict, items)
    if isinstance(key, set):
        return _Sorted(set, sorted((_normalize(k) for k in key), key=canonical_bytes))
    if isinstance(key, str):
        return str(key)
    if isinstance(key, bool):
        return bool(key)
    if isinstance(key, int):
        return int.__index__(key)
    if isinstance(key, float):
        return _normalize(float(key))
    if isinstance(key, bytes):
        return bytes(key)
    if isinstance(key, frozenset):
        items = sorted((_normalize(k) for k in key), key=canonical_bytes)
        return _SortedFrozenset(tuple(items))
    if hasattr(key, "item") and hasattr(key, "dtype"):  # numpy scalar
        return _normalize(key.item())
    return key


def key_bytes(key: Any) -> bytes:
    """Pickle (protocol 5) of a key or map user key, canonical for equal keys."""
    t = type(key)
    if t is str or t is int or t is bytes:
        return pickle.dumps(key, 5)
    buf = io.BytesIO()
    p = pickle.Pickler(buf, 5)
    p.fast = True  # no memo: ("a", "a") pickles alike whether or not the two are one object
    p.dump(_normalize(key))
    return buf.getvalue()


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def parse_db_key(kb: bytes) -> tuple[int, int, bytes, bytes, bytes]:
    """``(key group, state id, key bytes, namespace bytes, user key bytes)`` of a data key."""
    klen = int.from_bytes(kb[3:7], "big")
    p = 7 + klen
    nlen = int.from_bytes(kb[p : p + 4], "big")
    q = p + 4 + nlen
    return int.from_bytes(kb[0:2], "big"), kb[2], kb[7:p], kb[p + 4 : q], kb[q:]


def key_group_prefix(key_group: int) -> bytes:
    """Start of a key group's DB key range (rescaling reads or deletes ranges of these)."""
    return key_group.to_bytes(2, "big")


