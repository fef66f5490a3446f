"""The sink contract and the built-in sinks: print, collect (for tests), and user functions.

A :class:`Sink` is configuration that travels to executors; its :class:`SinkWriter` runs in the
task and may return a small per-epoch payload for the driver. The driver hands committed
payloads back to the sink with :meth:`Sink.on_epoch_committed`, in subtask order, only after
the epoch has committed: print and collect sinks therefore show each record exactly once even
when Spark retries a task. A user's ``SinkFunction`` writes during the epoch and is
at-least-once; exactly-once sinks stage their output and make it final when a checkpoint
completes (``FileSink``: connectors/file_sink.py; ``KafkaSink``: connectors/kafka/sink.py;
``DeltaSink``: connectors/delta/sink.py; ``IcebergSink``: connectors/iceberg/sink.py).
"""

from __future__ import annotations

import queue
import sys
import threading
from abc import ABC, abstractmethod
from typing import Any

from flowpoint.api.typed_values import printer


class SinkWriter(ABC):
    @abstractmethod
    def write(self, records: list) -> None: ...

    def finish(self, epoch: int) -> Any:
        """End of the epoch's input for this task; returns a payload for the driver or None."""
        return None

    def close(self) -> None:  # noqa: B027
        """The job ends."""


class Sink(ABC):
    #: "at-least-once" or "exactly-once"
    guarantee = "at-least-once"

    @abstractmethod
    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter: ...

    def on_job_config(self, config: Any) -> None:  # noqa: B027
        """Driver side, before :meth:`on_job_start` and before the sink travels to executors: the
        job's ``Configuration``; raise a ConfigurationError (or InsecurePathError) to refuse it."""

    def on_job_start(self, checkpoint_interval_ms: int | None) -> None:  # noqa: B027
        """Driver side, before the first epoch (``None``: checkpointing is off); raise a
        ConfigurationError to refuse a setting the sink cannot work with."""

    def on_epoch_committed(self, epoch: int, payloads: list[tuple[int, Any]], parallelism: int) -> None:  # noqa: B027
        """Driver side, after epoch ``epoch`` committed: ``payloads`` is ``[(subtask, payload)]``."""

    def on_job_end(self, status: str) -> None:  # noqa: B027
        """Driver side: the job finished, failed or was cancelled."""

    def snapshot_driver_state(self) -> Any:
        """Driver side, at a checkpoint: what :meth:`restore_driver_state` needs to go back to it."""
        return None

    def restore_driver_state(self, state: Any) -> None:  # noqa: B027
        """Driver side, on a restore: go back to a checkpoint's state (None: to the beginning)."""

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:  # noqa: B027
        """Driver side: checkpoint ``checkpoint_id`` is complete (two-phase-commit sinks commit here)."""

    def default_name(self) -> str:
        return type(self).__name__

    def __getstate__(self) -> dict:
        # driver-side bookkeeping (results, queues, locks) never travels to executors
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_driver")}


class _ListWriter(SinkWriter):
    def __init__(self, convert: Any = None):
        self.records: list = []
        self.convert = convert

    def write(self, records: list) -> None:
        if self.convert is None:
            self.records.extend(records)
        else:
            self.records.extend(map(self.convert, records))

    def finish(self, epoch: int) -> Any:
        out, self.records = self.records, []
        return out or None


