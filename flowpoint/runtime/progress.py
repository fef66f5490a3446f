"""Progress lines on stderr and the history of the job's last commits (driver side).

``execution.progress.interval`` (ms) decides: negative prints nothing, 0 prints every line, a
positive interval prints at most one throughput line per interval. Lines that say what happened
to the job (it runs, restores, restarts, ends, wrote a savepoint) are printed unless negative.
"""

from __future__ import annotations

import sys
import time
from typing import Any

HISTORY = 1000  # commits kept in ``history``


class Progress:
    def __init__(self, config: Any):
        self.config = config
        self.history: list[tuple[int, int, float]] = []  # (epoch, records read, seconds), the last 1,000
        self._last = 0.0

    def _interval(self) -> int:
        return int(self.config.get("execution.progress.interval"))

    def say(self, line: str) -> None:
        if self._interval() >= 0:
            print(f"[flowpoint] {line}", file=sys.stderr, flush=True)

    def committed(self, epoch: int, records: int, seconds: float, total: int) -> None:
        """Epoch ``epoch`` committed ``records`` in ``seconds``; the job has read ``total``."""
        self.history.append((epoch, records, seconds))
        del self.history[:-HISTORY]
        interval = self._interval()
        now = time.monotonic()
        if interval < 0 or (interval and (now - self._last) * 1000 < interval):
            return
        self._last = now
        rate = records / seconds if seconds > 0 else 0.0
        self.say(f"epoch {epoch}: {records:,} records in {seconds:.2f} s ({rate:,.0f} records/s); total {total:,}")

    def ended(self, job_name: str, job_id: str, status: str, epochs: int, records_read: int, seconds: float) -> None:
        rate = records_read / seconds if seconds > 0 else 0.0
        self.say(
            f"job {job_name!r} ({job_id}) {status}: {epochs} epochs, "
            f"{records_read:,} records in {seconds:.1f} s ({rate:,.0f} records/s)"
        )
