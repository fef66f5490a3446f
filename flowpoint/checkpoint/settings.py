"""A job's checkpoint settings, resolved from the environment by the API
(``flowpoint.api.checkpointing.resolve_checkpoint_settings``) and read by the driver."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class CheckpointSettings:
    """Every checkpoint setting, resolved: code settings over Configuration over flowpoint.yaml."""

    enabled: bool
    interval_ms: int  # -1 when checkpointing is off
    mode: str  # "EXACTLY_ONCE" | "AT_LEAST_ONCE"
    timeout_ms: int
    min_pause_ms: int
    tolerable_failures: int
    retention: str  # "RETAIN_ON_CANCELLATION" | "DELETE_ON_CANCELLATION" | "NO_EXTERNALIZED_CHECKPOINTS"
    storage: str  # "jobmanager" | "filesystem"
    checkpoints_dir: str | None  # a URI (a bare local path became file:///abs/path)
    savepoints_dir: str | None
    num_retained: int
    backend: str  # "hashmap" | "rocksdb"
    incremental: bool  # only meaningful for rocksdb
    changelog_max_ratio: float = 0.5  # hashmap: state.backend.hashmap.changelog.max-ratio (0: full snapshots only)
    changelog_max_parts: int = 20  # hashmap: state.backend.hashmap.changelog.max-parts
    rocksdb_changelog: bool = False  # state.backend.changelog.enabled
    materialize_interval_ms: int = 600_000  # state.backend.changelog.periodic-materialize.interval
    max_concurrent: int = 1  # continuous runtime: checkpoints in flight at once
    unaligned: bool = False  # execution.checkpointing.unaligned (the continuous runtime, EXACTLY_ONCE)
    aligned_timeout_ms: int = 0  # execution.checkpointing.aligned-checkpoint-timeout: 0 starts unaligned
