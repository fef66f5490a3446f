"""Checkpoint settings: ``CheckpointConfig`` (PyFlink's API) and what the runtime reads of it.

Every setter writes a Flink configuration key into the environment's ``Configuration``, so the
same settings come from code, an explicit config dict, ``-D key=value`` or ``flowpoint.yaml``,
in that order of precedence, and ``resolve_checkpoint_settings`` is the one place the runtime
reads them from.

Notes for Flink users:

- On the epoch runtime a checkpoint is taken at the first epoch boundary after the interval has
  passed; every operator has then finished the same epoch, so each checkpoint is an aligned,
  consistent cut and state is exactly-once in both ``CheckpointingMode`` values. On the continuous
  runtime ``EXACTLY_ONCE`` aligns barriers (an input that delivered barrier n waits until every
  input has), and ``AT_LEAST_ONCE`` does not (seed 002): no input waits for another, and after a
  restore the records that passed a barrier early on a faster input count again.
- Unaligned checkpoints (``enable_unaligned_checkpoints()``, ``execution.checkpointing.unaligned``)
  apply to the continuous runtime in ``EXACTLY_ONCE``: a barrier overtakes the records in flight,
  which the checkpoint stores as channel state and a restore replays (tasks/channel_state.py), so
  checkpoints complete under backpressure. As in Flink they need ``max-concurrent-checkpoints``
  1, and savepoints stay aligned. On the epoch runtime there is nothing in flight between epochs:
  every checkpoint is aligned without waiting, and the setting is accepted with a warning.
- On the epoch runtime at most one checkpoint is in progress (epochs are sequential); on the
  continuous runtime up to ``max-concurrent-checkpoints`` (default 1) barriers are in flight.
- Externalized checkpoint retention defaults to ``NO_EXTERNALIZED_CHECKPOINTS``, the default a
  Flink 1.19 user gets: checkpoints are removed when the job finishes or is cancelled. To keep
  them after a cancel (and restore with ``-s``), use ``RETAIN_ON_CANCELLATION``. Unlike Flink,
  flowpoint keeps a failed job's checkpoints whatever the retention, so it can be resumed.
"""

from __future__ import annotations

import logging
from enum import Enum
from typing import Any, Protocol

from flowpoint.api.config import Configuration
from flowpoint.api.state_backends import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
    checkpoint_storage_from_config,
    checkpoint_storage_kind,
)
from flowpoint.api.time import Duration
from flowpoint.checkpoint.settings import CheckpointSettings
from flowpoint.errors import ConfigurationError

log = logging.getLogger("flowpoint")


class CheckpointingMode(Enum):
    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"


class ExternalizedCheckpointRetention(Enum):
    """What happens to a job's checkpoints when it ends (Flink 2's name)."""

    # Every retention deletes a finished job's checkpoints and keeps a failed job's (Flink's
    # NO_EXTERNALIZED_CHECKPOINTS deletes those too; flowpoint keeps them so the job can resume).
    DELETE_ON_CANCELLATION = "DELETE_ON_CANCELLATION"  # deleted when the job is cancelled
    RETAIN_ON_CANCELLATION = "RETAIN_ON_CANCELLATION"  # kept when the job is cancelled
    NO_EXTERNALIZED_CHECKPOINTS = "NO_EXTERNALIZED_CHECKPOINTS"  # deleted when the job is cancelled


# Flink 1.x's name for the same choice (CheckpointConfig.ExternalizedCheckpointCleanup).
ExternalizedCheckpointCleanup = ExternalizedCheckpointRetention


