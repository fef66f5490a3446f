"""A job's checkpoint directory: completing, retaining, aborting and finding checkpoints.

Layout (docs/architecture.md, section 7)::

    <checkpoints dir>/<job-id>/chk-<n>/_metadata   one per retained checkpoint (+ files exclusive to it)
    <checkpoints dir>/<job-id>/shared/             files used by several checkpoints (incremental SSTs)
    <checkpoints dir>/<job-id>/taskowned/          created with the job directory
    <checkpoints dir>/<job-id>/readers/            pins of checkpoints being read (checkpoint/readers.py)

Paths the store takes and returns (``chk_dir(7) == "chk-7"``, ``StateFile.path``) are relative
to the *job* directory, :attr:`CheckpointStore.job_access`.

Retention: after ``chk-<n>/_metadata`` is written, the newest ``num_retained`` complete
checkpoints stay, and any a reader has pinned; older ``chk-*`` directories go (their ``_metadata`` first, so a crash midway
leaves incomplete directories, never a complete checkpoint with missing files), and so does
every ``shared/`` file that no retained checkpoint references. A ``shared/`` file that no complete
checkpoint ever referenced (left by an aborted upload) is only removed while no newer checkpoint
is in progress (a ``chk-<m>`` directory without ``_metadata``, ``m > n``), since it may be one of
that checkpoint's uploads: call :meth:`CheckpointStore.begin` before uploading shared files.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from flowpoint.checkpoint.filesystem import CheckpointStorageAccess, split_uri
from flowpoint.checkpoint.metadata import (
    METADATA_FILE,
    CheckpointMetadata,
    metadata_path,
    read_metadata,
    write_metadata,
)
from flowpoint.checkpoint.readers import pinned_ids
from flowpoint.checkpoint.verification import verify_sizes
from flowpoint.errors import CheckpointError

if TYPE_CHECKING:
    from flowpoint.checkpoint.signing import Keyring

log = logging.getLogger("flowpoint")

SHARED_DIR = "shared"
TASKOWNED_DIR = "taskowned"
CHK_PATTERN = re.compile(r"^chk-(\d+)$")


def unit_name(runtime: str | None) -> str:
    """What a checkpoint's ``epoch`` counts, as users read it: a segment (up to a barrier) on the
    continuous runtime, else an epoch. ``runtime``: the ``"runtime"`` a checkpoint's or
    savepoint's ``_metadata`` stats record (absent before they recorded it: an epoch)."""
    return "segment" if runtime == "continuous" else "epoch"


@dataclass(frozen=True)
class CheckpointInfo:
    """One ``chk-<n>`` directory as ``flowpoint checkpoints`` lists it."""

    id: int
    time_ms: int | None  # completion time (complete), newest file's modification time (incomplete)
    size_bytes: int  # every file the checkpoint needs plus _metadata (complete); the directory's bytes (incomplete)
    complete: bool
    path: str  # URI of the chk-<n> directory


def _load(access: CheckpointStorageAccess, rel_dir: str) -> tuple[CheckpointMetadata | None, int]:
    """``(metadata, bytes of _metadata)`` if ``rel_dir`` is a complete checkpoint, ``(None, 0)`` if
    its ``_metadata`` is missing, corrupt or of another version. Storage errors propagate (an
    unreachable store must never make a checkpoint look incomplete and get it deleted)."""
    rel = metadata_path(rel_dir)
    if not access.exists(rel):
        return None, 0
    try:
        data = access.read_bytes(rel)
    except CheckpointError:
        if not access.exists(rel):  # deleted meanwhile (retention in another thread)
            return None, 0
        raise
    try:
        return CheckpointMetadata.from_json(data), len(data)
    except CheckpointError as e:
        log.warning("%s does not count as a complete checkpoint: %s", access.uri(rel), e)
        return None, 0


