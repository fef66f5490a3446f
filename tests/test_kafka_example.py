"""The README's Kafka example (seed 000 with Kafka), run as a user runs it:
``python examples/kafka_clicks.py`` in a subprocess, with no ``--bootstrap-servers`` so it starts
and stops its own embedded broker. The window counts it prints (read back from the output topic
with read_committed) must be exactly pandas' counts of the same generated events: the source
lateness (30 s) is under the watermark bound (50 s), so no event is late."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from flowpoint import ClickEventGenerator

pytest.importorskip("confluent_kafka")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "kafka_clicks.py")
EVENTS = 30_000
WINDOW_MS = 60_000

pytestmark = pytest.mark.slow


def pandas_counts(events: int) -> dict[tuple[int, int, str, str], int]:
    df = ClickEventGenerator(num_users=10_000, max_lateness_ms=30_000).batch(0, events).to_pandas()
    df["start"] = df["ts"] // WINDOW_MS * WINDOW_MS
    df["end"] = df["start"] + WINDOW_MS
    return {tuple(k): int(n) for k, n in df.groupby(["start", "end", "channel", "behavior"]).size().items()}


def test_the_kafka_example_prints_exactly_pandas_counts():
    env = dict(os.environ, FLOWPOINT_SPARK_MASTER="local[2]")
    proc = subprocess.run([sys.executable, EXAMPLE, "--events", str(EVENTS), "--epoch-max-records", "4000",
                           "--checkpoint-interval", "500"],
                          capture_output=True, text=True, timeout=600, cwd=REPO, env=env)
    assert proc.returncode == 0, f"{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    got = {}
    for line in proc.stdout.splitlines():
        fields = line.strip().split("\t")
        if len(fields) == 5:
            start, end, channel, behavior, n = fields
            key = (int(start), int(end), channel, behavior)
            assert key not in got, f"window {key} printed twice"  # each result exactly once
            got[key] = int(n)
    assert got == pandas_counts(EVENTS)
    summary = re.search(r"(\d+) window counts \(([\d,]+) events\)", proc.stdout)
    assert summary and int(summary.group(1)) == len(got) and int(summary.group(2).replace(",", "")) == EVENTS
    # the embedded broker it started is stopped again
    broker = re.search(r"embedded Kafka broker \(Tansu\) at 127\.0\.0\.1:(\d+)", proc.stdout)
    assert broker, proc.stdout[:2000]
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", int(broker.group(1)))) != 0, "the embedded broker still listens"