class CheckpointConfig:
    """Checkpoint settings of one environment (``env.get_checkpoint_config()``).

    Times are milliseconds (a duration string such as ``"1 min"`` works too).
    """

    def __init__(self, configuration: Configuration):
        self._config = configuration
        self._warned_unaligned = False

    def _set(self, setter: str, key: str, value: Any) -> CheckpointConfig:
        try:
            self._config.set(key, value)
        except ConfigurationError as e:
            msg = f"{setter}(): {e}"
            raise ConfigurationError(msg) from None
        return self

    # -- interval and mode ---------------------------------------------------------------------

    def is_checkpointing_enabled(self) -> bool:
        return self._config.get("execution.checkpointing.interval") is not None

    def get_checkpoint_interval(self) -> int:
        """The checkpoint interval in ms, or -1 when checkpointing is off."""
        interval = self._config.get("execution.checkpointing.interval")
        return -1 if interval is None else interval

    def set_checkpoint_interval(self, checkpoint_interval: int) -> CheckpointConfig:
        """Checkpoint every ``checkpoint_interval`` ms; this enables checkpointing.

        A checkpoint is taken at the first epoch boundary after the interval, so an interval
        shorter than an epoch (e.g. 1) checkpoints every epoch (Flink's minimum of 10 ms does not apply).
        """
        return self._set("set_checkpoint_interval", "execution.checkpointing.interval", checkpoint_interval)

    def get_checkpointing_mode(self) -> CheckpointingMode:
        return CheckpointingMode(self._config.get("execution.checkpointing.mode"))

    def set_checkpointing_mode(self, checkpointing_mode: CheckpointingMode) -> CheckpointConfig:
        """EXACTLY_ONCE or AT_LEAST_ONCE. Epochs are exactly-once with either; on the continuous
        runtime AT_LEAST_ONCE does not align barriers (at-least-once state after a restore)."""
        return self._set("set_checkpointing_mode", "execution.checkpointing.mode", checkpointing_mode)

    # -- timing and failures -------------------------------------------------------------------

    def get_checkpoint_timeout(self) -> int:
        return self._config.get("execution.checkpointing.timeout")

    def set_checkpoint_timeout(self, checkpoint_timeout: int) -> CheckpointConfig:
        """A checkpoint not complete after ``checkpoint_timeout`` ms is declined (default 10 min)."""
        return self._set("set_checkpoint_timeout", "execution.checkpointing.timeout", checkpoint_timeout)

    def get_min_pause_between_checkpoints(self) -> int:
        return self._config.get("execution.checkpointing.min-pause")

    def set_min_pause_between_checkpoints(self, min_pause_between_checkpoints: int) -> CheckpointConfig:
        """At least this many ms between the end of a checkpoint and the start of the next."""
        return self._set("set_min_pause_between_checkpoints", "execution.checkpointing.min-pause", min_pause_between_checkpoints)

    def get_max_concurrent_checkpoints(self) -> int:
        return self._config.get("execution.checkpointing.max-concurrent-checkpoints")

    def set_max_concurrent_checkpoints(self, max_concurrent_checkpoints: int) -> CheckpointConfig:
        """Only 1 is accepted: checkpoints are taken between epochs, one after another."""
        return self._set("set_max_concurrent_checkpoints", "execution.checkpointing.max-concurrent-checkpoints", max_concurrent_checkpoints)

    def get_tolerable_checkpoint_failure_number(self) -> int:
        return self._config.get("execution.checkpointing.tolerable-failed-checkpoints")

    def set_tolerable_checkpoint_failure_number(self, tolerable_checkpoint_failure_number: int) -> CheckpointConfig:
        """Consecutive failed checkpoints tolerated before the job fails over (default 0)."""
        return self._set("set_tolerable_checkpoint_failure_number", "execution.checkpointing.tolerable-failed-checkpoints", tolerable_checkpoint_failure_number)

    def is_fail_on_checkpointing_errors(self) -> bool:
        """Deprecated in Flink: ``get_tolerable_checkpoint_failure_number() == 0``."""
        return self.get_tolerable_checkpoint_failure_number() == 0

    def set_fail_on_checkpointing_errors(self, fail_on_checkpointing_errors: bool) -> CheckpointConfig:
        """Deprecated in Flink: tolerate no failed checkpoint (True) or any number (False)."""
        return self.set_tolerable_checkpoint_failure_number(0 if fail_on_checkpointing_errors else 2_147_483_647)

    # -- retention -----------------------------------------------------------------------------

    def get_externalized_checkpoint_retention(self) -> ExternalizedCheckpointRetention:
        return ExternalizedCheckpointRetention(self._config.get("execution.checkpointing.externalized-checkpoint-retention"))

    def set_externalized_checkpoint_retention(self, retention_mode: ExternalizedCheckpointRetention) -> CheckpointConfig:
        """Keep checkpoints when the job is cancelled (RETAIN_ON_CANCELLATION) or not."""
        return self._set("set_externalized_checkpoint_retention", "execution.checkpointing.externalized-checkpoint-retention", retention_mode)

    def set_externalized_checkpoint_cleanup(self, cleanup_mode: ExternalizedCheckpointCleanup) -> CheckpointConfig:
        """Flink 1.x name of :meth:`set_externalized_checkpoint_retention`."""
        return self._set("set_externalized_checkpoint_cleanup", "execution.checkpointing.externalized-checkpoint-retention", cleanup_mode)

    enable_externalized_checkpoints = set_externalized_checkpoint_cleanup  # deprecated Flink 1.x name
    get_externalized_checkpoint_cleanup = get_externalized_checkpoint_retention

    def is_externalized_checkpoints_enabled(self) -> bool:
        return self.get_externalized_checkpoint_retention() is not ExternalizedCheckpointRetention.NO_EXTERNALIZED_CHECKPOINTS

    # -- unaligned checkpoints (the continuous runtime) -----------------------------------------

    def enable_unaligned_checkpoints(self, enabled: bool = True) -> CheckpointConfig:
        """Unaligned checkpoints on the continuous runtime (EXACTLY_ONCE): barriers overtake the
        records in flight, which are stored with the checkpoint. The epoch runtime warns: its
        checkpoints are aligned without waiting."""
        self._set("enable_unaligned_checkpoints", "execution.checkpointing.unaligned", enabled)
        return self

    def set_alignment_timeout(self, alignment_timeout: Any) -> CheckpointConfig:
        """Unaligned checkpoints start aligned, and switch to unaligned once their barrier is
        older than this (a ``Duration`` or ms; 0, the default: always unaligned)."""
        ms = getattr(alignment_timeout, "milliseconds", alignment_timeout)
        return self._set("set_alignment_timeout", "execution.checkpointing.aligned-checkpoint-timeout", ms)

    set_aligned_checkpoint_timeout = set_alignment_timeout

    def get_alignment_timeout(self) -> Any:
        return Duration.of_millis(self._config.get("execution.checkpointing.aligned-checkpoint-timeout"))

    get_aligned_checkpoint_timeout = get_alignment_timeout

    def disable_unaligned_checkpoints(self) -> CheckpointConfig:
        return self.enable_unaligned_checkpoints(False)

    def is_unaligned_checkpoints_enabled(self) -> bool:
        return self._config.get("execution.checkpointing.unaligned")

    # -- storage -------------------------------------------------------------------------------

    def set_checkpoint_storage(self, storage: CheckpointStorage | str) -> CheckpointConfig:
        """A ``CheckpointStorage``, or a directory URI for a ``FileSystemCheckpointStorage``."""
        if not isinstance(storage, CheckpointStorage):
            try:
                storage = FileSystemCheckpointStorage(storage)
            except ConfigurationError as e:
                msg = f"set_checkpoint_storage() takes a JobManagerCheckpointStorage, a FileSystemCheckpointStorage or a directory URI: {e}"
                raise ConfigurationError(msg) from None
        for key, value in storage._config_items().items():
            self._set("set_checkpoint_storage", key, value)
        return self

    def set_checkpoint_storage_dir(self, checkpoint_path: str) -> CheckpointConfig:
        """Checkpoints as files under ``checkpoint_path`` (``FileSystemCheckpointStorage``)."""
        return self.set_checkpoint_storage(FileSystemCheckpointStorage(checkpoint_path))

    def get_checkpoint_storage(self) -> CheckpointStorage:
        return checkpoint_storage_from_config(self._config)


