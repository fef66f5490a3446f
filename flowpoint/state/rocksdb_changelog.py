"""RocksDB changelog parts (``state.backend.changelog.enabled``, Flink's changelog state backend).

A RocksDB checkpoint with the changelog on is a *chain*: a materialization (the DB's SST and
private files, all in ``shared/``) followed by changelog parts, each holding the committed
:class:`~flowpoint.state.rocksdb.RocksDBDelta`s applied to the DB since the part before it. A
checkpoint then uploads what changed since the last one, whatever compaction rewrote; a restore
opens the materialization and applies the parts in order.

The part is bytes, not a pickle: reading one (to restore, or to count a checkpoint's keys) runs
no code. Layout: ``MAGIC``, then zlib (level 1: a part's keys compress about as well as the
SST files' do) of: per delta a header ``(version u64, key count change i64, number
of prefix deletes, deletes, puts u32, length of the states JSON u32)``, the states JSON
(``{name: [state id, kind]}``), then each prefix delete and delete as ``u32 length + bytes`` and
each put as ``u32 key length, u32 value length, key, value``.
"""

from __future__ import annotations

import json
import struct
import zlib
from typing import Any

from flowpoint.errors import CorruptStateError
from flowpoint.state.rocksdb_delta import RocksDBDelta

MAGIC = b"FPRL1\n"  # then the entries, zlib-compressed (level 1)
LOCAL_PREFIX = "flowpoint-changelog-"  # a part's local name in a restore's file list (never a RocksDB file's)
_HEAD = struct.Struct("<QqIIII")
_U32 = struct.Struct("<I")
_PAIR = struct.Struct("<II")


def encode(entries: list[tuple[int, Any]]) -> bytes:
    """One changelog part: ``[(version, RocksDBDelta)]`` in the order they were applied."""
    out: list[bytes] = []
    u32, pair = _U32.pack, _PAIR.pack
    for version, d in entries:
        states = json.dumps({name: [sid, kind] for name, (sid, kind) in d.states.items()}, sort_keys=True).encode()
        out.append(_HEAD.pack(version, d.key_count_change, len(d.prefix_deletes), len(d.deletes), len(d.puts), len(states)))
        out.append(states)
        for kb in d.prefix_deletes:
            out += (u32(len(kb)), kb)
        for kb in d.deletes:
            out += (u32(len(kb)), kb)
        for kb, vb in d.puts.items():
            out += (pair(len(kb), len(vb)), kb, vb)
    return MAGIC + zlib.compress(b"".join(out), 1)


def decode(data: bytes, where: str) -> list[tuple[int, Any]]:
    """The deltas of a part; a truncated or malformed part is a CorruptStateError naming ``where``."""
    if not data.startswith(MAGIC):
        msg = f"{where} is not a flowpoint RocksDB changelog part (it does not start with {MAGIC!r})"
        raise CorruptStateError(msg)
    try:
        data = zlib.decompress(memoryview(data)[len(MAGIC) :])
    except zlib.error as e:
        msg = f"{where} is truncated or corrupt: its RocksDB changelog entries do not decompress ({e})"
        raise CorruptStateError(msg) from e
    view = memoryview(data)
    pos, end = 0, len(data)

    def take(n: int) -> bytes:
        nonlocal pos
        if n < 0 or pos + n > end:
            msg = f"{where} is truncated or corrupt: a RocksDB changelog entry runs past the end of the file ({end} bytes)"
            raise CorruptStateError(msg)
        b = view[pos : pos + n].tobytes()
        pos += n
        return b

    out = []
    try:
        while pos < end:
            version, count, n_prefix, n_delete, n_put, n_states = _HEAD.unpack(take(_HEAD.size))
            states = json.loads(take(n_states))
            d = RocksDBDelta(states={str(k): (int(v[0]), str(v[1])) for k, v in states.items()}, key_count_change=count)
            for _ in range(n_prefix):
                d.prefix_deletes.append(take(_U32.unpack(take(4))[0]))
            for _ in range(n_delete):
                d.deletes.append(take(_U32.unpack(take(4))[0]))
            for _ in range(n_put):
                kl, vl = _PAIR.unpack(take(8))
                kb = take(kl)  # (not in one statement: Python evaluates the value first)
                d.puts[kb] = take(vl)
            out.append((version, d))
    except CorruptStateError:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, struct.error) as e:
        msg = f"{where} is corrupt: a RocksDB changelog entry does not parse ({type(e).__name__}: {e})"
        raise CorruptStateError(msg) from e
    return out


def replay(backend: Any, parts: list[tuple[str, bytes]]) -> None:
    """Apply changelog parts ``[(where, bytes)]`` in order to a DB opened from their materialization."""
    for where, data in parts:
        for _version, delta in decode(data, where):
            backend.apply(delta)


# a changelog kept in memory beyond this (checkpoints not completing) is dropped: the next
# checkpoint then materializes instead of uploading it
CHANGELOG_MEMORY_BYTES = 256 << 20


class DeltaLog:
    """A RocksDB backend's changelog in memory: every committed delta applied since version
    ``start`` (None: not known since when; the next materialization restarts it). Off (no
    ``entries``) until :meth:`record` is called."""

    __slots__ = ("entries", "nbytes", "start")

    def __init__(self) -> None:
        self.entries: list[tuple[int, Any, int]] | None = None  # (version, delta, its bytes)
        self.start: int | None = None
        self.nbytes = 0

    def record(self, version: int) -> None:
        """Keep every committed delta from now on; the log is complete from ``version``."""
        if self.entries is None:
            self.entries, self.start, self.nbytes = [], version, 0

    def forget(self) -> None:
        """A change the log cannot replay (or cannot say when it happened) was made."""
        if self.entries is not None:
            self.entries, self.start, self.nbytes = [], None, 0

    def applied(self, delta: Any, version: int | None) -> None:
        """A committed ``delta`` reached the DB, completing ``version`` (None: no version)."""
        if self.entries is None or not delta:
            return
        if version is None:
            self.forget()  # a change no version names: the log cannot say when it happened
            return
        size = delta.nbytes()
        self.entries.append((version, delta, size))
        self.nbytes += size
        if self.nbytes > CHANGELOG_MEMORY_BYTES:
            self.forget()  # checkpoints have not completed for long: the next one materializes

    def since(self, version: int, current: int) -> tuple[list[tuple[int, Any]], int] | None:
        """``(the deltas applied after version, in order, their bytes)`` while the DB is at
        ``current``; None if the log does not hold all of them. The deltas up to ``version``
        go: a completed checkpoint holds them."""
        if self.entries is None or self.start is None or not self.start <= version <= current:
            return None
        if version > self.start:
            self.entries = [e for e in self.entries if e[0] > version]
            self.nbytes = sum(e[2] for e in self.entries)
            self.start = version
        return [(v, d) for v, d, _size in self.entries], self.nbytes

    def materialized(self, version: int) -> None:
        """A snapshot of the DB at ``version`` was taken: a log forgotten earlier restarts here."""
        if self.entries is not None and self.start is None:
            self.entries, self.start, self.nbytes = [], version, 0


__all__ = ["CHANGELOG_MEMORY_BYTES", "LOCAL_PREFIX", "MAGIC", "DeltaLog", "decode", "encode", "replay"]
