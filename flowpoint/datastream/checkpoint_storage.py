"""PyFlink's ``pyflink.datastream.checkpoint_storage``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.api.state_backends import (
    CheckpointStorage,
    FileSystemCheckpointStorage,
    JobManagerCheckpointStorage,
)
from flowpoint.refused import CUSTOM_STORAGE, refusing

__all__ = ["CheckpointStorage", "FileSystemCheckpointStorage", "JobManagerCheckpointStorage"]

__getattr__ = refusing(__name__, {"CustomCheckpointStorage": CUSTOM_STORAGE})
