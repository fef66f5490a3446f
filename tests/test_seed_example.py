"""The README's main example, seed 000's EventTimeTumblingWindowAnalytics, run as a user runs it:
``python examples/event_time_tumbling_window_analytics.py ...`` in a subprocess. Its output
lines ``start\\tend\\tchannel\\tbehavior\\tcount`` are checked one by one against counts that
pandas computes from the same generated events.

With a source lateness under the 50 s watermark bound no event can be late, so the output must
be exactly pandas' counts. With the seed's 2 minutes of source lateness some events are late
and dropped, which depends on how the watermark moves; there we check what holds whatever the
epochs: aligned one-minute windows, each fired once, never more than pandas counts.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from flowpoint import ClickEventGenerator

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "event_time_tumbling_window_analytics.py")
EVENTS = 200_000  # 5 ms apart: 1,000 s of event time, about 17 windows per (channel, behavior)
WINDOW_MS = 60_000

pytestmark = pytest.mark.skipif(not os.path.exists(EXAMPLE), reason="the example is not written yet")


def run_example(out_dir, lateness_ms: int, events: int = EVENTS) -> list[tuple[int, int, str, str, int]]:
    cmd = [
        sys.executable, EXAMPLE,
        "--events", str(events),
        "--source-lateness-millis", str(lateness_ms),
        "--window-lagged-millis", "50000",
        "--window-size-millis", str(WINDOW_MS),
        "--output", str(out_dir),
    ]
    env = dict(os.environ, FLOWPOINT_SPARK_MASTER="local[2]")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, f"example failed ({proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    rows = []
    for root, _, files in os.walk(out_dir):
        for name in sorted(files):
            if name.startswith((".", "_")):
                continue
            with open(os.path.join(root, name)) as f:
                for line in f:
                    line = line.rstrip("\n")
                    if not line:
                        continue
                    fields = line.split("\t")
                    assert len(fields) == 5, f"{name}: not start, end, channel, behavior, count: {line!r}"
                    start, end, channel, behavior, n = fields
                    rows.append((int(start), int(end), channel, behavior, int(n)))
    assert rows, f"no output under {out_dir}; stderr:\n{proc.stderr[-2000:]}"
    return rows


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


def test_example_counts_equal_pandas(tmp_path):
    """30 s of source lateness, bound 50 s: no event is late, every line equals pandas' count."""
    rows = run_example(tmp_path / "out", 30_000)
    check_shape(rows)
    got = {(s, e, c, b): n for s, e, c, b, n in rows}
    want = pandas_counts(30_000)
    wrong = sorted((k, got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k))
    assert not wrong, f"{len(wrong)} of {len(want)} windows differ (window, example, pandas): {wrong[:10]}"
    assert sum(got.values()) == EVENTS


@pytest.mark.slow
def test_example_with_the_seeds_lateness(tmp_path):
    """The seed's 2 minutes of source lateness: some events are late and dropped. Every window
    fires once, with at most pandas' count, and most events are counted."""
    rows = run_example(tmp_path / "out", 120_000)
    check_shape(rows)
    want = pandas_counts(120_000)
    for s, e, c, b, n in rows:
        assert n <= want[(s, e, c, b)], (s, c, b, n, want[(s, e, c, b)])
    counted = sum(n for *_, n in rows)
    assert EVENTS // 2 < counted < EVENTS
