"""What the terminal shows of a running job, and the history of its last commits (driver side).

Every line goes to standard error with the prefix ``[flowpoint]``; ``execution.progress.interval``
(ms) decides how many:

* negative: nothing at all;
* a bounded job whose sources know their total (``Source.total_records``), on a terminal
  (standard error is a TTY, ``TERM`` is not ``dumb``, and no ``print()`` sink writes to a
  terminal too): a progress bar, redrawn in place (driver/progress_bar.py), instead of a line
  per epoch;
* otherwise a throughput line per committed epoch (0), or at most one per interval (positive);
* with a ``listener`` (a Jupyter notebook's status display, flowpoint/control/notebook.py): no
  line is printed; what happens to the job goes to the listener, and the throughput per epoch
  is left to the listener's status line.

Lines that say what happened to the job (it runs, restores, restarts, ends, wrote a savepoint)
are printed above the bar, or as plain lines, whatever the interval but a negative one; so is
each completed checkpoint (at most one line per interval). The final line's rate counts the
records this run committed in this run's time, not those a restored checkpoint had read.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowpoint.connectors.sinks import PrintSink
from flowpoint.driver.progress_bar import ERASE_LINE, BarTicker, bar_line, terminal_width

if TYPE_CHECKING:
    from flowpoint.graph.jobgraph import JobGraph

HISTORY = 1000  # commits kept in ``history``


class Progress:
    def __init__(self, config: Any, stream: Any = None):
        self.config = config
        self.history: list[tuple[int, int, float]] = []  # (epoch, records read, seconds), the last 1,000
        self.run_records = 0  # records this run committed (after a failover, those read again too)
        self.run_epochs = 0  # epochs (continuous runtime: segments) this run committed
        self._stream = stream  # None: sys.stderr at the time of writing
        self._lock = threading.RLock()
        self._last = self._last_checkpoint = 0.0
        self._started = self._epoch_started = time.monotonic()
        self._total: int | None = None  # records the job's sources produce in all, if known
        self._read = 0  # records read in all so far (with those before a restore)
        self._restored = 0  # records read before the restore this run started from
        self._epoch = 0  # the last committed epoch
        self._ticker: BarTicker | None = None
        self._bar_shown = False
        self.unit = "epoch"  # what a commit is called: an epoch, or a segment (up to a barrier) on the continuous runtime
        # a notebook's status display: gets the lines that say what happens to the job, instead of stderr
        self.listener: Callable[[str], None] | None = None

    def _interval(self) -> int:
        return int(self.config.get("execution.progress.interval"))

    @property
    def stream(self) -> Any:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def bar(self) -> bool:
        """Whether the job's progress shows as a bar."""
        return self._ticker is not None

    def start(self, total: int | None, read: int, terminal: bool) -> None:
        """The job starts reading: its sources produce ``total`` records in all (None: not
        known), ``read`` of them were read before (the restored checkpoint or savepoint);
        ``terminal``: standard error is a terminal a bar may be drawn on."""
        self._total, self._read, self._restored = total, read, read
        self._started = self._epoch_started = time.monotonic()
        if self._interval() >= 0 and terminal and total and self.listener is None:
            self._ticker = BarTicker(self._redraw)
            self._redraw()
            self._ticker.start()

    def say(self, line: str) -> None:
        if self._interval() < 0:
            return
        listener = self.listener
        if listener is not None:
            listener(line)
            return
        with self._lock:
            out = self.stream
            if self._bar_shown:
                out.write(ERASE_LINE)
                self._bar_shown = False
            print(f"[flowpoint] {line}", file=out, flush=True)
            if self._ticker is not None:
                self._redraw()

    def committed(self, epoch: int, records: int, seconds: float, total: int) -> None:
        """Epoch ``epoch`` committed ``records`` in ``seconds``; the job has read ``total``."""
        self.history.append((epoch, records, seconds))
        del self.history[:-HISTORY]
        self.run_records += records
        self.run_epochs += 1
        self._read, self._epoch, self._epoch_started = total, epoch, time.monotonic()
        interval = self._interval()
        if interval < 0 or self.listener is not None:  # a notebook's status line shows the rate
            return
        if self._ticker is not None:
            self._redraw()
            return
        now = time.monotonic()
        if interval and (now - self._last) * 1000 < interval:
            return
        self._last = now
        rate = records / seconds if seconds > 0 else 0.0
        self.say(f"{self.unit} {epoch}: {records:,} records in {seconds:.2f} s ({rate:,.0f} records/s); total {total:,}")

    def checkpoint_completed(self, stats: Any) -> None:
        """Checkpoint ``stats`` (driver/checkpointing.CheckpointStats) completed: one line."""
        interval = self._interval()
        now = time.monotonic()
        if interval < 0 or (interval and (now - self._last_checkpoint) * 1000 < interval):
            return
        self._last_checkpoint = now
        size = human_bytes(stats.state_size)
        if 0 <= stats.incremental_size < stats.state_size:
            size += f" ({human_bytes(stats.incremental_size)} new)"
        self.say(f"checkpoint {stats.checkpoint_id} completed ({self.unit} {stats.epoch}): {size} in {stats.end_to_end_ms:,.0f} ms")

    def ended(self, job_name: str, job_id: str, status: str, seconds: float, records_read: int) -> None:
        """The final line: this run's epochs and records in this run's ``seconds``; with a
        restore, also the ``records_read`` in all."""
        if self._ticker is not None:
            self._ticker.stop()
            self._ticker = None
        rate = self.run_records / seconds if seconds > 0 else 0.0
        line = (
            f"job {job_name!r} ({job_id}) {status}: {self.run_epochs} {self.unit}{'' if self.run_epochs == 1 else 's'}, "
            f"{self.run_records:,} records in {seconds:.1f} s ({rate:,.0f} records/s)"
        )
        if self._restored:
            line += f"; {records_read:,} in all with the {self._restored:,} read before the restore"
        self.say(line)

    def _redraw(self) -> None:
        with self._lock:
            if self._ticker is None or self._total is None:
                return
            run_s = time.monotonic() - self._started
            rate = self.run_records / run_s if self.run_records and run_s > 0 else None
            running = time.monotonic() - self._epoch_started
            unicode = "utf" in str(getattr(self.stream, "encoding", "") or "").lower()
            line = bar_line(self._read, self._total, rate, running, self._epoch + 1, terminal_width(self.stream), unicode, self.unit)
            try:
                self.stream.write(ERASE_LINE + line)
                self.stream.flush()
            except (OSError, ValueError):  # the terminal went away: no bar
                return
            self._bar_shown = True


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KB", "MB", "GB"):
        if size < 1000 or unit == "GB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000
    return f"{n} B"  # pragma: no cover


def total_records(graph: JobGraph) -> int | None:
    """The records the job's sources produce in all: None unless every source is bounded and
    knows its total."""
    total = 0
    for node in graph.sources():
        source = node.t.source
        n = source.total_records() if source.is_bounded() else None
        if n is None:
            return None
        total += n
    return total


def on_terminal(graph: JobGraph, stream: Any = None) -> bool:
    """Standard error (``stream``) is a terminal a bar may be drawn on: not ``TERM=dumb``, and
    no ``print()`` sink of the job writes to a terminal (its lines would cut through the bar)."""
    stream = stream if stream is not None else sys.stderr
    try:
        if not stream.isatty() or os.environ.get("TERM") == "dumb":
            return False
    except (AttributeError, ValueError):
        return False
    prints = any(isinstance(n.t.sink, PrintSink) and n.t.sink._driver_stream is None for n in graph.sinks())
    return not (prints and sys.stdout.isatty())
