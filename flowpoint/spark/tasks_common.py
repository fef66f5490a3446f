"""What both adapters' epoch tasks and drivers share, without importing pyspark's RDD API
(a Spark Connect client may not have it)."""

from __future__ import annotations

import os

from flowpoint.spark.failures import task_error


def executor_id() -> str:
    """The executor this task runs on: its Python worker daemon (one per executor), and the
    worker process itself (whose memory holds HashMap state)."""
    return f"{os.environ.get('SPARK_EXECUTOR_ID') or os.getppid()}/{os.getpid()}"


def spark_failure(e: Exception, epoch: int) -> Exception:
    """The error a failed Spark job raises on the driver: the task's flowpoint error, with its
    class and message, read out of Spark's text (``flowpoint.spark.failures.task_error``);
    else a JobExecutionError (or SerializationError) naming the Python or Spark cause."""
    return task_error(str(e), epoch)