def _chk_ids(access: CheckpointStorageAccess) -> list[int]:
    """Ids of the ``chk-<n>`` directories in the job directory ``access``, ascending."""
    if not access.exists():
        return []
    ids = []
    for name, is_dir, _ in access.list_dir():
        m = CHK_PATTERN.match(name)
        if m and is_dir:
            ids.append(int(m.group(1)))
    return sorted(ids)


def _files_below(access: CheckpointStorageAccess, rel_dir: str) -> list[str]:
    """Relative paths of every file below ``rel_dir`` (missing directory: none)."""
    if not access.exists(rel_dir):
        return []
    out: list[str] = []
    for name, is_dir, _ in access.list_dir(rel_dir):
        rel = f"{rel_dir}/{name}"
        if is_dir:
            out.extend(_files_below(access, rel))
        else:
            out.append(rel)
    return out


def _locked(method):
    def wrapper(self, *args, **kwargs):
        with self._lock:
            return method(self, *args, **kwargs)

    wrapper.__name__ = method.__name__
    wrapper.__qualname__ = method.__qualname__
    wrapper.__doc__ = method.__doc__
    return wrapper


class CheckpointStore:
    """The checkpoint directory ``<access>/<job_id>/`` of one job."""

    def __init__(self, access: CheckpointStorageAccess, job_id: str, num_retained: int = 1, keyring: Keyring | None = None):
        if not job_id or "/" in job_id or job_id in (".", ".."):
            msg = f"job id {job_id!r} cannot name a checkpoint directory"
            raise CheckpointError(msg)
        if int(num_retained) < 1:
            msg = f"state.checkpoints.num-retained must be >= 1; got {num_retained}"
            raise CheckpointError(msg)
        self.access = access
        self.job_id = job_id
        self.num_retained = int(num_retained)
        self.job_access = access.child(job_id)
        self.keyring = keyring  # signs each _metadata (None: this installation's key, checkpoint/signing.py)
        self._cache: dict[int, CheckpointMetadata] = {}
        self._floor = 0  # ids handed out or continued from: next_id() stays above
        self._lock = threading.RLock()  # completion runs in the coordinator's upload thread

    # -- layout --------------------------------------------------------------------------------

    def init(self) -> None:
        """Create the job directory with ``shared/`` and ``taskowned/``, in a checkpoints
        directory no other user owns or can write (created if missing; InsecurePathError)."""
        self.access.check_trusted("checkpoint directory", "state.checkpoints.dir", create=True)
        self.job_access.make_dirs(SHARED_DIR)
        self.job_access.make_dirs(TASKOWNED_DIR)

    @staticmethod
    def chk_dir(checkpoint_id: int) -> str:
        return f"chk-{int(checkpoint_id)}"

    shared_dir = SHARED_DIR
    taskowned_dir = TASKOWNED_DIR

    def uri(self, rel: str = "") -> str:
        """URI of ``rel`` in the job directory (the job directory itself by default)."""
        return self.job_access.uri(rel)

    def job_dir_uri(self) -> str:
        return self.job_access.uri()

    @_locked
    def begin(self, checkpoint_id: int) -> str:
        """Mark checkpoint ``checkpoint_id`` as in progress (creates its ``chk-<n>`` directory);
        returns that directory. Call it before writing any of the checkpoint's files."""
        rel = self.chk_dir(checkpoint_id)
        self.job_access.make_dirs(rel)
        self._floor = max(self._floor, int(checkpoint_id))
        return rel

    def write_file(self, rel: str, data: bytes) -> None:
        """Write a checkpoint file (relative to the job directory) atomically."""
        self.job_access.write_bytes(rel, data)

    def upload_file(self, local_path: str, rel: str) -> None:
        """Upload a local file to ``rel`` (relative to the job directory), streamed and atomic."""
        self.job_access.upload_file(local_path, rel)

    # -- ids -----------------------------------------------------------------------------------

    @_locked
    def continue_after(self, checkpoint_id: int) -> None:
        """Ids continue after a restore: the next id is at least ``checkpoint_id + 1``."""
        self._floor = max(self._floor, int(checkpoint_id))

    @_locked
    def next_id(self) -> int:
        """One more than the highest id in the directory, handed to :meth:`begin` or :meth:`complete`,
        or continued from (:meth:`continue_after`)."""
        ids = _chk_ids(self.job_access)
        return max([self._floor, *ids]) + 1

    # -- reading -------------------------------------------------------------------------------

    def _metadata(self, checkpoint_id: int) -> CheckpointMetadata | None:
        meta = self._cache.get(checkpoint_id)
        if meta is None:
            meta, _ = _load(self.job_access, self.chk_dir(checkpoint_id))
            if meta is not None:
                self._cache[checkpoint_id] = meta
        return meta

    def _complete(self, ids: Iterable[int] | None = None) -> dict[int, CheckpointMetadata]:
        ids = _chk_ids(self.job_access) if ids is None else ids
        out = {}
        for i in ids:
            meta = self._metadata(i)
            if meta is not None:
                out[i] = meta
        for gone in set(self._cache) - set(out):
            self._cache.pop(gone, None)
        return out

    @_locked
    def retained(self) -> list[CheckpointMetadata]:
        """The retained complete checkpoints (at most ``num_retained``), oldest first."""
        complete = self._complete()
        return [complete[i] for i in sorted(complete)[-self.num_retained :]]

    @_locked
    def latest(self) -> CheckpointMetadata | None:
        retained = self.retained()
        return retained[-1] if retained else None

    # -- completing ----------------------------------------------------------------------------

    @_locked
    def complete(self, metadata: CheckpointMetadata) -> str:
        """Write ``chk-<n>/_metadata`` atomically (the checkpoint is then complete), then apply
        retention. Returns the checkpoint directory. Files the metadata references must be
        in ``chk-<n>/`` or ``shared/`` and already written. A failure to clean up older
        checkpoints is logged, not raised: the checkpoint is complete all the same."""
        n = int(metadata.checkpoint_id)
        rel = self.chk_dir(n)
        if metadata.kind != "checkpoint":
            msg = f"{self.uri(rel)}: a checkpoint directory holds checkpoints, not {metadata.kind}s"
            raise CheckpointError(msg)
        if metadata.job_id != self.job_id:
            msg = f"checkpoint {n} belongs to job {metadata.job_id}, not to {self.job_id} whose directory is {self.job_dir_uri()}"
            raise CheckpointError(msg)
        for path in sorted(metadata.referenced_files()):
            if not (path.startswith(f"{rel}/") or path.startswith(f"{SHARED_DIR}/")):
                msg = (
                    f"checkpoint {n} references {path!r}: its files must be in {rel}/ (exclusive) or "
                    f"{SHARED_DIR}/ (shared, reference-counted); other checkpoints' directories are deleted by retention"
                )
                raise CheckpointError(msg)
        if self.job_access.exists(metadata_path(rel)):
            msg = f"checkpoint {n} is already complete: {self.uri(metadata_path(rel))} exists"
            raise CheckpointError(msg)
        write_metadata(self.job_access, rel, metadata, self.keyring)
        self._cache[n] = metadata
        self._floor = max(self._floor, n)
        try:
            self._apply_retention(n)
        except Exception:  # noqa: BLE001 - cleanup is retried at the next completion
            log.warning("checkpoint %d completed, but removing older checkpoints of %s failed", n, self.job_dir_uri(), exc_info=True)
        return rel

    def _apply_retention(self, completed: int) -> None:
        ids = _chk_ids(self.job_access)
        complete = self._complete(ids)
        keep = set(sorted(complete)[-self.num_retained :])
        keep |= pinned_ids(self.job_access) & set(complete)  # being read while the job runs (readers.py)
        in_progress = [i for i in ids if i not in complete and i > completed]
        discard = [i for i in ids if i not in keep and i not in in_progress]
        referenced = set().union(*(complete[i].referenced_files() for i in keep))
        released = set().union(*(complete[i].referenced_files() for i in discard if i in complete))
        # _metadata first: from here on a crash leaves incomplete directories, never a
        # complete checkpoint whose shared files are gone.
        for i in discard:
            if i in complete:
                self.job_access.delete(metadata_path(self.chk_dir(i)))
                self._cache.pop(i, None)
        for i in discard:
            self.job_access.delete(self.chk_dir(i))
        self._delete_shared(referenced, released, sweep_orphans=not in_progress)

    def _delete_shared(self, referenced: set[str], released: set[str], sweep_orphans: bool) -> None:
        """Delete ``shared/`` files not in ``referenced``: those in ``released`` always, the
        others (never referenced by a complete checkpoint) only if ``sweep_orphans``."""
        for path in _files_below(self.job_access, SHARED_DIR):
            if path in referenced:
                continue
            if path in released or sweep_orphans:
                self.job_access.delete(path)

    # -- aborting and discarding ---------------------------------------------------------------

    @_locked
    def abort(self, checkpoint_id: int, shared_files: Iterable[str] | None = None) -> None:
        """Remove the files of checkpoint ``checkpoint_id`` that did not complete: its ``chk-<n>``
        directory and the ``shared/`` files written for it that no complete checkpoint
        references. Those are ``shared_files`` if given, else every unreferenced shared file,
        provided no other checkpoint is in progress. A complete checkpoint is never aborted."""
        n = int(checkpoint_id)
        rel = self.chk_dir(n)
        if self.job_access.exists(metadata_path(rel)) and _load(self.job_access, rel)[0] is not None:
            msg = f"checkpoint {n} is complete ({self.uri(metadata_path(rel))}); it cannot be aborted"
            raise CheckpointError(msg)
        self.job_access.delete(rel)
        ids = _chk_ids(self.job_access)
        complete = self._complete(ids)
        referenced = set().union(*(m.referenced_files() for m in complete.values()))
        if shared_files is not None:
            for given in shared_files:
                path = given if given.startswith(f"{SHARED_DIR}/") else f"{SHARED_DIR}/{given}"
                if path not in referenced:
                    self.job_access.delete(path)
            return
        others_in_progress = [i for i in ids if i not in complete and i != n]
        self._delete_shared(referenced, set(), sweep_orphans=not others_in_progress)

    @_locked
    def remove_incomplete(self) -> list[int]:
        """Remove every ``chk-<n>`` directory without a complete ``_metadata``: what tasks of an
        aborted checkpoint wrote, possibly after the abort removed it. Only for a job that is no
        longer running. Returns the ids removed."""
        ids = _chk_ids(self.job_access)
        complete = self._complete(ids)
        gone = [i for i in ids if i not in complete]
        for i in gone:
            self.job_access.delete(self.chk_dir(i))
        # and shared/ files no complete checkpoint lists (an aborted checkpoint's upload may have
        # outlived its abort): no task writes any more
        referenced = set().union(*(m.referenced_files() for m in complete.values()))
        self._delete_shared(referenced, set(), sweep_orphans=True)
        return gone

    @_locked
    def discard_all(self, keep: tuple[str, ...] = ("taskowned",)) -> None:
        """Delete the job's checkpoint directory with every checkpoint in it (a finished job, or a
        cancelled one under DELETE_ON_CANCELLATION). ``keep``: entries owned by the running job's
        tasks (its durable working state, removed by the job itself when the driver exits)."""
        if not self.job_access.exists():
            return
        for i in _chk_ids(self.job_access):
            self.job_access.delete(metadata_path(self.chk_dir(i)))
        self._cache.clear()
        entries = self.job_access.list_dir("")
        kept = {name for name, is_dir, _size in entries if name in keep and is_dir and self.job_access.list_dir(name)}
        if not kept:
            self.job_access.delete("")
            return
        for name, _is_dir, _size in entries:
            if name not in kept:
                self.job_access.delete(name)


