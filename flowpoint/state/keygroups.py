"""Key -> key group -> operator index, as Flink's ``KeyGroupRangeAssignment``, with a stable hash.

Python's ``hash()`` is salted per process, so keys are hashed from canonical bytes with
32-bit murmur3 instead: the same key lands in the same key group in every process, on every
machine, in every run.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import mmh3
import numpy as np
import pyarrow as pa

from flowpoint.errors import ConfigurationError, InvalidKeyError

if TYPE_CHECKING:
    from collections.abc import Callable

UPPER_BOUND_MAX_PARALLELISM = 1 << 15
DEFAULT_LOWER_BOUND_MAX_PARALLELISM = 1 << 7

_pack_double = struct.Struct("<d").pack
_NAN = _pack_double(float("nan"))  # every NaN (any sign or payload) is one key


def _canonical(key: object, out: list[bytes]) -> None:
    t = type(key)
    if t is str:
        out.append(b"s")
        out.append(key.encode("utf-8"))  # type: ignore[union-attr]
    elif t is int or t is bool:
        out.append(b"i" if t is int else b"b")
        out.append(key.to_bytes(8 if -(1 << 63) <= key < (1 << 63) else (key.bit_length() + 8) // 8, "little", signed=True))  # type: ignore[union-attr]
    elif key is None:
        out.append(b"n")
    elif t is float:
        f = key  # 1.0 and 1 are different keys (as in PyFlink, which compares serialized bytes)
        out.append(b"f")
        out.append(_NAN if f != f else _pack_double(0.0 if f == 0.0 else f))  # one NaN; -0.0 is 0.0
    elif t is bytes:
        out.append(b"y")
        out.append(key)  # type: ignore[arg-type]
    elif t is StateKey:
        out.append(key.cb)  # type: ignore[union-attr]
    elif isinstance(key, tuple):  # tuple, Row, namedtuple
        out.append(b"(")
        for item in key:
            _canonical(item, out)
            out.append(b"\x00")
        out.append(b")")
    elif isinstance(key, str):  # str subclasses such as str enums
        out.append(b"s")
        out.append(key.encode("utf-8"))
    elif isinstance(key, int):
        _canonical(int.__index__(key), out)
    elif isinstance(key, float):
        _canonical(float.__float__(key), out)
    elif isinstance(key, bytes):
        _canonical(bytes(key), out)
    elif isinstance(key, list):
        out.append(b"[")
        for item in key:
            _canonical(item, out)
            out.append(b"\x00")
        out.append(b"]")
    elif isinstance(key, (set, frozenset)):
        out.append(b"{" if isinstance(key, frozenset) else b"S")
        for part in sorted(canonical_bytes(k) for k in key):
            out.append(part)
            out.append(b"\x00")
        out.append(b"}")
    elif isinstance(key, dict):
        out.append(b"d")
        for kb, vb in sorted((canonical_bytes(k), canonical_bytes(v)) for k, v in key.items()):
            out.append(kb)
            out.append(b"\x00")
            out.append(vb)
            out.append(b"\x00")
        out.append(b"}")
    elif hasattr(key, "item") and hasattr(key, "dtype"):  # numpy scalar
        _canonical(key.item(), out)  # type: ignore[union-attr]
    else:
        msg = (
            f"a key must be a str, int, float, bool, bytes, None, or a tuple/Row/list/dict/set of those; "
            f"got a {type(key).__name__}: {key!r:.80}"
        )
        raise InvalidKeyError(msg)


class StateKey:
    """A key compared and hashed by its canonical bytes (``cb``); ``key`` is the user's key."""

    __slots__ = ("key", "cb", "_hash")

    def __init__(self, key: Any, cb: bytes | None = None) -> None:
        self.key = key
        self.cb = canonical_bytes(key) if cb is None else cb
        self._hash = hash(self.cb)

    def __eq__(self, other: object) -> bool:
        return type(other) is StateKey and other.cb == self.cb  # type: ignore[union-attr]

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> Any:
        # pickles (deltas, checkpoints) hold the user's key only; the identity is recomputed
        return (state_key, (self.key,))

    def __repr__(self) -> str:
        return f"StateKey({self.key!r})"


PLAIN_KEY_TYPES = frozenset({str, int, bytes})


def state_key(key: Any) -> Any:
    """The state key of ``key`` (idempotent). Raises ``InvalidKeyError`` for a value that
    cannot be a key.

    Plain values are their own state key: exactly ``str``, ``int`` and ``bytes``, and tuples of
    them (a Row or namedtuple of them as the plain tuple). Among plain values Python's equality is
    the canonical one, and no plain value equals a :class:`StateKey`, so the common keys (a user
    id, a ``(channel, behavior)`` pair) cost no canonical bytes per record."""
    t = type(key)
    if t is str or t is int or t is bytes or t is StateKey:
        return key
    if isinstance(key, tuple):
        for x in key:
            if type(x) not in PLAIN_KEY_TYPES:
                break
        else:
            return key if t is tuple else tuple(key)
    cb = canonical_bytes(key)
    # subclasses of str, int and bytes (str enums, IntEnum, numpy integers) are the plain
    # value's key: hold them as the plain value so they meet it in every table
    tag = cb[:1]
    if tag == b"s":
        return str.__str__(key) if isinstance(key, str) else cb[1:].decode("utf-8")
    if tag == b"i" and isinstance(key, int) and not isinstance(key, bool):
        return int.__index__(key)
    if tag == b"i" and not isinstance(key, bool) and hasattr(key, "item"):  # numpy integer
        return int(key.item())
    if tag == b"y":
        return bytes(key)
    return StateKey(key, cb)


