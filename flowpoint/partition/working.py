"""Where a task finds its working state from one epoch to the next.

PySpark reuses Python worker processes but does not send a partition to the same worker every
epoch, and on a cluster not to the same host. Each worker therefore keeps a cache of the task
state it has held (:class:`TaskStateCache`, one per worker process: :func:`task_states`), and
every epoch's changes are also written to a *delta file* in durable shared storage (durable.py). When epoch ``n`` of a
partition starts, its task:

1. looks up the cached state for (job, stage, partition) in its own process;
2. if that copy holds the uncommitted changes of an earlier attempt, keeps them when the
   coordinator committed exactly that attempt (O(1)), or undoes them (O(changed keys));
3. brings the copy up to the committed version by applying the delta files of the epochs it
   missed (O(changes since it last ran here));
4. only a worker that never held the partition loads the last base snapshot plus the deltas
   after it (O(state)), once, from any host.

The coordinator asks a task to write a new base snapshot when the deltas since the last base
outgrow it, so cold loads stay bounded; the next task deletes the superseded files. The
backends (HashMap, RocksDB) implement these steps in backend.py. See docs/state.md.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import stat
import threading
from collections import OrderedDict
from typing import Any

from flowpoint.checkpoint.integrity import check_bytes, check_tables
from flowpoint.checkpoint.parts import RestoredFile, apply_part, load_part, read_uri, restored_loads
from flowpoint.checkpoint.savepoint import canonical_table, decode_rows
from flowpoint.partition.committed_chain import CommittedChain
from flowpoint.private_files import private_dir
from flowpoint.worker_resources import worker

log = logging.getLogger("flowpoint")


class TaskState:
    """The keyed state backends (one per keyed operator) of one partition, in one worker, and
    the opened operator chain bound to them. ``factory`` is the partition backend (backend.py)
    that creates the per-operator keyed backends."""

    def __init__(self, factory: Any, directory: str = "", max_parallelism: int = 128) -> None:
        self.factory = factory
        self.directory = directory  # executor-local cache directory of the partition
        self.max_parallelism = max_parallelism
        self.backends: dict[str, Any] = {}
        self.version = 0
        self.pending: tuple[int, str] | None = None
        self.operators: Any = None  # the opened operator chain bound to these backends
        self.chain: CommittedChain | None = None
        self.db_id = ""  # RocksDB: identifies the local DBs' lineage (incremental checkpoints)
        # HashMap incremental checkpoints: the keys changed since this copy was loaded (None:
        # checkpoints are full snapshots, nothing is tracked)
        self.changes: ChangeTracker | None = None
        self._users = 0  # tasks that acquired it and have not released it yet
        self._use_lock = threading.Lock()

    # -- who holds it: the worker's cache closes it when it drops it, unless a task holds it -----

    def enter(self) -> None:
        """A task acquired it (PartitionBackend.acquire): it is not closed under that task."""
        with self._use_lock:
            self._users += 1

    def leave(self) -> None:
        """The task released it (PartitionBackend.release)."""
        with self._use_lock:
            self._users = max(0, self._users - 1)

    @property
    def in_use(self) -> bool:
        with self._use_lock:
            return self._users > 0

    def close_if_unused(self) -> bool:
        """Dropped from the worker's :class:`TaskStateCache` (evicted, or its job's entries
        dropped): close what its backends hold open (a RocksDB backend: its DB, with the file
        handles, memtables and LOCK it holds), unless a task holds it, whose release closes them
        (RocksDBPartitionBackend.release). A task that acquires it meanwhile waits for the close
        and opens the DBs again. True when it was closed."""
        with self._use_lock:
            if self._users:
                return False
            for b in list(self.backends.values()):
                close = getattr(b, "close", None)
                if close is not None:
                    try:
                        close()
                    except Exception:  # noqa: BLE001 - the state is no longer used here: best effort
                        log.warning("could not close the state of operator %r in %s", getattr(b, "uid", None), self.directory, exc_info=True)
            return True

    def backend(self, uid: str, name: str) -> Any:
        b = self.backends.get(uid)
        if b is None:
            b = self.backends[uid] = self.factory.new_operator_backend(self, uid, name)
        return b

    def rollback(self) -> None:
        for b in self.backends.values():
            b.rollback()

    def commit(self) -> None:
        for b in self.backends.values():
            b.commit()


class ChangeTracker:
    """The keys of a partition's HashMap state that changed since epoch ``start`` (HashMap
    incremental checkpoints, see backend.py), per ``(operator uid, state name)``.

    ``segments`` holds the keys changed up to each snapshot this copy took, as ``(version of the
    snapshot, keys changed since the snapshot before)``; ``current`` the keys changed since the
    last one. The keys changed since version ``v`` (the last completed checkpoint's snapshot,
    taken here or on another worker) are a subset of the segments ending after ``v`` plus
    ``current``: a changelog of those keys' values now, on top of that checkpoint's parts, is
    the state now. A checkpoint that was declined or never completed loses no change. A copy of
    the state loaded from durable storage tracks from the version it loaded: its checkpoints
    build on completed snapshots taken at or after that version only."""

    __slots__ = ("start", "segments", "current")

    def __init__(self, start: int) -> None:
        self.start = start
        self.segments: list[tuple[int, dict[tuple[str, str], set]]] = []
        self.current: dict[tuple[str, str], set] = {}

    def add(self, uid: str, name: str, keys: Any) -> None:
        into = self.current.get((uid, name))
        if into is None:
            into = self.current[(uid, name)] = set()
        into.update(keys)

    def since(self, version: int) -> dict[tuple[str, str], set] | None:
        """A superset of the keys changed since committed ``version`` (None: this copy did not
        hold the state then). Segments no later checkpoint needs are dropped."""
        if version < self.start:
            return None
        self.segments = [(end, seg) for end, seg in self.segments if end > version]
        out: dict[tuple[str, str], set] = {}
        for seg in [*(seg for _end, seg in self.segments), self.current]:
            for name, keys in seg.items():
                if name in out:
                    out[name] |= keys
                else:
                    out[name] = set(keys)
        return out

    def cut(self, version: int) -> None:
        """A snapshot of committed ``version`` was taken: the changes so far end a segment."""
        if self.segments and self.segments[-1][0] == version:  # a retried task's snapshot again
            seg = self.segments[-1][1]
            for name, keys in self.current.items():
                seg.setdefault(name, set()).update(keys)
        elif self.current:
            self.segments.append((version, self.current))
        self.current = {}


class TaskStateCache:
    """(job id, stage id, partition) -> :class:`TaskState`, LRU over at most ``MAX_JOBS`` jobs.
    What it drops (a job evicted, entries dropped or replaced) is closed unless a task holds it
    (:meth:`TaskState.close_if_unused`): RocksDB DBs do not stay open in a worker that forgot them.

    One per Python worker (:func:`task_states`), shared by the subtasks a continuous slot runs as
    threads: every method holds the lock, so two subtasks acquiring their partitions of a new job
    at once both keep theirs. Only a task's start and end come here; state access per record
    goes to the :class:`TaskState` the task holds."""

    MAX_JOBS = 4

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_job: OrderedDict[str, dict[tuple[int, int], TaskState]] = OrderedDict()

    def get(self, job_id: str, stage_id: int, partition: int) -> TaskState | None:
        dropped: list = []
        with self._lock:
            ts = self._entries(job_id, dropped).get((stage_id, partition))
        _close_dropped(dropped)
        return ts

    def put(self, job_id: str, stage_id: int, partition: int, ts: TaskState) -> None:
        dropped: list = []
        with self._lock:
            entries = self._entries(job_id, dropped)
            old = entries.get((stage_id, partition))
            if old is not None and old is not ts:
                dropped.append(old)
            entries[(stage_id, partition)] = ts
        _close_dropped(dropped)

    def _entries(self, job_id: str, dropped: list) -> dict[tuple[int, int], TaskState]:
        """Under the lock: the job's entries (a new job's evict the least recently used job's,
        which go to ``dropped``, to be closed outside the lock)."""
        jobs = self._by_job
        entries = jobs.get(job_id)
        if entries is None:
            entries = jobs[job_id] = {}
            while len(jobs) > self.MAX_JOBS:
                dropped.extend(jobs.popitem(last=False)[1].values())
        else:
            jobs.move_to_end(job_id)
        return entries

    def jobs(self) -> list[str]:
        with self._lock:
            return list(self._by_job)

    def drop(self, job_id: str, stage_id: int | None = None, partition: int | None = None) -> None:
        """Forget a job's entries (or one partition's) and close them (:meth:`TaskState.close_if_unused`)."""
        dropped: list = []
        with self._lock:
            if stage_id is None:
                for key in [k for k in self._by_job if k == job_id or k.startswith(job_id + "/")]:
                    dropped.extend(self._by_job.pop(key, {}).values())
            else:
                entries = self._by_job.get(job_id)
                if entries:
                    ts = entries.pop((stage_id, partition), None)  # type: ignore[arg-type]
                    if ts is not None:
                        dropped.append(ts)
                if entries is not None and not entries:  # its last partition: the job is forgotten
                    del self._by_job[job_id]
        _close_dropped(dropped)

    def clear(self) -> None:
        with self._lock:
            dropped = [ts for entries in self._by_job.values() for ts in entries.values()]
            self._by_job.clear()
        _close_dropped(dropped)


def _close_dropped(dropped: list) -> None:
    """Close the task states a :class:`TaskStateCache` dropped (outside its lock)."""
    for ts in dropped:
        close = getattr(ts, "close_if_unused", None)
        if close is not None:
            close()


def task_states() -> TaskStateCache:
    """This Python worker's :class:`TaskStateCache` (flowpoint/worker_resources.py)."""
    return worker().part("state.task-states", TaskStateCache)