# -- finding checkpoints -----------------------------------------------------------------------


def _open_dir(uri: str, options: Mapping[str, Any] | None, what: str) -> CheckpointStorageAccess:
    access = CheckpointStorageAccess(uri, options)
    if not access.exists():
        msg = f"{what} {access.uri()} does not exist"
        raise CheckpointError(msg)
    if not access.is_dir():
        msg = f"{what} {access.uri()} is a file, not a directory"
        raise CheckpointError(msg)
    return access


def list_checkpoints(uri_of_job_dir: str, options: Mapping[str, Any] | None = None) -> list[CheckpointInfo]:
    """Every ``chk-<n>`` directory of a job's checkpoint directory, ascending by id; one without
    a valid ``_metadata`` is listed as incomplete."""
    access = _open_dir(uri_of_job_dir, options, "checkpoint directory")
    out = []
    for i in _chk_ids(access):
        rel = CheckpointStore.chk_dir(i)
        meta, nbytes = _load(access, rel)
        if meta is not None:
            out.append(CheckpointInfo(i, meta.completed_time_ms, meta.state_size() + nbytes, True, access.uri(rel)))
        else:
            out.append(CheckpointInfo(i, access.mtime_ms(rel), access.size_of(rel), False, access.uri(rel)))
    return out


def find_latest(uri_of_job_dir: str, options: Mapping[str, Any] | None = None) -> CheckpointMetadata | None:
    """The newest complete checkpoint in a job's checkpoint directory (None if there is none).
    Its files are relative to ``uri_of_job_dir``."""
    access = _open_dir(uri_of_job_dir, options, "checkpoint directory")
    for i in reversed(_chk_ids(access)):
        meta, _ = _load(access, CheckpointStore.chk_dir(i))
        if meta is not None:
            return meta
    return None


