"""Savepoints and stops requested through the REST API, as Flink's asynchronous operations: the
request answers ``202 {"request-id": <trigger id>}`` at once, and
``GET /jobs/:jid/savepoints/<trigger id>`` says ``IN_PROGRESS`` until the savepoint is written,
then ``COMPLETED`` with its ``location`` or a ``failure-cause``.

Each operation runs the job client's (blocking) call in a thread of its own. The newest
``KEEP`` operations of a job are kept. When a job ends, its control endpoint waits (a little)
for operations that completed shortly before to be asked about (:meth:`Operations.wait_claimed`):
a client polling for a stop's savepoint gets its answer before the process lets go of the job.
"""

from __future__ import annotations

import re
import secrets
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

KEEP = 100
CLAIM_WINDOW_S = 10.0  # a result not asked for within this long after it came is nobody's
TRIGGER_ID = re.compile(r"^[0-9a-f]{32}$")


@dataclass
class Operation:
    trigger_id: str
    kind: str  # savepoint | stop
    started_ms: int
    location: str | None = None
    failure: BaseException | None = None
    trace: str | None = None
    done_at: float | None = None  # time.monotonic() when it completed
    claimed: bool = False  # its COMPLETED status was read
    checkpoint_id: int | None = None  # a triggered checkpoint's id
    done: threading.Event = field(default_factory=threading.Event)

    def status(self) -> dict:
        """Flink's ``AsynchronousOperationResult``."""
        if not self.done.is_set():
            return {"status": {"id": "IN_PROGRESS"}, "operation": None}
        if self.failure is not None:
            cls = type(self.failure)
            name = f"{cls.__module__}.{cls.__qualname__}" if cls.__module__ != "builtins" else cls.__qualname__
            cause = {"class": name, "stack-trace": self.trace or "", "flowpoint": {"message": str(self.failure)}}
            return {"status": {"id": "COMPLETED"}, "operation": {"failure-cause": cause}}
        if self.checkpoint_id is not None:  # Flink's CheckpointInfo (+ where it is)
            return {"status": {"id": "COMPLETED"}, "operation": {"checkpointId": self.checkpoint_id, "location": self.location}}
        return {"status": {"id": "COMPLETED"}, "operation": {"location": self.location}}


class Operations:
    def __init__(self) -> None:
        self._ops: OrderedDict[str, Operation] = OrderedDict()
        self._lock = threading.Lock()

    def start(self, kind: str, run: Callable[[], str], trigger_id: str | None = None) -> str:
        """Run ``run`` (returns the savepoint's location) in a thread; returns the trigger id
        (``trigger_id`` when the client chose one: asked twice, it starts one operation)."""
        with self._lock:
            if trigger_id is not None and trigger_id in self._ops:
                return trigger_id
            op = Operation(trigger_id or secrets.token_hex(16), kind, int(time.time() * 1000))
            self._ops[op.trigger_id] = op
            while len(self._ops) > KEEP:
                self._ops.popitem(last=False)
        threading.Thread(target=self._run, args=(op, run), name=f"flowpoint-{kind}-{op.trigger_id[:8]}", daemon=True).start()
        return op.trigger_id

    @staticmethod
    def _run(op: Operation, run: Callable[[], str]) -> None:
        try:
            result: object = run()
            if isinstance(result, tuple):  # a checkpoint: (id, location)
                op.checkpoint_id, op.location = result
            else:
                op.location = result
        except BaseException as e:  # noqa: BLE001 - reported through the operation's status
            op.failure = e
            op.trace = "".join(traceback.format_exception(type(e), e, e.__traceback__))
        op.done_at = time.monotonic()
        op.done.set()

    def status(self, trigger_id: str) -> dict | None:
        with self._lock:
            op = self._ops.get(trigger_id)
        if op is None:
            return None
        answer = op.status()
        if answer["status"]["id"] == "COMPLETED":
            op.claimed = True
        return answer

    def all_statuses(self) -> dict[str, dict]:
        """Every operation's status by trigger id (the job's archive keeps them)."""
        with self._lock:
            ops = list(self._ops.values())
        return {op.trigger_id: op.status() for op in ops}

    def wait_done(self, timeout: float) -> bool:
        """Wait until no operation is in progress (the job ended: they end soon)."""
        deadline = time.monotonic() + timeout
        with self._lock:
            ops = list(self._ops.values())
        return all(op.done.wait(max(0.0, deadline - time.monotonic())) for op in ops)

    def wait_claimed(self, timeout: float) -> None:
        """Wait, at most ``timeout`` seconds, until every operation that completed within the
        last ``CLAIM_WINDOW_S`` seconds has been asked about."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            now = time.monotonic()
            with self._lock:
                waiting = [op for op in self._ops.values() if op.done_at is not None and not op.claimed and now - op.done_at < CLAIM_WINDOW_S]
            if not waiting:
                return
            time.sleep(0.05)