def partition_dir(root: str, job_id: str, stage_id: int, partition: int) -> str:
    return os.path.join(root, job_id, f"stage-{stage_id}", f"part-{partition}")


def load_restored(files: tuple[RestoredFile, ...] | list[RestoredFile], options: dict | None = None) -> dict[str, dict[str, dict[Any, Any]]]:
    """A checkpoint's full snapshots merged per operator uid, each file keeping only its key
    groups: ``{uid: {state name: {key: value}}}``. Each file is checked against its recorded
    size and SHA-256 before it is decoded (CorruptStateError naming it otherwise)."""
    merged: dict[str, dict[str, dict[Any, Any]]] = {}
    for f in files:
        data = f.data if f.data is not None else read_uri(f.uri, options)
        loads = restored_loads(f)
        if f.format == "canonical":
            kgs = None if f.key_groups is None else f.key_groups[:2]
            into = merged.setdefault(f.uid, {})
            table = canonical_table(data, f.uri, f.size, f.sha256, f.rows, f.uid)
            for name, rows in decode_rows(table, dict(f.kinds), kgs, f.uri, f.uid, loads).items():
                into.setdefault(name, {}).update(rows)
            continue
        check_bytes(data, f.size, f.sha256, f.uri, f.uid, "checkpoint file")
        payload = load_part(data, f.uri, f.uid, loads)
        check_tables(payload, f.format == "changelog", f.uri, f.uid, dict(f.kinds))
        apply_part(merged.setdefault(f.uid, {}), f.format == "changelog", payload, f.key_groups)
    return merged


