"""``RuntimeExecutionMode``: streaming or batch semantics for a job (PyFlink's names).

* ``STREAMING`` (default): results as records arrive, watermarks as the sources make them.
* ``BATCH``: every source must be bounded; the job emits final results only, as Flink's batch
  execution does: a keyed ``reduce`` or rolling aggregation (``sum``, ``min``, ``max``,
  ``min_by``, ``max_by``) emits one record per key at the end of input, there is no watermark
  before the end of input (so no record is late and event-time windows and timers fire at the
  end), processing time does not advance (processing-time timers fire at the end of input,
  after the event-time ones), and a keyed operator sees each key's records in timestamp order.
  The whole input is read in one epoch.
* ``AUTOMATIC``: ``BATCH`` when every source is bounded, else ``STREAMING``.
"""

from __future__ import annotations

from enum import Enum


class RuntimeExecutionMode(Enum):
    STREAMING = 0
    BATCH = 1
    AUTOMATIC = 2
