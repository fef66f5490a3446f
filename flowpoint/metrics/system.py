"""Figures of the process and of its state backends that a task reports beside its operators'
counts, sampled when a report is made (once a second per subtask on the continuous runtime), never
per record:

* the resident memory (RSS) of the Python process a task runs in, and of the driver's process:
  ``Status.Python.Memory.RSS`` (bytes), flowpoint's counterpart of Flink's
  ``Status.JVM.Memory.*``;
* RocksDB's own figures of each keyed operator's DB (``rocksdb.block-cache-usage``,
  ``rocksdb.cur-size-all-mem-tables``, ``rocksdb.estimate-pending-compaction-bytes``, ...), as
  Flink's ``state.backend.rocksdb.metrics.*`` name them (flowpoint/state/rocksdb.py).
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

RSS = "Status.Python.Memory.RSS"
ROCKSDB_PREFIX = "rocksdb."
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_FRESH_S = 0.5  # the subtasks of one worker share a reading this recent

_lock = threading.Lock()
_last: tuple[float, float | None] = (-1.0, None)


def _read_rss() -> float | None:
    try:
        with open("/proc/self/statm", "rb") as f:
            return float(int(f.read().split()[1]) * _PAGE)
    except (OSError, ValueError, IndexError):
        pass
    try:  # not Linux: psutil where installed
        import psutil

        return float(psutil.Process().memory_info().rss)
    except Exception:  # noqa: BLE001
        return None


def rss_bytes() -> float | None:
    """This process's resident memory in bytes (None where it cannot be read); one read of
    ``/proc/self/statm`` serves every caller for half a second."""
    global _last
    now = time.monotonic()
    with _lock:
        at, value = _last
        if now - at < _FRESH_S:
            return value
        value = _read_rss()
        _last = (now, value)
        return value


def worker_id() -> str:
    """``host:pid`` of this process: which worker a report comes from."""
    return f"{socket.gethostname()}:{os.getpid()}"


def rocksdb_gauges(backends: dict[str, Any]) -> dict[tuple[str, str], float]:
    """``(operator uid, "rocksdb.<property>")`` -> value for each keyed operator whose backend
    is a RocksDB DB (``native_metrics``); nothing for the HashMap backend."""
    out: dict[tuple[str, str], float] = {}
    try:
        items = list(backends.items())
    except RuntimeError:  # the subtask added a backend meanwhile: the next report has it
        return out
    for uid, backend in items:
        figures = getattr(backend, "native_metrics", None)
        if figures is None:
            continue
        for name, value in figures().items():
            out[(uid, name)] = value
    return out


def combine_rocksdb(name: str, total: float | None, value: float) -> float:
    """An operator's figure over its subtasks: the sum, but for the block cache, which the DBs of
    a worker process share (each reports the whole cache), the largest."""
    if total is None:
        return value
    return max(total, value) if name.startswith("rocksdb.block-cache") else total + value


def add_process_figures(report: Any, backends: dict[str, Any] | None) -> Any:
    """Stamp ``report`` (a MetricReport) with this worker's id and memory and the RocksDB figures
    of ``backends`` (a TaskState's keyed backends, by operator uid)."""
    report.worker = worker_id()
    rss = rss_bytes()
    if rss is not None:
        report.status[RSS] = rss
    if backends:
        report.gauges.update(rocksdb_gauges(backends))
    return report
