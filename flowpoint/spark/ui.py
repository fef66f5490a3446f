"""Spark's own web UI, for links from flowpoint's dashboard: its address, and the Spark jobs
each epoch ran (the job group of every Spark job of a flowpoint job is the flowpoint job id)."""

from __future__ import annotations

from typing import Any


def spark_ui_url(spark: Any) -> str | None:
    """The address of Spark's web UI (``sc.uiWebUrl``); None when it is off
    (``spark.ui.enabled=false``) or the session is gone."""
    try:
        url = spark.sparkContext.uiWebUrl
    except Exception:  # noqa: BLE001 - a stopped session: no UI
        return None
    return str(url) if url else None


def spark_job_url(ui_url: str | None, spark_job_id: int) -> str | None:
    """The page of one Spark job in Spark's UI."""
    return f"{ui_url.rstrip('/')}/jobs/job/?id={int(spark_job_id)}" if ui_url else None


def group_job_ids(sc: Any, group: str) -> set[int]:
    """The ids of the Spark jobs of job group ``group`` that Spark still tracks
    (``spark.ui.retainedJobs``, 1000 by default)."""
    try:
        return {int(i) for i in sc.statusTracker().getJobIdsForGroup(group)}
    except Exception:  # noqa: BLE001 - links only: none when Spark cannot say
        return set()
