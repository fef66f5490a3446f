"""PyFlink's ``pyflink.datastream.connectors.file_system``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md). The names that cannot work on Spark raise an ImportError that says why and
what to use instead (:mod:`flowpoint.refused`).
"""

from flowpoint.connectors.file_sink import BucketAssigner, FileSink, OutputFileConfig, RollingPolicy
from flowpoint.connectors.files import BulkFormat, FileSource, FileSourceBuilder, StreamFormat
from flowpoint.refused import COMPACTION, FILE_SOURCE_PLUGIN, STREAMING_FILE_SINK, refusing

__all__ = [
    "BucketAssigner",
    "BulkFormat",
    "FileSink",
    "FileSource",
    "FileSourceBuilder",
    "OutputFileConfig",
    "RollingPolicy",
    "StreamFormat",
]

__getattr__ = refusing(
    __name__,
    {
        "FileCompactor": COMPACTION,
        "FileCompactStrategy": COMPACTION,
        "StreamingFileSink": STREAMING_FILE_SINK,
        "FileEnumeratorProvider": FILE_SOURCE_PLUGIN,
        "FileSplitAssignerProvider": FILE_SOURCE_PLUGIN,
    },
)
