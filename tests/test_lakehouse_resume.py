"""A job writing a Delta table and an Iceberg table, killed with kill -9 and resumed with
``flowpoint run --resume``, on both runtimes (issue 30): each table, read with ``deltalake`` or
``pyiceberg`` and with Spark (the Parquet files of its current version), holds every result
exactly once, and no batch of a sink identity is in two commits."""

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
pytest.importorskip("pyiceberg")

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "lakehouse_jobs.py")
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
    runs = {r: (str(tmp_path / r / "ck"), str(tmp_path / r / "table"), str(tmp_path / r / "lake")) for r in RUNTIMES}
    first = {r: subprocess.Popen([sys.executable, SCRIPT, *paths, r, str(EVENTS), "800"], cwd=HERE,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
             for r, paths in runs.items()}
    try:
        deadline = time.monotonic() + 300
        waiting = set(RUNTIMES)
        while waiting:
            for r in list(waiting):
                ck, table, _ = runs[r]
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
    resumed = {r: subprocess.Popen([sys.executable, "-m", "flowpoint.cli", "run", "--resume", SCRIPT, *paths, r,
                                    str(EVENTS), "0"], cwd=HERE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for r, paths in runs.items()}
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
        _check_iceberg(runs[r][2], r, expected, spark)


def _check_iceberg(warehouse: str, runtime: str, expected: Counter, spark) -> None:
    from lakehouse_jobs import ICEBERG_TABLE

    from flowpoint.connectors.iceberg import embedded_catalog

    table = embedded_catalog(warehouse).load_table(ICEBERG_TABLE)
    got = Counter((row["key"], row["n"]) for row in table.scan().to_arrow().to_pylist())
    assert got == expected, f"{runtime}: duplicates {sum((got - expected).values())}, missing {sum((expected - got).values())}"
    files = [task.file.file_path for task in table.scan().plan_files()]
    assert Counter((row["key"], row["n"]) for row in spark.read.parquet(*files).select("key", "n").collect()) == expected
    summaries = [s.summary.additional_properties for s in table.snapshots()]
    batches = [(c["flowpoint.sink-id"], n) for c in summaries for n in c["flowpoint.batches"].split(",")]
    assert len(batches) == len(set(batches)), f"{runtime}: an Iceberg batch committed twice: {sorted(batches)}"
    assert any("flowpoint.restored-from" in c for c in summaries), f"{runtime}: the resumed run committed no Iceberg batch"
