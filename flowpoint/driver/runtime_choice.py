"""Which runtime runs a job, and what its checkpoint settings mean there (the coordinator's
choice when the job starts: :meth:`flowpoint.driver.coordinator.Coordinator.run`).

``execution.runtime``: BATCH jobs run in epochs; ``auto`` (the default) runs a STREAMING job
continuously when Spark offers every slot it needs at once, else in epochs; ``continuous``
insists (docs/execution.md).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from flowpoint.driver.slot_control import control_host, most_slots, slot_shortage
from flowpoint.errors import ConfigurationError

if TYPE_CHECKING:
    from flowpoint.driver.progress import Progress
    from flowpoint.graph.jobgraph import JobGraph

log = logging.getLogger("flowpoint")

AUTO_SLOTS_WAIT_S = 10.0  # on a cluster, how long execution.runtime: auto waits for executors to register


def choose_runtime(graph: JobGraph, config: Any, adapter: Any, job_name: str, progress: Progress, check_cancelled: Callable[[], None]) -> str:
    """``execution.runtime``: BATCH jobs run in epochs; ``auto`` (the default) runs a STREAMING
    job continuously when Spark offers every slot it needs at once, else in epochs, saying
    why in one line; ``continuous`` insists (and fails by name when it cannot run)."""
    chosen = str(config.get("execution.runtime")).lower()
    if graph.batch or chosen == "epoch":
        return "epoch"

    refusal = adapter.continuous_refusal(control_host(adapter, config))
    if chosen == "continuous":
        if refusal is not None:
            msg = f"execution.runtime: continuous cannot run job {job_name!r}: {refusal}; run it with execution.runtime: epoch (or auto)"
            raise ConfigurationError(msg)
        return "continuous"
    if refusal is not None:
        progress.say(f"running in epochs: {refusal} (docs/deployment.md)")
        return "epoch"
    slots = max(s.parallelism for s in graph.stages)
    most = most_slots(adapter)
    # executors that may still register can only help up to what the settings allow
    wait_s = min(AUTO_SLOTS_WAIT_S, int(config.get("slot.request.timeout")) / 1000.0) if most is None or most >= slots else 0.0
    reason = slot_shortage(adapter, slots, job_name, wait_s, check_cancelled)
    if reason is None:
        return "continuous"
    progress.say(f"running in epochs: {reason} (-D execution.runtime=continuous insists; docs/execution.md)")
    return "epoch"


def say_checkpoint_mode(continuous: bool, settings: Any, progress: Progress) -> None:
    """What the checkpointing settings do on the chosen runtime, in one line each: unaligned
    checkpoints, and AT_LEAST_ONCE's unaligned barriers on the continuous runtime."""
    if settings.enabled and settings.unaligned:
        say_unaligned(continuous, settings, progress)
    if continuous and settings.enabled and settings.mode == "AT_LEAST_ONCE":
        progress.say(
            "checkpointing mode AT_LEAST_ONCE: barriers are not aligned, so no input waits for another; after a "
            "restore, records that passed a checkpoint's barrier on a faster input count again (at-least-once state)"
        )


def say_unaligned(continuous: bool, settings: Any, progress: Progress) -> None:
    """What execution.checkpointing.unaligned does for this job, in one line."""
    if not continuous:
        log.warning(
            "unaligned checkpoints were requested (execution.checkpointing.unaligned); they do not apply "
            "to the epoch runtime: a checkpoint is taken between epochs, where no data is in flight, so every "
            "checkpoint is aligned without waiting (the continuous runtime takes them unaligned)"
        )
    elif settings.mode == "AT_LEAST_ONCE":
        log.warning("unaligned checkpoints apply to EXACTLY_ONCE; with AT_LEAST_ONCE barriers are not aligned at all, and no channel state is stored")
    else:
        progress.say(
            "unaligned checkpoints: barriers overtake the records in flight, which each checkpoint stores as channel state "
            "and a restore replays; savepoints stay aligned"
        )
