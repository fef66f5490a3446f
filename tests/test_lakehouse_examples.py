"""Issue 30's two examples, run as a user runs them (each a subprocess of its own, both at once):
``examples/kafka_to_delta.py`` (Kafka into a Delta table exactly once: the table, read with
``deltalake``, holds exactly pandas' window counts of the generated events) and
``examples/live_state_query.py`` (Spark SQL over a running job's state: every answer is the
state of exactly the records its checkpoint had read)."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest
from test_kafka_example import pandas_counts

pytest.importorskip("confluent_kafka")
pytest.importorskip("deltalake")

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EVENTS = 20_000

pytestmark = pytest.mark.slow


def test_the_delta_example_writes_exactly_pandas_counts_and_the_query_example_reads_consistent_state(tmp_path):
    from deltalake import DeltaTable

    env = dict(os.environ, FLOWPOINT_SPARK_MASTER="local[2]")
    table = tmp_path / "table"
    delta = subprocess.Popen([sys.executable, os.path.join(REPO, "examples", "kafka_to_delta.py"), "--events", str(EVENTS),
                              "--table", str(table), "--checkpoint-interval", "500"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env)
    query = subprocess.run([sys.executable, os.path.join(REPO, "examples", "live_state_query.py"), "--queries", "2",
                            "--every", "1", "--events", "100000"],
                           capture_output=True, text=True, timeout=600, cwd=tmp_path, env=env)
    out, err = delta.communicate(timeout=600)
    assert delta.returncode == 0, err[-4000:]
    rows = DeltaTable(str(table)).to_pyarrow_table().to_pylist()
    got = {(r["window_start"], r["window_end"], r["channel"], r["behavior"]): r["clicks"] for r in rows}
    assert got == pandas_counts(EVENTS)
    assert f"{len(rows)} window counts, {EVENTS:,} events" in out, out

    assert query.returncode == 0, query.stderr[-4000:]
    answers = re.findall(r"^as of checkpoint (\d+) \(([\d,]+) records read\): (\d+) users, ([\d,]+) clicks$", query.stdout, re.M)
    assert len(answers) == 2, query.stdout[-3000:]
    for _, read, users, clicks in answers:
        assert read == clicks and int(users) <= 50 and int(read.replace(",", "")) > 0
