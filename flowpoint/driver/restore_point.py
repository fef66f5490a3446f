"""Where a new run starts (docs/checkpoints.md): a checkpoint or savepoint named with ``-s``
(``execution.savepoint.path``); ``--resume``'s choice among the job's retained checkpoints
(:mod:`flowpoint.driver.resume`); the newest of them completed by a time, ``--resume --as-of``
(:mod:`flowpoint.driver.as_of`); or nothing, the beginning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowpoint.api.storage_options import storage_options
from flowpoint.checkpoint.directory import resolve_restore_path
from flowpoint.driver.as_of import parse_as_of, restore_as_of
from flowpoint.driver.registry import JobRegistry, registry_dir
from flowpoint.driver.resume import Plan, Restored, choose_run, restore_run
from flowpoint.errors import CheckpointError

if TYPE_CHECKING:
    from flowpoint.graph.jobgraph import JobGraph


def restore_point(config: Any, settings: Any, graph: JobGraph, plan: Plan) -> Restored | None:
    """The restore a new run starts from (``plan`` maps and verifies one checkpoint, as
    :func:`flowpoint.driver.restore.plan_restore`); None: start from the beginning."""
    options = storage_options(config)
    path = config.get("execution.savepoint.path")
    by_id = config.get("execution.state-recovery.from-job")
    latest = bool(config.get("execution.state-recovery.from-latest")) or bool(by_id)
    if path and latest:
        msg = "-s/--fromSavepoint (execution.savepoint.path) and --resume (execution.state-recovery.*) both say where to restore from: give one"
        raise CheckpointError(msg)
    if config.get("execution.state-recovery.as-of") is not None and not latest:
        msg = "--as-of (execution.state-recovery.as-of) picks one of the checkpoints --resume restores: add --resume"
        raise CheckpointError(msg)
    if path:
        access, meta = resolve_restore_path(str(path), options)
        return Restored(access.uri(), meta, plan(access.uri(), meta))
    if not latest:
        return None
    if not settings.checkpoints_dir:
        msg = "--resume needs the checkpoints directory of the previous run: set state.checkpoints.dir (flowpoint.yaml or -D)"
        raise CheckpointError(msg)

    registry = JobRegistry(registry_dir(config))
    fallback = bool(config.get("execution.state-recovery.fallback-on-corruption"))
    as_of = config.get("execution.state-recovery.as-of")
    if as_of is not None:
        return restore_as_of(settings.checkpoints_dir, options, graph, registry, str(by_id) if by_id else None,
                             parse_as_of(as_of), plan, fallback)
    run = choose_run(settings.checkpoints_dir, options, graph, registry, str(by_id) if by_id else None)
    return restore_run(run, options, plan, fallback)