def canonical_bytes(key: object) -> bytes:
    """The bytes a key is hashed from; equal keys give equal bytes in every process."""
    t = type(key)
    if t is str:
        return b"s" + key.encode("utf-8")  # type: ignore[union-attr]
    if t is StateKey:
        return key.cb  # type: ignore[union-attr]
    out: list[bytes] = []
    _canonical(key, out)
    return b"".join(out)


def key_hash(key: object) -> int:
    """Stable non-negative 31-bit hash of a key."""
    return mmh3.hash(canonical_bytes(key), 0, False) & 0x7FFFFFFF


def assign_to_key_group(key: object, max_parallelism: int) -> int:
    return key_hash(key) % max_parallelism


def compute_operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    return key_group * parallelism // max_parallelism


@dataclass(frozen=True)
class KeyGroupRange:
    """Key groups ``start..end`` inclusive, owned by one task."""

    start: int
    end: int

    def __contains__(self, key_group: int) -> bool:
        return self.start <= key_group <= self.end

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __str__(self) -> str:
        return f"{self.start}-{self.end}"


def key_group_range_for_operator(max_parallelism: int, parallelism: int, operator_index: int) -> KeyGroupRange:
    check_parallelism(parallelism, max_parallelism)
    start = (operator_index * max_parallelism + parallelism - 1) // parallelism
    end = ((operator_index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


def _round_up_to_power_of_two(x: int) -> int:
    return 1 if x <= 1 else 1 << (x - 1).bit_length()


def compute_default_max_parallelism(parallelism: int) -> int:
    return min(
        max(_round_up_to_power_of_two(parallelism + parallelism // 2), DEFAULT_LOWER_BOUND_MAX_PARALLELISM),
        UPPER_BOUND_MAX_PARALLELISM,
    )


def check_parallelism(parallelism: int, max_parallelism: int, what: str | Callable[[], str] = "operator") -> None:
    """Refuse a parallelism outside ``1..max_parallelism`` or a max parallelism outside Flink's
    bounds. ``what`` names the operator; a callable is called only to format an error."""
    if not 1 <= max_parallelism <= UPPER_BOUND_MAX_PARALLELISM:
        msg = f"max parallelism of {_name(what)} must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}; got {max_parallelism}"
        raise ConfigurationError(msg)
    if not 1 <= parallelism <= max_parallelism:
        msg = (
            f"parallelism of {_name(what)} must be between 1 and its max parallelism {max_parallelism}; "
            f"got {parallelism}"
        )
        raise ConfigurationError(msg)


def _name(what: str | Callable[[], str]) -> str:
    return what if isinstance(what, str) else what()


# -- key groups of a whole batch of keys at once -------------------------------------------------
#
# The same murmur3_32 (seed 0) of the same canonical bytes as ``key_hash``, computed with numpy
# over a batch of keys whose canonical bytes can be laid out without Python objects: Arrow
# columns of strings and of signed integers, and tuples of those (a key of several fields).
# ``tests/test_keygroups.py`` checks it against ``assign_to_key_group`` key by key.

_C1 = np.uint32(0xCC9E2D51)
_C2 = np.uint32(0x1B873593)
_INT_TYPES = (pa.int8(), pa.int16(), pa.int32(), pa.int64(), pa.uint8(), pa.uint16(), pa.uint32())


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << np.uint32(r)) | (x >> np.uint32(32 - r))


def _murmur3_rows(m: np.ndarray, length: int) -> np.ndarray:
    """murmur3_32 (seed 0) of every row's first ``length`` bytes of a uint8 matrix of width
    ``(length // 4 + 1) * 4`` whose bytes after ``length`` are zeros."""
    blocks = m.view("<u4")
    h = np.zeros(len(m), dtype=np.uint32)
    for b in range(length // 4):
        k = _rotl(blocks[:, b] * _C1, 15) * _C2
        h = _rotl(h ^ k, 13) * np.uint32(5) + np.uint32(0xE6546B64)
    if length & 3:  # the tail: the last 1-3 bytes, then the zeros of the padding
        h ^= _rotl(blocks[:, length // 4] * _C1, 15) * _C2
    h ^= np.uint32(length & 0xFFFFFFFF)
    h ^= h >> np.uint32(16)
    h *= np.uint32(0x85EBCA6B)
    h ^= h >> np.uint32(13)
    h *= np.uint32(0xC2B2AE35)
    h ^= h >> np.uint32(16)
    return h


class _Column:
    """One key column's canonical bytes: ``b"s"`` + UTF-8 (strings) or ``b"i"`` + 8 bytes
    little-endian (integers); ``lengths`` of every row's canonical bytes."""

    __slots__ = ("text", "offsets", "ints", "lengths")

    def __init__(self, col: pa.Array) -> None:
        n = len(col)
        t = col.type
        self.text = self.offsets = self.ints = None
        if pa.types.is_string(t) or pa.types.is_large_string(t):
            off_type = np.int32 if pa.types.is_string(t) else np.int64
            buffers = col.buffers()
            offsets = np.frombuffer(buffers[1], dtype=off_type)[col.offset : col.offset + n + 1].astype(np.int64)
            raw = np.frombuffer(buffers[2], dtype=np.uint8) if buffers[2] is not None else np.zeros(0, np.uint8)
            self.text = raw[int(offsets[0]) : int(offsets[-1])]
            self.offsets = offsets - offsets[0]
            self.lengths = np.diff(offsets) + 1
        else:
            values = col.cast(pa.int64()).to_numpy(zero_copy_only=False)
            self.ints = values.astype("<i8").view(np.uint8).reshape(n, 8)
            self.lengths = np.full(n, 9, dtype=np.int64)

    def fill(self, m: np.ndarray, at: int, rows: np.ndarray | None, length: int) -> None:
        """Write the canonical bytes of ``rows`` (all of them: None), each ``length`` long, at
        column ``at`` of ``m``."""
        if self.ints is not None:
            m[:, at] = ord("i")
            m[:, at + 1 : at + 9] = self.ints if rows is None else self.ints[rows]
            return
        m[:, at] = ord("s")
        body = length - 1
        if body == 0:
            return
        if rows is None:  # every row this long: the column's text is the rows one after another
            m[:, at + 1 : at + length] = self.text.reshape(-1, body)
        else:
            m[:, at + 1 : at + length] = self.text[self.offsets[rows][:, None] + np.arange(body)]


def _column(col: Any) -> _Column | None:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks()
    t = col.type
    if col.null_count or not (pa.types.is_string(t) or pa.types.is_large_string(t) or t in _INT_TYPES):
        return None
    return _Column(col)


def key_groups_of_columns(columns: list, max_parallelism: int, as_tuple: bool) -> np.ndarray | None:
    """``assign_to_key_group(key, max_parallelism)`` of every row's key at once: the key is the
    row's value of the one column (``as_tuple`` False) or the tuple of the columns' values.
    None when a column is not of strings or signed (or up to 32-bit unsigned) integers or holds
    nulls, or when the keys' canonical bytes come in more than 64 lengths (rows of one length
    are hashed together)."""
    if not columns or (not as_tuple and len(columns) != 1):
        return None
    cols = []
    for c in columns:
        col = _column(c)
        if col is None:
            return None
        cols.append(col)
    n = len(cols[0].lengths)
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    # the layout of a row: b"(" + (canonical(item) + b"\x00") per item + b")" for a tuple
    code = np.zeros(n, dtype=np.int64)
    for col in cols:
        code = code * (int(col.lengths.max()) + 1) + col.lengths
    if int(code.min()) == int(code.max()):
        groups = [(None, cols[0].lengths[:1])]
    else:
        present, inverse = np.unique(code, return_inverse=True)
        if len(present) > 64:
            return None
        order = np.argsort(inverse, kind="stable")
        bounds = np.searchsorted(inverse[order], np.arange(len(present) + 1))
        groups = [(order[bounds[g] : bounds[g + 1]], None) for g in range(len(present))]
    h = np.empty(n, dtype=np.uint32)
    for rows, _ in groups:
        first = 0 if rows is None else int(rows[0])
        lengths = [int(col.lengths[first]) for col in cols]
        total = sum(lengths) + (2 + len(cols) if as_tuple else 0)
        m = np.zeros((n if rows is None else len(rows), (total // 4 + 1) * 4), dtype=np.uint8)
        at = 0
        if as_tuple:
            m[:, 0] = ord("(")
            at = 1
        for col, length in zip(cols, lengths, strict=True):
            col.fill(m, at, rows, length)
            at += length + (1 if as_tuple else 0)  # the b"\x00" after an item is the matrix's zero
        if as_tuple:
            m[:, at] = ord(")")
        if rows is None:
            h = _murmur3_rows(m, total)
        else:
            h[rows] = _murmur3_rows(m, total)
    return (h & np.uint32(0x7FFFFFFF)).astype(np.int64) % max_parallelism


def key_groups_of_keys(keys: list, max_parallelism: int) -> np.ndarray | None:
    """:func:`key_groups_of_columns` for a list of keys that are all exactly ``str`` or all
    exactly ``int`` (within 64 bits); None for any other list."""
    if not keys:
        return None
    types = set(map(type, keys))
    if types == {str}:
        col = pa.array(keys, pa.string())
    elif types == {int}:
        try:
            col = pa.array(keys, pa.int64())
        except (OverflowError, pa.ArrowInvalid):
            return None
    else:
        return None
    return key_groups_of_columns([col], max_parallelism, as_tuple=False)
