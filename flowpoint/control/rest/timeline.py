"""flowpoint's own routes (Flink has no such resources): ``/jobs/:jid/throughput``, the records
per second read by the sources and written by the sinks over the last minutes (the throughput
chart), and ``/jobs/:jid/epochs``, the job's recent epochs with the Spark jobs that ran them and
their pages in Spark's UI (none on the continuous runtime, which runs no epochs)."""

from __future__ import annotations

from typing import Any

from flowpoint.spark.ui import spark_job_url


def throughput(client: Any) -> dict:
    samples = client.metric_store().throughput()
    return {"samples": [{"time": int(t), "in": round(i, 3), "out": round(o, 3)} for t, i, o in samples]}


def epochs(client: Any, ui: str | None) -> dict:
    """``ui``: the address of Spark's UI (None: off)."""
    if client.get_runtime() != "epoch":
        return {"epochs": []}
    runs = client.get_spark_jobs()  # every run of an epoch, failed ones too, in order
    at = 0
    out = []
    for epoch, records, seconds in client.get_epoch_stats():  # the committed ones, in order
        # the first run of this epoch number after the last one matched: a run that failed
        # (before a restart) is passed over, and a restart's epoch gets its own run
        match = next((i for i in range(at, len(runs)) if runs[i][0] == epoch), None)
        ids: tuple[int, ...] = ()
        if match is not None:
            ids, at = runs[match][1], match + 1
        jobs = [{"id": i, "url": spark_job_url(ui, i)} for i in ids]
        out.append({"epoch": epoch, "records": records, "duration": round(seconds * 1000), "spark-jobs": jobs})
    return {"epochs": out}
