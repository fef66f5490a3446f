"""``GET /jobs/:jid/vertices/:vid/state`` (flowpoint's own, issue 30 item 4): the keyed state of a
vertex's operators in the job's latest completed checkpoint, for the dashboard's "State" panel.

Per keyed operator: its state's bytes, its states (name, kind, keys: what ``_metadata`` records;
a RocksDB checkpoint's key counts per state are counted in its files, when the operator's state
is under the cap), and a sample of up to :data:`SAMPLE_KEYS` keys with their values as short
``repr`` strings, read from ONE subtask's part of the checkpoint. The part is read only when it
is under :data:`PART_CAP_BYTES` (a part over it is never loaded in the driver: the answer says
"sample skipped: part too large"), while the checkpoint is pinned (checkpoint/readers.py) so that
retention keeps it. What was read is kept per ``(checkpoint id, uid)``: a dashboard polling the
route reads each checkpoint's part once, and a vertex's parts at most once every
:data:`REREAD_S` seconds (polls between get the checkpoint read last, with its id).

The values are unpickled from the job's own checkpoint, in the job's own process: the checkpoint
directory must be safe from other users and its ``_metadata`` signed with the job's key
(:func:`flowpoint.checkpoint.savepoint.open_for_reading`), as for any restore. The answer goes
only to who may ask any route (the token or a dashboard session); the page escapes its text.
Ended jobs' archives (control/archive.py) do not have this route.
"""

from __future__ import annotations

import reprlib
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.directory import CheckpointStore
from flowpoint.checkpoint.metadata import metadata_path
from flowpoint.checkpoint.parts import writes_native_files
from flowpoint.checkpoint.readers import CheckpointPin
from flowpoint.checkpoint.savepoint import count_native_keys, load_subtask_state, open_for_reading
from flowpoint.errors import CheckpointError
from flowpoint.state.key_identity import keyed_state_maps

if TYPE_CHECKING:
    from flowpoint.checkpoint.metadata import CheckpointMetadata, OperatorState

PART_CAP_BYTES = 16 * 1024 * 1024  # a subtask's part over this is not read for a sample
SAMPLE_KEYS = 10
REPR_CHARS = 80  # a key's or value's text is cut there, with "…"
CACHED = 64  # (checkpoint id, uid) entries kept per job
REREAD_S = 10.0  # a newer checkpoint's parts are read at most this often per vertex; polls between get the last read
SETTLE_S = 0.2  # as flowpoint/driver/live_reads.py's pin_latest waits before it trusts a pin
ATTEMPTS = 3

_REPR = reprlib.Repr()  # bounded work on a big value: a few items of each container
_REPR.maxstring = _REPR.maxother = REPR_CHARS
_REPR.maxlist = _REPR.maxtuple = _REPR.maxdict = _REPR.maxset = _REPR.maxfrozenset = _REPR.maxdeque = 8
_REPR.maxlevel = 3


def short_repr(value: Any) -> str:
    """``repr(value)``, bounded: containers show their first items, the text at most REPR_CHARS."""
    try:
        text = _REPR.repr(value)
    except Exception as e:  # noqa: BLE001 - a user class whose __repr__ fails
        text = f"<{type(value).__name__}: repr failed: {type(e).__name__}>"
    return text if len(text) <= REPR_CHARS else text[:REPR_CHARS - 1] + "…"


class StateSamples:
    """What the route read, per ``(checkpoint id, uid)``, the newest :data:`CACHED`; one read at a time."""

    def __init__(self, cap_bytes: int = PART_CAP_BYTES, reread_s: float = REREAD_S):
        self.cap_bytes = cap_bytes
        self.reread_s = reread_s
        self.lock = threading.Lock()
        self._entries: OrderedDict[tuple[int, str], dict] = OrderedDict()
        self._last: dict[tuple[str, ...], tuple[float, int, dict]] = {}  # uids -> (monotonic time, checkpoint id, its info)
        self.reads = 0  # subtask parts read (tests: polling does not read again)

    def recent(self, uids: tuple[str, ...]) -> tuple[int, dict] | None:
        """The checkpoint last read for ``uids`` and its info, if read under ``reread_s`` ago: with
        checkpoints every second, a dashboard polling every two would otherwise unpickle (or, for
        RocksDB, restore) a part on every poll."""
        last = self._last.get(uids)
        if last is None or time.monotonic() - last[0] >= self.reread_s:
            return None
        if any(self.get(last[1], u) is None for u in uids):
            return None
        return last[1], last[2]

    def read_at(self, uids: tuple[str, ...], checkpoint_id: int, info: dict) -> None:
        self._last[uids] = (time.monotonic(), checkpoint_id, info)

    def get(self, checkpoint_id: int, uid: str) -> dict | None:
        entry = self._entries.get((checkpoint_id, uid))
        if entry is not None:
            self._entries.move_to_end((checkpoint_id, uid))
        return entry

    def put(self, checkpoint_id: int, uid: str, entry: dict) -> None:
        self._entries[(checkpoint_id, uid)] = entry
        while len(self._entries) > CACHED:
            self._entries.popitem(last=False)