class PrintSink(Sink):
    """``stream.print()``: each record on standard output as PyFlink prints it (``str`` of an
    untyped value, Java's ``toString`` of a typed one: :func:`~flowpoint.api.typed_values.printer`),
    prefixed like Flink's (``"2> "`` for subtask 2 when the sink runs with parallelism > 1). Lines appear once their
    epoch committed; after a restart from a checkpoint, epochs after it print again."""

    guarantee = "at-least-once"
    continuous_live = True  # on the continuous runtime, lines go out as they arrive, not per checkpoint

    def __init__(self, sink_identifier: str | None = None, stream: Any = None, type_info: Any = None):
        self.sink_identifier = sink_identifier or ""
        self._driver_stream = stream
        self.type_info = type_info  # decides the text of a value, as in PyFlink (typed_values.printer)

    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter:
        return _ListWriter(printer(self.type_info))

    def _prefix(self, subtask: int, parallelism: int) -> str:
        prefix = self.sink_identifier
        if parallelism > 1:
            prefix += (":" if prefix else "") + str(subtask + 1)
        return prefix + "> " if prefix else ""

    def on_epoch_committed(self, epoch: int, payloads: list[tuple[int, Any]], parallelism: int) -> None:
        out = getattr(self, "_driver_stream", None) or sys.stdout
        lines = []
        for subtask, payload in payloads:
            prefix = self._prefix(subtask, parallelism)
            lines.extend(prefix + line for line in payload)
        if lines:
            out.write("\n".join(lines) + "\n")
            out.flush()


class CollectSink(Sink):
    """Collects a stream's records on the driver: ``sink.results`` after the job, or iterate
    while it runs (``execute_and_collect``). Records appear once their epoch has committed."""

    guarantee = "exactly-once"

    def __init__(self, streaming: bool = False):
        self.streaming = streaming
        self._driver_results: list = []
        self._driver_queue: queue.Queue = queue.Queue()
        self._driver_lock = threading.Lock()

    @property
    def results(self) -> list:
        with self._driver_lock:
            return list(self._driver_results)

    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter:
        return _ListWriter()

    def on_epoch_committed(self, epoch: int, payloads: list[tuple[int, Any]], parallelism: int) -> None:
        records = [r for _, payload in payloads for r in payload]
        if self.streaming:
            self._driver_queue.put(records)
        else:
            with self._driver_lock:
                self._driver_results.extend(records)

    def on_job_end(self, status: str) -> None:
        if self.streaming:
            self._driver_queue.put(None)

    def snapshot_driver_state(self) -> Any:
        with self._driver_lock:
            return len(self._driver_results)

    def restore_driver_state(self, state: Any) -> None:
        # Records of epochs after the checkpoint are dropped: they are produced again. (A
        # streaming iterator has handed them out already: at least once.)
        with self._driver_lock:
            del self._driver_results[int(state or 0) :]

    def iterator(self, client: Any, limit: int | None = None) -> CloseableIterator:
        return CloseableIterator(self._driver_queue, client, limit)


class CloseableIterator:
    """Iterates over collected records while the job runs; ``close()`` cancels the job."""

    def __init__(self, q: queue.Queue, client: Any, limit: int | None):
        self._queue = q
        self._client = client
        self._limit = limit
        self._buffer: list = []
        self._taken = 0
        self._done = False

    def __iter__(self) -> CloseableIterator:
        return self

    def __next__(self) -> Any:
        if self._limit is not None and self._taken >= self._limit:
            self.close()
            raise StopIteration
        while not self._buffer:
            if self._done:
                self.close()
                raise StopIteration
            try:
                item = self._queue.get(timeout=0.2)
            except queue.Empty:
                if self._client.is_done():
                    self._client.wait()  # raises if the job failed; else the end marker follows
                continue
            if item is None:
                self._done = True
                self._client.wait()
                continue
            self._buffer = list(item)
            self._buffer.reverse()
        self._taken += 1
        return self._buffer.pop()

    def close(self) -> None:
        if not self._client.is_done():
            self._client.cancel()
        self._done = True

    def __enter__(self) -> CloseableIterator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class _FunctionWriter(SinkWriter):
    def __init__(self, function: Any, context: Any):
        self.function = function
        self.context = context
        function.open(context)

    def write(self, records: list) -> None:
        invoke = self.function.invoke
        for r in records:
            invoke(r, None)

    def close(self) -> None:
        self.function.close()


class FunctionSink(Sink):
    """``add_sink(SinkFunction or callable)``: ``invoke(value, context)`` on the executor."""

    def __init__(self, function: Any):
        self.function = function

    def create_writer(self, subtask_index: int, parallelism: int, context: Any) -> SinkWriter:
        return _FunctionWriter(self.function, context)
