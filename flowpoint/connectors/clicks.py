"""Seed 000's click events, generated deterministically from the record index.

An event is ``Row(ts, channel, id, behavior)``: ``ts`` in epoch milliseconds, ``channel`` one of
``a``-``d``, ``id`` a user id, ``behavior`` one of INSTALL/OPEN/BROWSE/CLICK/PURCHASE/CLOSE/
UNINSTALL. Event ``i`` is the same whenever it is generated, so replaying a source from a position
yields the same events. ``ts`` advances ``interval_ms`` per event and lags by up to
``max_lateness_ms`` (seed 000 simulates late events that way).
"""

from __future__ import annotations

import binascii
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from flowpoint.api.row import Row
from flowpoint.api.types import Types

CHANNELS = ("a", "b", "c", "d")
BEHAVIORS = ("INSTALL", "OPEN", "BROWSE", "CLICK", "PURCHASE", "CLOSE", "UNINSTALL")
CLICK_EVENT_FIELDS = ("ts", "channel", "id", "behavior")
CLICK_EVENT_TYPE = Types.ROW_NAMED(
    list(CLICK_EVENT_FIELDS), [Types.LONG(), Types.STRING(), Types.STRING(), Types.STRING()]
)
DEFAULT_START_TS = 1_700_000_000_000  # 2023-11-14T22:13:20Z

_M64 = (1 << 64) - 1
_CHANNELS = pa.array(CHANNELS, pa.string())
_BEHAVIORS = pa.array(BEHAVIORS, pa.string())


def _mix(x: int) -> int:
    """splitmix64 finalizer on a Python int (same arithmetic as ``_mix_np``)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def _mix_np(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        x = x + np.uint64(0x9E3779B97F4A7C15)
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


@dataclass(frozen=True)
class ClickEventGenerator:
    """``generator_function`` for ``DataGeneratorSource``: ``gen(index) -> Row``.

    ``num_users`` bounds the distinct ids (``user-<n>``); ``None`` gives UUID-like unique ids.
    """

    num_users: int | None = 10_000
    seed: int = 0
    start_ts: int = DEFAULT_START_TS
    interval_ms: int = 5
    max_lateness_ms: int = 0

    output_type = CLICK_EVENT_TYPE

    def _base(self, index: int) -> int:
        return _mix((self.seed * 0x100000001B3 + index) & _M64)

    def __call__(self, index: int) -> Row:
        h = self._base(index)
        channel = CHANNELS[h & 3]
        behavior = BEHAVIORS[(h >> 2) % 7]
        lag = (h >> 8) % (self.max_lateness_ms + 1) if self.max_lateness_ms else 0
        ts = self.start_ts + index * self.interval_ms - lag
        if self.num_users is None:
            uid = f"{_mix(h):016x}{h:016x}"
        else:
            uid = f"user-{(h >> 32) % self.num_users}"
        return Row.of(CLICK_EVENT_FIELDS, (ts, channel, uid, behavior))

    def batch(self, start: int, end: int) -> pa.RecordBatch:
        """Events ``start .. end-1`` as an Arrow batch, equal to ``[self(i) for i in range(start, end)]``."""
        idx = np.arange(start, end, dtype=np.uint64)
        with np.errstate(over="ignore"):
            h = _mix_np(np.uint64(self.seed) * np.uint64(0x100000001B3) + idx)
        channel = _CHANNELS.take(pa.array((h & np.uint64(3)).astype(np.int64)))
        behavior = _BEHAVIORS.take(pa.array(((h >> np.uint64(2)) % np.uint64(7)).astype(np.int64)))
        ts = np.int64(self.start_ts) + idx.astype(np.int64) * np.int64(self.interval_ms)
        if self.max_lateness_ms:
            ts = ts - ((h >> np.uint64(8)) % np.uint64(self.max_lateness_ms + 1)).astype(np.int64)
        if self.num_users is None:
            # f"{mix(h):016x}{h:016x}" for every event at once: the hex digits of both numbers
            # (big-endian) are one 32-character string per event
            pairs = np.empty((len(h), 2), dtype=">u8")
            pairs[:, 0] = _mix_np(h)
            pairs[:, 1] = h
            offsets = np.arange(0, 32 * (len(h) + 1), 32, dtype=np.int32)
            ids = pa.StringArray.from_buffers(len(h), pa.py_buffer(offsets), pa.py_buffer(binascii.hexlify(pairs.tobytes())))
        else:
            users = pa.array((h >> np.uint64(32)) % np.uint64(self.num_users)).cast(pa.string())
            ids = pc.binary_join_element_wise("user-", users, "")  # f"user-{n}"
        return pa.RecordBatch.from_arrays(
            [pa.array(ts, pa.int64()), channel, ids, behavior],
            schema=CLICK_EVENT_TYPE.arrow_schema(),  # type: ignore[attr-defined]
        )
