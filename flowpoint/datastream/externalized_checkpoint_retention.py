"""PyFlink's ``pyflink.datastream.externalized_checkpoint_retention``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.checkpointing import ExternalizedCheckpointRetention

__all__ = ["ExternalizedCheckpointRetention"]
