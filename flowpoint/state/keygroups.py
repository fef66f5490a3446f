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