def resolve_restore_path(path: str, options: Mapping[str, Any] | None = None, setting: str = "-s (execution.savepoint.path)") -> tuple[CheckpointStorageAccess, CheckpointMetadata]:
    """``(access, metadata)`` for a restore from ``path``: a ``chk-<n>`` directory, a savepoint
    directory, or the ``_metadata`` file in either; a URI or a (relative) local path.

    ``access`` is the directory the metadata's file paths are relative to: the job directory
    (the parent of ``chk-<n>``) for a checkpoint, the savepoint directory itself for a savepoint.
    ``_metadata`` is checked against its checksum, and every file it names to exist with its
    recorded size (CorruptStateError naming the file otherwise); the files' contents are checked
    by :func:`flowpoint.driver.restore.plan_restore` (every restore, restarts included).

    On a local filesystem, the directory and every directory its files are read from (the job
    directory, ``shared/``) must be safe from other users (:meth:`CheckpointStorageAccess.check_trusted`;
    ``setting`` is the one that chose the path): InsecurePathError naming the directory otherwise."""
    text = str(path).rstrip("/")
    parent, name = split_uri(text)
    if name == METADATA_FILE:
        text = parent
    directory = _open_dir(text, options, "restore path")
    directory.check_trusted("restore directory", setting)
    if not directory.exists(METADATA_FILE):
        if any(CHK_PATTERN.match(n) and d for n, d, _ in directory.list_dir()):
            msg = (
                f"{directory.uri()} is a job's checkpoint directory, not a checkpoint: restore from one of its "
                f"chk-<n> directories (list them with `flowpoint checkpoints {directory.uri()}`)"
            )
            raise CheckpointError(msg)
    meta = read_metadata(directory, "")
    if meta.kind == "checkpoint":
        expected = CheckpointStore.chk_dir(meta.checkpoint_id)
        if directory.name != expected:
            msg = (
                f"{directory.uri(METADATA_FILE)} is checkpoint {meta.checkpoint_id}, but its directory is named "
                f"{directory.name!r}: its files are found relative to the job directory as {expected}/...; rename it back to {expected}"
            )
            raise CheckpointError(msg)
        access = CheckpointStorageAccess(split_uri(directory.uri())[0], options)
    else:
        access = directory
    for rel in sorted({f.rpartition("/")[0] for f in meta.referenced_files()}):
        access.child(rel).check_trusted("directory of restored state files", setting)
    verify_sizes(access, meta)
    return access, meta
