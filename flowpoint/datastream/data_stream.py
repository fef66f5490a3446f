"""PyFlink's ``pyflink.datastream.data_stream``: a PyFlink program ports by renaming ``pyflink`` to ``flowpoint``
(docs/pyflink.md).
"""

from flowpoint.api.broadcast import BroadcastConnectedStream, BroadcastStream
from flowpoint.api.connected_streams import ConnectedStreams
from flowpoint.api.datastream import DataStream, DataStreamSink, KeyedStream
from flowpoint.api.windowed_stream import WindowedStream
from flowpoint.connectors.sinks import CloseableIterator

__all__ = [
    "BroadcastConnectedStream",
    "BroadcastStream",
    "CloseableIterator",
    "ConnectedStreams",
    "DataStream",
    "DataStreamSink",
    "KeyedStream",
    "WindowedStream",
]
