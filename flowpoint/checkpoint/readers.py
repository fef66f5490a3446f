"""Checkpoints being read while their job runs (issue 30, item 4): a reader pins the checkpoint,
and retention keeps it until the reader is done.

    <checkpoints dir>/<job-id>/readers/chk-<n>.<token>.pin   one per reader of chk-<n>

The reader writes its pin before it reads anything and writes it again every ``HEARTBEAT_S``
seconds, so the file's modification time says the reader is alive; it deletes the pin when it
is done (``release``, a ``with`` block's end, or when the reader is garbage collected). Retention
(:meth:`flowpoint.checkpoint.directory.CheckpointStore._apply_retention`) keeps every complete
checkpoint with a fresh pin, and the ``shared/`` files it references, beyond
``state.checkpoints.num-retained``; it goes at the first completion after its last pin does. A
pin not written for ``PIN_TTL_MS`` belongs to a reader that died: it is ignored and removed.
A pin holds no data (its name says all): nothing in it is ever parsed. A job that finishes
deletes its checkpoints whatever their pins (a finished job's state is its result).
"""

from __future__ import annotations

import logging
import re
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from flowpoint.checkpoint.filesystem import CheckpointStorageAccess

log = logging.getLogger("flowpoint")

READERS_DIR = "readers"
HEARTBEAT_S = 10.0
PIN_TTL_MS = 60_000
RELEASE_WAIT_S = 30.0  # for a renewal under way (a slow object store) to end before the pin goes
PIN_NAME = re.compile(r"^chk-(\d+)\.[0-9a-f]{32}\.pin$")


def pinned_ids(job_access: CheckpointStorageAccess, now_ms: int | None = None) -> set[int]:
    """The ids of the checkpoints with a fresh pin; stale pins are removed."""
    if not job_access.exists(READERS_DIR):
        return set()
    now = int(time.time() * 1000) if now_ms is None else now_ms
    out = set()
    for name, is_dir, _ in job_access.list_dir(READERS_DIR):
        m = PIN_NAME.match(name)
        if is_dir or m is None:
            continue
        rel = f"{READERS_DIR}/{name}"
        written = job_access.mtime_ms(rel)
        if written is not None and now - written <= PIN_TTL_MS:
            out.add(int(m.group(1)))
            continue
        try:
            job_access.delete(rel)  # its reader stopped writing it: gone or hung
        except Exception:  # noqa: BLE001 - the next retention tries again
            log.debug("could not remove the stale reader pin %s", job_access.uri(rel), exc_info=True)
    return out


class CheckpointPin:
    """A pin on checkpoint ``checkpoint_id`` of the job directory ``job_access`` (module doc),
    written now and every ``heartbeat_s`` until :meth:`release`."""

    def __init__(self, job_access: CheckpointStorageAccess, checkpoint_id: int, heartbeat_s: float = HEARTBEAT_S):
        self.checkpoint_id = int(checkpoint_id)
        self.rel = f"{READERS_DIR}/chk-{self.checkpoint_id}.{uuid.uuid4().hex}.pin"
        self._access = job_access
        job_access.make_dirs(READERS_DIR)
        job_access.write_bytes(self.rel, b"")
        self._stop = threading.Event()
        thread = threading.Thread(target=_beat, args=(job_access, self.rel, self._stop, heartbeat_s),
                                  name=f"flowpoint-pin-chk-{checkpoint_id}", daemon=True)
        thread.start()
        self._finalizer = weakref.finalize(self, _release, job_access, self.rel, self._stop, thread)

    @property
    def uri(self) -> str:
        return self._access.uri(self.rel)

    def release(self) -> None:
        self._finalizer()

    def __enter__(self) -> CheckpointPin:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def _beat(access: CheckpointStorageAccess, rel: str, stop: threading.Event, every_s: float) -> None:
    while not stop.wait(every_s):
        try:
            access.write_bytes(rel, b"")
        except Exception:  # noqa: BLE001 - the next beat tries again; after PIN_TTL_MS the pin lapses
            log.warning("could not renew the reader pin %s", access.uri(rel), exc_info=True)


def _release(access: CheckpointStorageAccess, rel: str, stop: threading.Event, beat: threading.Thread) -> None:
    stop.set()
    if beat is not threading.current_thread():
        beat.join(RELEASE_WAIT_S)  # a write under way would put the pin back after the delete
    try:
        access.delete(rel)
    except Exception:  # noqa: BLE001 - it lapses after PIN_TTL_MS
        log.debug("could not remove the reader pin %s", access.uri(rel), exc_info=True)
