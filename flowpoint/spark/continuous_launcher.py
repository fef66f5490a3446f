"""Runs one run of a continuous job as one Spark job in barrier execution mode (docs/architecture.md, section 4b).

The job has one partition per slot; Spark schedules all of them at once or not at all, and a
failure of any task fails the stage: the driver then cancels the job and restarts the run from
the last completed checkpoint. A task attempt that Spark retries on its own (a stage retry)
refuses to run, so records never flow through a half-restarted run.

:class:`BarrierRun` is what both adapters share (a thread per run, its outcome, waiting);
:class:`SparkContinuousLauncher` submits the run as a barrier RDD job of a classic session
(the run's description in a broadcast variable); the Spark Connect adapter's
(``connect/continuous_launcher.py``) as a ``mapInArrow(..., barrier=True)`` query.
"""

from __future__ import annotations

import threading
from typing import Any

import cloudpickle

from flowpoint.errors import JobExecutionError
from flowpoint.tasks.slot import run_slot

_RETRY_REFUSED = "flowpoint: a continuous run does not use Spark's task retries; the driver restarts the run"


def run_barrier_slot(tc: Any, payload: bytes) -> int:
    """The body of every slot's Spark task, ``tc`` its BarrierTaskContext and ``payload`` the
    pickled ``(spec, plans, slices)`` of the run: runs slot ``partitionId`` until the run ends;
    its index."""
    if tc.attemptNumber() > 0:  # (a retried stage finds the run's control channel closed)
        raise JobExecutionError(_RETRY_REFUSED)
    index = tc.partitionId()
    spec, plans, slices = cloudpickle.loads(payload)
    infos = tc.getTaskInfos()
    host = infos[index].address.rsplit(":", 1)[0] if infos and infos[index].address else "127.0.0.1"
    run_slot(index, host, spec, plans, slices)  # (the slots learn each other's addresses from the driver)
    return index


class BarrierRun:
    """One run at a time, submitted by :meth:`_submit` in a thread of its own: ``done`` is set
    when the Spark job ends, ``error`` is what it raised."""

    def __init__(self, job_id: str, description: str):
        self.job_id = job_id
        self.description = description
        self._thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.group = ""

    def start(self, run: int, spec: Any, plans: dict, slices: dict) -> None:
        self.done.clear()
        self.error = None
        self.close()  # the previous run's resources
        self.group = f"{self.job_id}-run-{run}"
        payload = cloudpickle.dumps((spec, plans, slices))
        self._thread = threading.Thread(target=self._run, args=(spec.slots, payload), name=f"flowpoint-continuous-{run}", daemon=True)
        self._thread.start()

    def _run(self, slots: int, payload: bytes) -> None:
        try:
            self._submit(slots, payload)
        except BaseException as e:  # noqa: BLE001 - the loop reads it
            self.error = e
        finally:
            self.done.set()

    def _submit(self, slots: int, payload: bytes) -> None:
        """Run the barrier job of ``slots`` tasks to its end (in the run's thread)."""
        raise NotImplementedError

    def cancel(self) -> None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> bool:
        return self.done.wait(timeout)

    def close(self) -> None:
        """Release what the last run held."""


def _slot_task(payload_bc: Any):
    def task(iterator: Any):
        from pyspark import BarrierTaskContext

        yield run_barrier_slot(BarrierTaskContext.get(), payload_bc.value)

    return task


class SparkContinuousLauncher(BarrierRun):
    def __init__(self, spark: Any, job_id: str, description: str):
        super().__init__(job_id, description)
        self.sc = spark.sparkContext
        self._bc: Any = None

    def _submit(self, slots: int, payload: bytes) -> None:
        sc = self.sc
        self._bc = sc.broadcast(payload)
        sc.setJobGroup(self.group, self.description, interruptOnCancel=True)
        sc.setLocalProperty("spark.job.description", self.description)
        sc.parallelize(range(slots), slots).barrier().mapPartitions(_slot_task(self._bc)).collect()

    def cancel(self) -> None:
        try:
            self.sc.cancelJobGroup(self.group)
        except Exception:  # noqa: BLE001 - Spark may be stopping
            pass

    def close(self) -> None:
        if self._bc is not None:
            try:
                self._bc.destroy()
            except Exception:  # noqa: BLE001
                pass
            self._bc = None


def max_concurrent_tasks(sc: Any) -> int:
    """``SparkContext.maxNumConcurrentTasks`` of the default resource profile (Spark 3.1 on; no
    Python API for it)."""
    jsc = sc._jsc.sc()  # noqa: SLF001
    return int(jsc.maxNumConcurrentTasks(jsc.resourceProfileManager().defaultResourceProfile()))