class CheckpointSettingsSource(Protocol):
    """What the settings are resolved from (a StreamExecutionEnvironment; the environment is not
    imported here: it builds the job description from this module's result)."""

    def get_configuration(self) -> Configuration: ...

    def get_checkpoint_config(self) -> CheckpointConfig: ...


def resolve_checkpoint_settings(env: CheckpointSettingsSource) -> CheckpointSettings:
    """What the runtime needs to know about checkpoints for a job built on ``env``.

    Raises ConfigurationError for settings that only make sense together (filesystem storage
    without a directory).
    """
    config = env.get_configuration()
    checkpoint_config = env.get_checkpoint_config()
    storage = checkpoint_storage_from_config(config)
    settings = CheckpointSettings(
        enabled=checkpoint_config.is_checkpointing_enabled(),
        interval_ms=checkpoint_config.get_checkpoint_interval(),
        mode=config.get("execution.checkpointing.mode"),
        timeout_ms=config.get("execution.checkpointing.timeout"),
        min_pause_ms=config.get("execution.checkpointing.min-pause"),
        max_concurrent=config.get("execution.checkpointing.max-concurrent-checkpoints"),
        tolerable_failures=config.get("execution.checkpointing.tolerable-failed-checkpoints"),
        retention=config.get("execution.checkpointing.externalized-checkpoint-retention"),
        storage=checkpoint_storage_kind(config),
        checkpoints_dir=storage.get_checkpoint_path(),
        savepoints_dir=config.get("state.savepoints.dir"),
        num_retained=config.get("state.checkpoints.num-retained"),
        backend=config.get("state.backend.type"),
        incremental=config.get("state.backend.incremental"),
        changelog_max_ratio=config.get("state.backend.hashmap.changelog.max-ratio"),
        changelog_max_parts=config.get("state.backend.hashmap.changelog.max-parts"),
        rocksdb_changelog=config.get("state.backend.changelog.enabled"),
        materialize_interval_ms=config.get("state.backend.changelog.periodic-materialize.interval"),
        unaligned=bool(checkpoint_config.is_unaligned_checkpoints_enabled()),
        aligned_timeout_ms=config.get("execution.checkpointing.aligned-checkpoint-timeout"),
    )
    if settings.enabled and settings.unaligned and settings.mode == "EXACTLY_ONCE" and settings.max_concurrent > 1:
        msg = (
            f"unaligned checkpoints (execution.checkpointing.unaligned) need execution.checkpointing.max-concurrent-checkpoints: 1 "
            f"(it is {settings.max_concurrent}), as in Flink: set one of them differently"
        )
        raise ConfigurationError(msg)
    if settings.enabled and settings.retention != "NO_EXTERNALIZED_CHECKPOINTS" and settings.storage == "jobmanager":
        log.warning(
            "checkpoint retention %s has no effect with jobmanager checkpoint storage: checkpoints live "
            "in the driver's memory and end with it; to keep them, use filesystem storage "
            "(state.checkpoints.dir, or set_checkpoint_storage('file:///...'))",
            settings.retention,
        )
    return settings
