"""What the API hands the driver to run a job: the job graph and its settings, resolved by the API
(``StreamExecutionEnvironment.execute_async``). The driver never sees the environment."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from flowpoint.graph.jobgraph import JobGraph


@dataclass
class JobDescription:
    graph: JobGraph
    config: Any  # the job's Configuration: flowpoint.yaml, then -D / --conf, then the code's settings
    checkpoints: Any  # CheckpointSettings (api/checkpointing.py), resolved
    restart_backoff: Any  # RestartBackoff (api/restart.py), resolved
    repeated_failure: tuple[str, bool] | None  # restart-strategy.repeated-failure.* (api/restart.py)
    parameters: Any  # the global job parameters (ExecutionConfig.set_global_job_parameters)
    # a setting that could not be resolved: the job fails with it once it runs, as every other
    # error of a starting job does (execute_async() returns; wait() and execute() raise it)
    settings_error: BaseException | None = None