# -- the working directory: private to the user (see flowpoint/private_files.py) ---------------


def _runtime_dir() -> str | None:
    """``$XDG_RUNTIME_DIR`` when it is usable: an absolute path to a directory of this user that
    no one else can write (as systemd makes it), which this process can write."""
    d = os.environ.get("XDG_RUNTIME_DIR")
    if not d or not os.path.isabs(d):
        return None
    try:
        st = os.stat(d)
    except OSError:
        return None
    owned = not hasattr(os, "geteuid") or st.st_uid == os.geteuid()
    if not stat.S_ISDIR(st.st_mode) or not owned or st.st_mode & 0o022 or not os.access(d, os.W_OK | os.X_OK):
        return None
    return d


def default_working_dir() -> str:
    """Where working state lives when ``state.working.dir`` is not set, computed by each process
    (the driver, and every executor on its own host): ``$XDG_RUNTIME_DIR/flowpoint`` if
    ``$XDG_RUNTIME_DIR`` is usable, else ``$XDG_CACHE_HOME/flowpoint`` (default
    ``~/.cache/flowpoint``)."""
    runtime = _runtime_dir()
    if runtime:
        return os.path.join(runtime, "flowpoint")
    cache = os.environ.get("XDG_CACHE_HOME")
    if not cache or not os.path.isabs(cache):
        cache = os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "flowpoint")


def resolve_working_dir(configured: str | None) -> str:
    """The working directory's path (not created): ``state.working.dir``, else the default."""
    return os.path.abspath(os.path.expanduser(configured)) if configured else default_working_dir()


def ensure_working_dir(configured: str | None) -> str:
    """The working directory, created with mode 0700 or checked: refused with
    :class:`~flowpoint.errors.InsecurePathError` naming it if another user owns it or can write
    it. The default location is also made unreadable by others; a configured one keeps its
    mode (what flowpoint creates in it is 0700/0600)."""
    what = "working directory (state.working.dir)" if configured else "default working directory"
    return private_dir(resolve_working_dir(configured), what, tighten=not configured)


def remove_job_dir(root: str, job_id: str) -> None:
    shutil.rmtree(os.path.join(root, job_id), ignore_errors=True)


# -- which job runs hold their working files: a lock per job in the working directory ------------


def lock_path(root: str, job_id: str) -> str:
    return os.path.join(root, f"{job_id}.lock")


class JobLock:
    """``<working dir>/<job id>.lock``, locked (``flock``) by the driver while its job runs. The
    kernel releases the lock when the process dies, however it dies (kill -9), so a later run
    knows that a job whose lock file it can lock has no process left: its working files are
    leftovers (:func:`claim_leftovers`). The file stays, unlocked, after the job ends until the
    driver removes the job's durable files at exit."""

    def __init__(self, root: str, job_id: str) -> None:
        self.path = lock_path(root, job_id)
        self._fd: int | None = None
        try:
            import fcntl
        except ImportError:  # no flock (Windows): leftovers are never claimed
            return
        flags = os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(self.path, flags, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError:
            os.close(fd)
            raise
        self._fd = fd

    def release(self, remove: bool = False) -> None:
        if remove:
            with contextlib.suppress(OSError):
                os.remove(self.path)
        if self._fd is not None:
            os.close(self._fd)  # closing the last descriptor releases the lock
            self._fd = None


def claim_leftovers(root: str, job_id: str) -> bool:
    """True when job ``job_id`` left a lock file in ``root`` that no process holds: its run ended
    without cleaning up (killed) and its working files may go. False when the lock is held (the
    run is alive), or there is no lock file (the run was elsewhere, or has cleaned up)."""
    try:
        import fcntl
    except ImportError:
        return False
    try:
        fd = os.open(lock_path(root, job_id), os.O_RDWR | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    finally:
        os.close(fd)
    return True
