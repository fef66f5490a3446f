"""The progress bar a bounded job shows on a terminal (driver side).

One line, redrawn in place (a carriage return, then the line, then "erase to the end of the
line"): the share of the job's known total of records read, how many, the rate of this run
and the time left at that rate, e.g.::

    [flowpoint] 45% |█████████░░░░░░░░░░░| 90,000/200,000 records  16,777 records/s  ETA 7 s

Before the first commit it says how long the first epoch has been running instead. A thread
redraws it twice a second, so it moves during a long epoch too. The line fits the terminal's
width; without a UTF-8 terminal the bar is drawn with ``#`` and ``-``.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from typing import Any

REDRAW_S = 0.5
ERASE_LINE = "\r\x1b[K"


def duration(seconds: float) -> str:
    """``7 s``, ``3 min 05 s``, ``2 h 01 min``."""
    s = int(max(0, seconds) + 0.5)
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


def bar_line(read: int, total: int, rate: float | None, running_s: float, epoch: int, width: int, unicode: bool = True, unit: str = "epoch") -> str:
    """The progress line for ``read`` of ``total`` records at ``rate`` records/s (None: not
    known yet, the job has run ``running_s`` seconds of its epoch ``epoch``), ``width`` columns."""
    share = min(1.0, read / total) if total > 0 else 1.0
    if rate is None:
        tail = f"{read:,}/{total:,} records  {unit} {epoch} running for {duration(running_s)}"
    else:
        eta = f"ETA {duration((total - read) / rate)}" if rate > 0 and read < total else ""
        tail = f"{read:,}/{total:,} records  {rate:,.0f} records/s  {eta}".rstrip()
    head = f"[flowpoint] {share * 100:3.0f}% "
    room = width - 1 - len(head) - len(tail) - 3  # (the last column stays free: no wrap)
    cells = max(0, min(30, room))
    if cells < 5:  # a narrow terminal: the numbers only
        return (head + tail)[: max(0, width - 1)]
    full, empty = ("█", "░") if unicode else ("#", "-")
    done = int(share * cells)
    return f"{head}|{full * done}{empty * (cells - done)}| {tail}"[: max(0, width - 1)]


class BarTicker:
    """Redraws the bar every :data:`REDRAW_S` seconds until stopped: ``draw()`` writes it."""

    def __init__(self, draw: Callable[[], None]):
        self._draw = draw
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="flowpoint-progress-bar", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(REDRAW_S):
            self._draw()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)


def terminal_width(stream: Any, default: int = 100) -> int:
    """The columns of the terminal ``stream`` writes to ($COLUMNS first), else ``default``."""
    try:
        columns = int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size(stream.fileno()).columns
    except (AttributeError, OSError, ValueError):
        columns = 0
    return columns if columns > 0 else default
