"""A job writing a Delta table, killed with kill -9 and resumed with ``flowpoint run --resume``,
on both runtimes (issue 30): the table, read with ``deltalake`` and with Spark (the Parquet
files of its current version), holds every result exactly once, and no batch is in two commits."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter

import pytest
from checkpoint_jobs import expected_outputs

deltalake = pytest.importorskip("deltalake")

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "delta_jobs.py")
EVENTS = 4_000
RUNTIMES = ("epoch", "continuous")


def _completed_checkpoints(root: str) -> int:
    return sum("_metadata" in files for _, _, files in os.walk(root))


def _commits(table: str) -> int:
    try:
        return deltalake.DeltaTable(table).version()
    except Exception:  # not created yet
        return 0


@pytest.mark.slow
def test_killed_with_sigkill_then_resumed_the_table_holds_every_result_once(tmp_path, spark):
    runs = {r: (str(tmp_path / r / "ck"), str(tmp_path / r / "table")) for r in RUNTIMES}
    first = {r: subprocess.Popen([sys.executable, SCRIPT, ck, table, r, str(EVENTS), "800"], cwd=HERE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r, (ck, table) in runs.items()}
    try:
        deadline = time.monotonic() + 300
        waiting = set(RUNTIMES)
        while waiting:
            for r in list(waiting):
                ck, table = runs[r]
                if first[r].poll() is not None:
                    pytest.fail(f"the {r} run ended before it was killed: {first[r].stderr.read()[-3000:]}")
                if _completed_checkpoints(ck) >= 2 and _commits(table) >= 1:
                    first[r].send_signal(signal.SIGKILL)
                    waiting.discard(r)
            assert time.monotonic() < deadline, f"no two checkpoints and a commit in the {sorted(waiting)} run(s)"
            time.sleep(0.2)
    finally:
        for p in first.values():
            p.kill()
            p.wait(60)
            p.stderr.close()
    killed_at = {r: _commits(runs[r][1]) for r in RUNTIMES}
    resumed = {r: subprocess.Popen([sys.executable, "-m", "flowpoint.cli", "run", "--resume", SCRIPT, ck, table, r,
                                    str(EVENTS), "0"], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for r, (ck, table) in runs.items()}
    expected = Counter(expected_outputs(EVENTS))
    for r, proc in resumed.items():
        out, err = proc.communicate(timeout=600)
        assert proc.returncode == 0, err[-4000:]
        assert "restoring checkpoint" in err, err[-3000:]
        table = deltalake.DeltaTable(runs[r][1])
        assert table.version() > killed_at[r]
        got = Counter((row["key"], row["n"]) for row in table.to_pyarrow_table().to_pylist())
        assert got == expected, f"{r}: duplicates {sum((got - expected).values())}, missing {sum((expected - got).values())}"
        by_spark = Counter((row["key"], row["n"]) for row in spark.read.parquet(*table.file_uris()).collect())
        assert by_spark == expected, r
        writes = [h for h in table.history() if h.get("operation") == "WRITE"]
        batches = [(h["flowpoint.appId"], n) for h in writes for n in h["flowpoint.batches"]]
        assert len(batches) == len(set(batches)), f"{r}: a batch committed twice: {sorted(batches)}"
        assert any("flowpoint.restoredFrom" in h for h in writes), f"{r}: the resumed run committed nothing of its own"
