"""The wall clock in epoch milliseconds: processing time, checkpoint and job timestamps."""

from __future__ import annotations

import time


def now_ms() -> int:
    return time.time_ns() // 1_000_000
