"""What both loops (epochs, continuous) share: the services they drive (docs/architecture.md,
section 4), built once per job by the coordinator (:class:`LoopServices`), and what they do for
the restart manager over them (:class:`CommittedLoop`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import threading

    from flowpoint.driver.checkpoint_coordinator import CheckpointCoordinator
    from flowpoint.driver.committed import CommittedState
    from flowpoint.driver.progress import Progress
    from flowpoint.driver.restarts import RestartManager
    from flowpoint.driver.restore import RestoredJob
    from flowpoint.driver.savepoints import SavepointService
    from flowpoint.driver.splits import SplitPlanner
    from flowpoint.driver.working_files import WorkingFiles
    from flowpoint.graph.jobgraph import JobGraph


@dataclass(frozen=True)
class LoopServices:
    state: CommittedState  # what every committed unit of work left: chains, positions, watermarks
    splits: SplitPlanner
    savepoints: SavepointService
    restarts: RestartManager
    checkpoints: CheckpointCoordinator | None  # None: checkpointing is off
    files: WorkingFiles
    progress: Progress
    launcher: Any  # runs a unit (an epoch) or a run (continuous) on Spark: the adapter's launcher
    cancel: threading.Event


class CommittedLoop:
    """What both loops (epochs, continuous) do for the restart manager over the services they
    share: ``state`` (CommittedState), ``splits`` (SplitPlanner), ``restarts`` and ``unit``,
    the number of the last committed unit of work."""

    def __init__(self, graph: JobGraph, config: Any, services: LoopServices) -> None:
        self.graph = graph
        self.config = config
        self.state = services.state
        self.splits = services.splits
        self.savepoints = services.savepoints
        self.restarts = services.restarts
        self.checkpoints = services.checkpoints
        # the tasks removed the job's executor-local state themselves when it finished (the
        # continuous slots: ContinuousLoop._finish; the last epoch's tasks: EpochLoop), so the
        # driver runs no Spark job to remove it
        self.tasks_removed_local_state = False
        self.files = services.files
        self.progress = services.progress
        self.launcher = services.launcher
        self.cancel = services.cancel
        self.unit = 0  # the last committed unit of work: an epoch or a segment (the epoch running, on the epoch runtime)
        self.stopped = False  # a stop-with-savepoint ended the job

    def start(self, restore: RestoredJob | None) -> None:
        """The first run: every source's splits, then what the job restores."""
        self.splits.init()
        if restore is not None:
            self.restore(restore)

    def run(self) -> None:
        self.restarts.run(self)

    def reset(self) -> None:
        self.state.reset()
        self.unit = 0
        self.splits.init()

    def restore(self, restore: RestoredJob | None) -> None:
        if restore is None:
            self.state.restore_sinks(None)
            return
        self.state.apply_restore(restore, self.restarts.allow_non_restored)
        self.unit = restore.epoch
        self.splits.restore(restore.positions)
        self.state.restore_sinks(restore.sinks)
