"""PyFlink's ``pyflink.datastream.checkpointing_mode``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.checkpointing import CheckpointingMode

__all__ = ["CheckpointingMode"]
