"""PyFlink's ``pyflink.datastream.checkpoint_config``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.checkpointing import CheckpointConfig

__all__ = ["CheckpointConfig"]
