"""Checkpoint storage (docs/architecture.md, section 7): where checkpoints live, their ``_metadata`` format,
and a job's checkpoint directory with retention.

- :mod:`flowpoint.checkpoint.filesystem`: :class:`CheckpointStorageAccess`, files under a URI
  (file://, s3://, hdfs://, memory://), atomic writes, errors as CheckpointError.
- :mod:`flowpoint.checkpoint.metadata`: the ``_metadata`` dataclasses and their JSON form.
- :mod:`flowpoint.checkpoint.directory`: :class:`CheckpointStore` (complete, retain, abort) and
  finding checkpoints to list or restore from.
- :mod:`flowpoint.checkpoint.part_writer`: the one writer of state parts (checkpoints,
  savepoints, durable working files): where each goes, how it is written, what is recorded.
"""

from flowpoint.checkpoint.directory import (
    CheckpointInfo,
    CheckpointStore,
    find_latest,
    list_checkpoints,
    resolve_restore_path,
)
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess, read_uri_bytes
from flowpoint.checkpoint.metadata import (
    CheckpointMetadata,
    OperatorState,
    SplitPosition,
    StateFile,
    SubtaskState,
    read_metadata,
    write_metadata,
)

__all__ = [
    "CheckpointInfo",
    "CheckpointMetadata",
    "CheckpointStorageAccess",
    "CheckpointStore",
    "OperatorState",
    "SplitPosition",
    "StateFile",
    "SubtaskState",
    "find_latest",
    "list_checkpoints",
    "read_metadata",
    "read_uri_bytes",
    "resolve_restore_path",
    "write_metadata",
]
