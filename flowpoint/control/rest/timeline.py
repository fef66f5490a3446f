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


def epochs(client: Any) -> dict:
    if client.get_runtime() != "epoch":
        return {"epochs": []}
    ui = client.get_spark_ui_url()
    spark_jobs = dict(client.get_spark_jobs())  # the latest run of an epoch number wins
    out = []
    for epoch, records, seconds in client.get_epoch_stats():
        jobs = [{"id": i, "url": spark_job_url(ui, i)} for i in spark_jobs.get(epoch, ())]
        out.append({"epoch": epoch, "records": records, "duration": round(seconds * 1000), "spark-jobs": jobs})
    return {"epochs": out}
