"""Runs one run of a continuous job as one Spark job in barrier execution mode (docs/architecture.md, section 4b).

The job has one partition per slot; Spark schedules all of them at once or not at all, and a
failure of any task fails the stage: the driver then cancels the job and restarts the run from
the last completed checkpoint. A task attempt that Spark retries on its own (a stage retry)
refuses to run, so records never flow through a half-restarted run.
"""

from __future__ import annotations

import threading
from typing import Any

import cloudpickle

from flowpoint.errors import JobExecutionError

_RETRY_REFUSED = "flowpoint: a continuous run does not use Spark's task retries; the driver restarts the run"


def _slot_task(payload_bc: Any):
    def task(iterator: Any):
        from pyspark import BarrierTaskContext

        from flowpoint.tasks.slot import run_slot

        tc = BarrierTaskContext.get()
        if tc.attemptNumber() > 0:  # (a retried stage finds the run's control channel closed)
            raise JobExecutionError(_RETRY_REFUSED)
        index = tc.partitionId()
        spec, plans, slices = cloudpickle.loads(payload_bc.value)
        infos = tc.getTaskInfos()
        host = infos[index].address.rsplit(":", 1)[0] if infos and infos[index].address else "127.0.0.1"
        run_slot(index, host, spec, plans, slices)
        yield index

    return task


class SparkContinuousExecutor:
    def __init__(self, spark: Any, job_id: str, description: str):
        self.sc = spark.sparkContext
        self.job_id = job_id
        self.description = description
        self._thread: threading.Thread | None = None
        self._bc: Any = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.group = ""

    def start(self, run: int, spec: Any, plans: dict, slices: dict) -> None:
        self.done.clear()
        self.error = None
        self.close()  # the previous run's broadcast
        self._bc = self.sc.broadcast(cloudpickle.dumps((spec, plans, slices)))
        self.group = f"{self.job_id}-run-{run}"
        self._thread = threading.Thread(target=self._run, args=(spec.slots,), name=f"flowpoint-continuous-{run}", daemon=True)
        self._thread.start()

    def _run(self, slots: int) -> None:
        sc = self.sc
        try:
            sc.setJobGroup(self.group, self.description, interruptOnCancel=True)
            sc.setLocalProperty("spark.job.description", self.description)
            rdd = sc.parallelize(range(slots), slots).barrier().mapPartitions(_slot_task(self._bc))
            rdd.collect()
        except BaseException as e:  # noqa: BLE001 - the loop reads it
            self.error = e
        finally:
            self.done.set()

    def cancel(self) -> None:
        try:
            self.sc.cancelJobGroup(self.group)
        except Exception:  # noqa: BLE001 - Spark may be stopping
            pass

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def close(self) -> None:
        if self._bc is not None:
            try:
                self._bc.destroy()
            except Exception:  # noqa: BLE001
                pass
            self._bc = None


def slots_available(spark: Any) -> int:
    """How many tasks Spark can run at once now: the number its scheduler checks a barrier
    stage against (``SparkContext.maxNumConcurrentTasks``: the cores of ``local[N]``, or of the
    executors registered now). Not ``defaultParallelism``, which is at least 2 on a cluster
    whatever its cores, so a cluster left with one slot would pass for two."""
    sc = spark.sparkContext
    try:
        return max_concurrent_tasks(sc)
    except Exception:  # noqa: BLE001 - a Spark without it: its default parallelism
        return int(sc.defaultParallelism)


def max_concurrent_tasks(sc: Any) -> int:
    """``SparkContext.maxNumConcurrentTasks`` of the default resource profile (Spark 3.1 on; no
    Python API for it)."""
    jsc = sc._jsc.sc()  # noqa: SLF001
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
