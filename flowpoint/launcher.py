"""Starting a job: the one launcher. The API hands it a :class:`JobDescription`; it starts Spark
(the caller's session, or one made for the job), the driver's coordinator, the job's control
endpoint (the CLI and the dashboard reach the job through it) and its Prometheus endpoint, and
a notebook's status display, then runs the coordinator in a thread of its own."""

from __future__ import annotations

import logging
import threading
from typing import Any

from flowpoint.control import notebook
from flowpoint.control.endpoint import attach_job
from flowpoint.driver.coordinator import Coordinator
from flowpoint.driver.description import JobDescription
from flowpoint.driver.job import JobClient
from flowpoint.metrics import exporter
from flowpoint.spark.adapter_choice import adapter_for
from flowpoint.spark.session import get_spark_session

log = logging.getLogger("flowpoint")


def submit(description: JobDescription, spark_session: Any = None) -> JobClient:
    """Start the job ``description`` on Spark (``spark_session``: the user's, else one is made)."""
    graph, config = description.graph, description.config
    # metrics.reporter.prom.port: the Prometheus endpoint (a taken port fails the submission here)
    prometheus = exporter.open_endpoint(config, graph.job_name)
    try:
        # Spark starts in the caller's thread: a failure to start raises here, and the session is
        # the caller's active one (``SparkSession.getActiveSession()`` finds it after the job).
        slots = max((s.parallelism for s in graph.stages), default=1)
        spark = get_spark_session(config.get("spark.master"), graph.job_name, spark_session, config, slots=slots)
        adapter_for(spark).ship_python_dependencies(config)
        coordinator = Coordinator(description, spark)
        thread = threading.Thread(target=coordinator.run, name=f"flowpoint-{coordinator.job_id[:8]}", daemon=True)
        coordinator.thread = thread
        client = JobClient(coordinator)
        client.html_status = notebook.html_status
        # in a Jupyter notebook: one display with the dashboard link and a live status line
        # instead of lines on stderr (control/notebook.py)
        in_notebook = notebook.wanted(coordinator.config)
        # the CLI reaches the job through its process's loopback endpoint, found in the job registry
        attach_job(client, coordinator.config, print_urls=not in_notebook)
    except BaseException:
        if prometheus is not None:
            exporter.release(prometheus)
        raise
    if prometheus is not None:
        exporter.serve_job(prometheus, client, coordinator.job_name)
    if in_notebook:
        display = notebook.StatusDisplay(client, coordinator.config)
        try:
            display.show()
        except Exception as e:  # noqa: BLE001 - no display: the job shows lines on stderr as elsewhere
            log.warning("cannot show job %s's status in the notebook (%s: %s); it prints its progress lines instead",
                        coordinator.job_id, type(e).__name__, e)
        else:
            coordinator._progress.listener = display.event
            client.status_display = display
    thread.start()
    return client