def _key_counts(access: Any, op: OperatorState, cap_bytes: int) -> dict[str, int | None]:
    counts: dict[str, int | None] = {n: s.get("keys") for n, s in (op.states or {}).items()}
    if writes_native_files(op.backend) and any(v is None for v in counts.values()):
        if sum(s.state_size for s in op.subtasks) <= cap_bytes:  # RocksDB: counted in its files, nothing unpickled
            native = count_native_keys(access, op)
            counts = {name: native.get(name, 0) for name in {*counts, *native}}  # a state without keys has none in the files
    return counts


def _sample(access: Any, op: OperatorState, samples: StateSamples) -> tuple[dict | None, str | None]:
    """``(sample, why there is none)`` from the first subtask of ``op`` that has keys."""
    subs = [s for s in sorted(op.subtasks, key=lambda s: s.index) if s.num_keys > 0]
    if not subs:
        return None, "no keys"
    sub = subs[0]
    if sub.state_size > samples.cap_bytes:
        return None, (f"sample skipped: part too large (subtask {sub.index}'s part is {sub.state_size:,} bytes, "
                      f"over the {samples.cap_bytes:,}-byte cap)")
    samples.reads += 1
    raw = load_subtask_state(access, op, sub)
    tables = keyed_state_maps(raw)
    columns = sorted(tables)
    keys: list[Any] = []
    seen: set[str] = set()
    for name in columns:
        for k in tables[name]:
            text = short_repr(k)
            if len(keys) >= SAMPLE_KEYS:
                break
            if text not in seen:
                seen.add(text)
                keys.append(k)
    rows = [{"key": short_repr(k), "values": {n: (short_repr(tables[n][k]) if k in tables[n] else None) for n in columns}}
            for k in keys]
    return {"subtask": sub.index, "subtask-keys": len(set().union(*raw.values())), "states": columns, "rows": rows}, None


def _operator(access: Any, meta: CheckpointMetadata, uid: str, samples: StateSamples) -> dict:
    op = meta.operator(uid)
    if op is None:
        return {"uid": uid, "stateSize": 0, "backend": meta.backend, "states": [], "sample": None,
                "sample-skipped": "no state in this checkpoint"}
    counts = _key_counts(access, op, samples.cap_bytes)
    states = [{"name": n, "kind": (op.states or {}).get(n, {}).get("kind"), "keys": counts[n]} for n in sorted(counts)]
    sample, skipped = _sample(access, op, samples)
    return {
        "uid": uid, "stateSize": sum(s.state_size for s in op.subtasks),
        "backend": op.backend, "states": states, "sample": sample, "sample-skipped": skipped,
    }


def _read(store: CheckpointStore, checkpoint_id: int, uids: list[str], samples: StateSamples) -> dict[str, dict] | None:
    """The entries of ``uids`` in checkpoint ``checkpoint_id``, read while it is pinned; None
    when retention deleted it before the pin (a newer one completed meanwhile)."""
    with CheckpointPin(store.job_access, checkpoint_id):
        time.sleep(SETTLE_S)  # a retention that listed the pins just before this one was written is done by then
        rel = CheckpointStore.chk_dir(checkpoint_id)
        if not store.job_access.exists(metadata_path(rel)):
            return None
        chk = store.job_access.uri(rel)
        access, meta = open_for_reading(chk, store.job_access.options, store.keyring,
                                        "the checkpoint directory of the job", "state.checkpoints.dir")
        return {uid: _operator(access, meta, uid, samples) for uid in uids}


def vertex_state(job: Any, vertex: Any, samples: StateSamples) -> dict:
    """The answer of ``GET /jobs/:jid/vertices/:vid/state`` for ``vertex`` of ``job`` (a JobControl)."""
    keyed = [op for op in vertex.operators if op.keyed]
    names = {op.uid: op.name for op in keyed}
    checkpoints = getattr(job.client._coordinator, "checkpoints", None)
    latest = job.last_completed_checkpoint()
    if not keyed or checkpoints is None or latest is None:
        why = "no keyed state" if not keyed else "no completed checkpoint yet" if checkpoints is None or latest is None else None
        return {"checkpoint": None, "operators": [{"uid": u, "name": n} for u, n in names.items()], "message": why}
    with samples.lock:  # one read at a time; a poll after it finds the entries
        recent = samples.recent(tuple(names))
        if recent is not None and recent[0] <= latest.checkpoint_id:
            cid, checkpoint = recent
            entries = [{"name": names[u], **(samples.get(cid, u) or {})} for u in names]
            return {"checkpoint": checkpoint, "operators": entries, "message": None}
        for _ in range(ATTEMPTS):
            cid = latest.checkpoint_id
            missing = [u for u in names if samples.get(cid, u) is None]
            read = _read(checkpoints.store, cid, missing, samples) if missing else {}
            if read is not None:
                break
            latest = job.last_completed_checkpoint()  # retention took it: the newer one
        else:
            msg = f"each of the last {ATTEMPTS} newest checkpoints of job {job.job_id} was deleted before it could be read; try again"
            raise CheckpointError(msg)
        for uid, entry in read.items():
            samples.put(cid, uid, entry)
        entries = [{"name": names[u], **(samples.get(cid, u) or {})} for u in names]
        checkpoint = {"id": cid, "time": int(latest.trigger_time_ms + latest.end_to_end_ms), "path": latest.path}
        if missing:
            samples.read_at(tuple(names), cid, checkpoint)
    return {"checkpoint": checkpoint, "operators": entries, "message": None}
