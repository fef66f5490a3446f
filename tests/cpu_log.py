"""Where the suite's time goes: with ``FLOWPOINT_TEST_CPU_LOG=<file>``, each test appends a
line ``nodeid, start (epoch s), wall s, machine busy core-s`` (from /proc/stat, so the whole
machine's: background runs and other processes included) to the file. Sum a run's lines by
module to find the tests that leave the cores idle (busy / (2 * wall) on 2 cores) and those
that keep them busy (tests/compat_background.py's WHILE_RUNS came from one such run)."""

from __future__ import annotations

import os
import time

import pytest


def _busy() -> float:
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    return (sum(v) - v[3] - v[4]) / os.sysconf("SC_CLK_TCK")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    path = os.environ.get("FLOWPOINT_TEST_CPU_LOG")
    if not path or not os.path.exists("/proc/stat"):
        yield
        return
    t0, b0 = time.time(), _busy()
    yield
    with open(path, "a") as f:
        f.write(f"{item.nodeid}\t{t0:.1f}\t{time.time() - t0:.2f}\t{_busy() - b0:.2f}\n")
