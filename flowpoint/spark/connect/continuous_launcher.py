"""A continuous run on Spark Connect: one ``mapInArrow(..., barrier=True)`` query over a range of
one row per slot (``spark.range(0, slots, 1, slots)``: partition ``i`` holds slot ``i``).

Spark runs the tasks of a barrier ``mapInArrow`` stage all at once, as the classic adapter's
``rdd.barrier()`` job, and gives each its ``BarrierTaskContext`` (its attempt, ``getTaskInfos``
for the host its data channel listens on); the slots then run exactly as on a classic session
(:func:`~flowpoint.spark.continuous_launcher.run_barrier_slot`). The run's description travels
in the function's closure (Spark Connect has no broadcast variables); the query carries the
job's tag and the run's, so cancelling either interrupts it (``interruptTag``).

The slots connect to this process (the Spark Connect client), which is not Spark's driver: the
adapter first checks, with a Spark task, that a task reaches it (``connect/reach.py``).
"""

from __future__ import annotations

from typing import Any

from flowpoint.spark.continuous_launcher import BarrierRun, run_barrier_slot


def _slot_task(payload: bytes):
    def task(iterator: Any) -> Any:
        import pyarrow as pa
        from pyspark import BarrierTaskContext

        for _ in iterator:  # (the slot's one row of the range)
            pass
        index = run_barrier_slot(BarrierTaskContext.get(), payload)
        yield pa.RecordBatch.from_arrays([pa.array([index], pa.int64())], names=["slot"])

    return task


class ConnectContinuousLauncher(BarrierRun):
    def __init__(self, spark: Any, job_id: str, description: str, job_tag: str):
        super().__init__(job_id, description)
        self.spark = spark
        self.job_tag = job_tag

    def _submit(self, slots: int, payload: bytes) -> None:
        spark = self.spark
        tags = (self.job_tag, f"{self.job_tag}-{self.group}")
        for tag in tags:  # (tags are this thread's: the run's queries only)
            spark.addTag(tag)
        try:
            spark.range(0, slots, 1, slots).mapInArrow(_slot_task(payload), "slot bigint", barrier=True).collect()
        finally:
            for tag in tags:
                spark.removeTag(tag)

    def cancel(self) -> None:
        try:
            self.spark.interruptTag(f"{self.job_tag}-{self.group}")
        except Exception:  # noqa: BLE001 - the session may be stopping
            pass
