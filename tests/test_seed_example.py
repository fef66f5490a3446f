"""The README's main example, seed 000's EventTimeTumblingWindowAnalytics, run as a user runs it:
``python examples/event_time_tumbling_window_analytics.py ...`` in a subprocess. Its output
lines ``start\\tend\\tchannel\\tbehavior\\tcount`` are checked one by one against counts that
pandas computes from the same generated events.

With a source lateness under the 50 s watermark bound no event can be late, so the output must
be exactly pandas' counts. With the seed's 2 minutes of source lateness some events are late;
which ones depends on how the watermark moves, but the example writes them to ``<output>/late``
(``timestamp\tchannel\tbehavior``), so each window's count plus its late events must again be
exactly pandas' count.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import pytest

from flowpoint import ClickEventGenerator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "event_time_tumbling_window_analytics.py")
EVENTS = 200_000  # 5 ms apart: 1,000 s of event time, about 17 windows per (channel, behavior)
WINDOW_MS = 60_000
# in the compatibility subset on another PySpark (tests/test_pyspark_versions.py): 200 s of event
# time, 3-4 windows per (channel, behavior), all of them checked the same way
COMPAT_EVENTS = 40_000

pytestmark = pytest.mark.skipif(not os.path.exists(EXAMPLE), reason="the example is not written yet")


def run_example(out_dir, lateness_ms: int, events: int = EVENTS, master: str = "local[2]", runtime: str = "in epochs"):
    """Run the example on ``master`` (``local[2]``: its parallelism 4 gets no slot each, so
    epochs; ``local[4,4]``: continuous) and check it ran on ``runtime``; returns its window lines
    as tuples and its late lines as ``(window start, channel, behavior)``."""
    cmd = [
        sys.executable, EXAMPLE,
        "--events", str(events),
        "--source-lateness-millis", str(lateness_ms),
        "--window-lagged-millis", "50000",
        "--window-size-millis", str(WINDOW_MS),
        "--output", str(out_dir),
    ]
    env = dict(os.environ, FLOWPOINT_SPARK_MASTER=master)
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, f"example failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert f"running {runtime} on Spark" in proc.stderr + proc.stdout, proc.stderr[-3000:]
    remote = os.environ.get("SPARK_REMOTE")  # the subset on a Spark Connect server (tests/test_connect_compat.py)
    if remote:
        assert f"on Spark Connect server {remote}" in proc.stderr, proc.stderr[-3000:]
    rows, late = [], []
    for line in read_lines(out_dir, skip="late"):
        fields = line.split("\t")
        assert len(fields) == 5, f"not start, end, channel, behavior, count: {line!r}"
        start, end, channel, behavior, n = fields
        rows.append((int(start), int(end), channel, behavior, int(n)))
    for line in read_lines(os.path.join(out_dir, "late")):
        ts, channel, behavior = line.split("\t")
        late.append((int(ts) // WINDOW_MS * WINDOW_MS, channel, behavior))
    assert rows, f"no output under {out_dir}; stderr:\n{proc.stderr[-2000:]}"
    return rows, late


def read_lines(directory, skip: str | None = None) -> list[str]:
    """Lines of the finished part files below ``directory`` (not hidden or in-progress ones)."""
    out = []
    for root, dirs, files in os.walk(directory):
        dirs[:] = [d for d in dirs if d != skip]
        for name in sorted(files):
            if name.startswith((".", "_")) or name.endswith((".inprogress", ".tmp")):
                continue
            with open(os.path.join(root, name)) as f:
                out += [line.rstrip("\n") for line in f if line.strip()]
    return out


def pandas_counts(lateness_ms: int, events: int = EVENTS) -> dict[tuple[int, int, str, str], int]:
    """The same events, counted per one-minute window and (channel, behavior) by pandas."""
    df = ClickEventGenerator(max_lateness_ms=lateness_ms).batch(0, events).to_pandas()
    df["start"] = df["ts"] // WINDOW_MS * WINDOW_MS
    df["end"] = df["start"] + WINDOW_MS
    counts = df.groupby(["start", "end", "channel", "behavior"]).size()
    return {tuple(k): int(n) for k, n in counts.items()}


def check_shape(rows):
    seen = set()
    for start, end, channel, behavior, n in rows:
        assert start % WINDOW_MS == 0 and end == start + WINDOW_MS, (start, end)
        assert channel in "abcd" and behavior in ("INSTALL", "OPEN", "BROWSE", "CLICK", "PURCHASE", "CLOSE", "UNINSTALL")
        assert n > 0
        assert (start, channel, behavior) not in seen, f"window {start} {channel} {behavior} fired twice"
        seen.add((start, channel, behavior))


@pytest.mark.slow
@pytest.mark.compat
def test_example_counts_equal_pandas(tmp_path):
    """30 s of source lateness, bound 50 s: no event is late, every line equals pandas' count."""
    if os.environ.get("FLOWPOINT_EXPECT_PYSPARK"):  # the compat subset: as a user runs it, continuous
        events, master, runtime = COMPAT_EVENTS, "local[4,4]", "continuously"
    else:
        events, master, runtime = EVENTS, "local[2]", "in epochs"
    rows, late = run_example(tmp_path / "out", 30_000, events, master, runtime)
    check_shape(rows)
    got = {(s, e, c, b): n for s, e, c, b, n in rows}
    want = pandas_counts(30_000, events)
    wrong = sorted((k, got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert not wrong, f"{len(wrong)} of {len(want)} windows differ (window, example, pandas): {wrong[:10]}"
    assert sum(got.values()) == events and not late


@pytest.mark.slow
def test_example_with_the_seeds_lateness(tmp_path):
    """The seed's 2 minutes of source lateness: some events are late. Every window fires once,
    and its count plus its late events is pandas' count."""
    rows, late = run_example(tmp_path / "out", 120_000)
    check_shape(rows)
    want = pandas_counts(120_000)
    late_per_window = Counter(late)
    got = Counter({(s, c, b): n for s, _, c, b, n in rows}) + late_per_window
    want = Counter({(s, c, b): n for (s, _, c, b), n in want.items()})
    wrong = sorted((k, got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert not wrong, f"{len(wrong)} windows: counted + late != pandas (window, example, pandas): {wrong[:10]}"
    assert 0 < len(late) < EVENTS // 2
