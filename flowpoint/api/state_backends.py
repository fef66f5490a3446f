"""State backends (where working state lives while the job runs) and checkpoint storage (where
snapshots go), as separate things since Flink 1.13.

Each object stands for configuration keys; setting it on the environment writes them, so code
overrides ``-D`` and ``flowpoint.yaml``::

    env.set_state_backend(EmbeddedRocksDBStateBackend(True))       # state.backend.type: rocksdb
                                                                    # state.backend.incremental: true
    env.get_checkpoint_config().set_checkpoint_storage("hdfs:///flink/ck")
    # state.checkpoint-storage: filesystem, state.checkpoints.dir: hdfs:///flink/ck
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from flowpoint.api.config import Configuration, parse_option
from flowpoint.errors import ConfigurationError


class StateBackend:
    """Where keyed and operator state lives while the job runs (``state.backend.type``)."""

    def _config_items(self) -> dict[str, Any]:
        raise NotImplementedError


@dataclass(frozen=True)
class HashMapStateBackend(StateBackend):
    """State as Python objects in the task's memory; full snapshots (``state.backend.type: hashmap``)."""

    def _config_items(self) -> dict[str, Any]:
        return {"state.backend.type": "hashmap"}


@dataclass(frozen=True)
class EmbeddedRocksDBStateBackend(StateBackend):
    """State in RocksDB on the executor's local disk (``state.backend.type: rocksdb``).

    ``EmbeddedRocksDBStateBackend(True)`` takes incremental checkpoints (only new SST files are
    uploaded); ``None`` (the default) leaves ``state.backend.incremental`` to the configuration.
    """

    enable_incremental_checkpointing: bool | None = None

    def __post_init__(self) -> None:
        if self.enable_incremental_checkpointing not in (None, True, False):
            msg = f"EmbeddedRocksDBStateBackend(enable_incremental_checkpointing=...) must be True, False or None; got {self.enable_incremental_checkpointing!r}"
            raise ConfigurationError(msg)

    def is_incremental_checkpoints_enabled(self) -> bool:
        return bool(self.enable_incremental_checkpointing)

    def _config_items(self) -> dict[str, Any]:
        items: dict[str, Any] = {"state.backend.type": "rocksdb"}
        if self.enable_incremental_checkpointing is not None:
            items["state.backend.incremental"] = self.enable_incremental_checkpointing
        return items


class CheckpointStorage:
    """Where checkpoint snapshots are written (``state.checkpoint-storage``)."""

    checkpoint_path: str | None

    def get_checkpoint_path(self) -> str | None:
        return self.checkpoint_path

    def _config_items(self) -> dict[str, Any]:
        raise NotImplementedError


def _uri(path: Any) -> str:
    return parse_option("state.checkpoints.dir", path)


@dataclass(frozen=True)
class JobManagerCheckpointStorage(CheckpointStorage):
    """Snapshots in the driver's memory: small state only, lost with the driver.

    With a ``checkpoint_path`` (or ``state.checkpoints.dir``) checkpoint metadata also goes there.
    """

    checkpoint_path: str | None = None

    def __post_init__(self) -> None:
        if self.checkpoint_path is not None:
            object.__setattr__(self, "checkpoint_path", _uri(self.checkpoint_path))

    def _config_items(self) -> dict[str, Any]:
        items: dict[str, Any] = {"state.checkpoint-storage": "jobmanager"}
        if self.checkpoint_path is not None:
            items["state.checkpoints.dir"] = self.checkpoint_path
        return items


@dataclass(frozen=True)
class FileSystemCheckpointStorage(CheckpointStorage):
    """Snapshots as files under a directory URI (``file://``, ``hdfs://``, ``s3://``, ...)."""

    checkpoint_path: str

    def __post_init__(self) -> None:
        if self.checkpoint_path is None:
            msg = "FileSystemCheckpointStorage needs a checkpoint_path (a directory URI such as 'file:///data/checkpoints')"
            raise ConfigurationError(msg)
        object.__setattr__(self, "checkpoint_path", _uri(self.checkpoint_path))

    def _config_items(self) -> dict[str, Any]:
        return {"state.checkpoint-storage": "filesystem", "state.checkpoints.dir": self.checkpoint_path}


def state_backend_from_config(config: Configuration) -> StateBackend:
    if config.get("state.backend.type") == "rocksdb":
        return EmbeddedRocksDBStateBackend(config.get("state.backend.incremental"))
    return HashMapStateBackend()


def checkpoint_storage_kind(config: Configuration) -> str:
    """``jobmanager`` or ``filesystem``: as set, else filesystem exactly when a directory is set (Flink)."""
    kind = config.get("state.checkpoint-storage")
    if kind is None:
        kind = "filesystem" if config.get("state.checkpoints.dir") else "jobmanager"
    return kind


def checkpoint_storage_from_config(config: Configuration) -> CheckpointStorage:
    directory = config.get("state.checkpoints.dir")
    if checkpoint_storage_kind(config) == "jobmanager":
        return JobManagerCheckpointStorage(directory)
    if directory is None:
        msg = "state.checkpoint-storage is 'filesystem' but no directory is set: set state.checkpoints.dir (or execution.checkpointing.dir), or call set_checkpoint_storage('file:///...')"
        raise ConfigurationError(msg)
    return FileSystemCheckpointStorage(directory)
