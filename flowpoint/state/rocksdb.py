"""RocksDB keyed state: committed state on local disk, the current epoch's changes in memory.

The DB (through ``rocksdict``) holds only *committed* state. The state kinds are those of
``kinds.py``, over one state table per state name (``rocksdb_table.py``): while a task runs, its operators
read and write through the table's in-memory **overlay**: a dict from key to deserialized value
(a read caches the value, so reading a key again in the epoch is a dict lookup, and a list or
dict the user mutates in place is the object the overlay holds). Reads check the overlay, then
the DB. At the end of the task :meth:`RocksDBKeyedStateBackend.delta` encodes the overlay into
byte-level puts/deletes/prefix-deletes. ``commit()`` and ``rollback()`` both just drop the
overlay: a committed delta reaches the DB only through :meth:`~RocksDBKeyedStateBackend.apply`,
in one WriteBatch that also records the epoch (:meth:`~RocksDBKeyedStateBackend.version`).

DB key layout (every integer big-endian)::

    key group (2) | state id (1) | len(key) (4) | key | len(namespace) (4) | namespace | [user key]

* the key group comes first so a key-group range is a contiguous key range (rescaling);
* the key and the namespace are pickled (protocol 5, without memo so equal keys give equal
  bytes; ``Row``/namedtuple keys are stored as plain tuples, numpy scalars as Python scalars);
  the namespace is empty until windows use it;
* MapState stores one DB entry per user key (the user key's pickle is the suffix); clearing a
  map is a range delete of its prefix. Every other kind stores one entry per key (ListState:
  the pickled list).
* meta entries live under ``\\xff\\xff`` (after every key group): the state ids and kinds per
  state name (``S`` + name), the committed epoch (``V``) and the number of (state, key) pairs
  (``N``, kept exact through the deltas so :meth:`num_keys` never scans).

Values are pickled with :func:`flowpoint.tasks.batches.dumps` (cloudpickle for ``__main__``
classes). The WAL is disabled: durability comes from the delta files and checkpoints, and the
epoch is written in the same batch as the data, so after a crash the DB is at some committed
epoch (``version()``) and catches up from the delta files after it. Compaction is universal
style: an incremental checkpoint after a small update uploads about the size of the update,
not a rewritten level (``benchmarks/state_backends.py`` measures it).
"""


from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import Any

import mmh3

from flowpoint.api.state import StateDescriptor, ValueStateDescriptor
from flowpoint.errors import StateAccessError
from flowpoint.state import (
    rocksdb_delta,
    rocksdb_files,
    rocksdb_meta,
    rocksdb_migration,
    rocksdb_views,
)
from flowpoint.state.compatibility import Recorded, check_redeclared
from flowpoint.state.key_identity import CurrentKey
from flowpoint.state.keygroups import assign_to_key_group
from flowpoint.state.kinds import keyed_state
from flowpoint.state.rocksdb_changelog import DeltaLog
from flowpoint.state.rocksdb_delta import RocksDBDelta
from flowpoint.state.rocksdb_keys import (
    EMPTY_NS,
    META,
    META_VERSION,
    key_bytes,
    key_group_prefix,
    pack_u32,
    pack_u64,
    parse_db_key,
    prefix_end,
)
from flowpoint.state.rocksdb_options import RocksDBMemory, native_metrics, open_db, shared_memory
from flowpoint.state.rocksdb_table import RocksDBTable, RocksDBValueState

_mmh3_hash = mmh3.hash


def _closed_get(*_args: Any) -> Any:
    msg = "the RocksDB state backend is not open; call open() first"
    raise StateAccessError(msg)


class RocksDBKeyedStateBackend(CurrentKey):
    """The keyed state of one operator for one key-group range, in a RocksDB directory."""

    def __init__(self, operator_name: str, db_path: str, max_parallelism: int, lock_timeout: float = 30.0, uid: str | None = None,
                 memory: RocksDBMemory | None = None):
        self.operator_name = operator_name
        self.memory = memory or RocksDBMemory()
        self.uid = uid
        self.db_path = db_path
        self.max_parallelism = max_parallelism
        self.lock_timeout = lock_timeout
        self._db: Any = None
        self._get: Any = _closed_get
        self._write_opts: Any = None
        self._unflushed = False
        self._names: dict[str, tuple[int, str]] = {}  # persisted: name -> (state id, kind)
        self.restored_states: dict[str, Recorded] = {}  # what a restore recorded (compatibility.py)
        self.schemas: dict[str, dict | None] = {}  # declared in this run
        self.migrated: set[str] = set()  # restored states already brought to their declared schema
        # states restored from native files whose named tuple values were pickled with other
        # fields than their class has now: name -> the unpickler that rebuilds them by field
        # name, until their registration rewrites them (remap_named_tuples, rocksdb_migration.py)
        self._remap: dict[str, Any] = {}
        self._value_classes: dict[str, dict | None] = {}  # name -> value_class() found in the DB
        self._tables: dict[str, RocksDBTable] = {}
        self._enc: dict[Any, tuple[bytes, bytes]] = {}  # key -> (key group bytes, rest of key)
        self._kg_bytes = [key_group_prefix(g) for g in range(max_parallelism)]
        self._version = 0
        self._count = 0
        self._log = DeltaLog()  # the changelog (state.backend.changelog.enabled)
        self.materialize_next = False  # a changelog checkpoint found the chain due: the next one materializes

    # -- lifecycle ---------------------------------------------------------------------------

    @property
    def is_open(self) -> bool:
        return self._db is not None

    def open(self, timeout: float | None = None) -> None:
        """Open (or create) the DB. A DB locked by another process (or another open backend)
        is retried for ``timeout`` seconds (default ``lock_timeout``, 30 s)."""
        if self._db is not None:
            return
        timeout = self.lock_timeout if timeout is None else timeout
        db, self._write_opts = open_db(self.db_path, self.memory, timeout, self.operator_name)
        self._db = db
        self._get = db.get
        try:
            rocksdb_meta.load_meta(self)
        except BaseException:
            self._db = None
            self._get = _closed_get
            db.close()
            raise

    def close(self) -> None:
        """Flush the memtable if anything was written since the last flush, close the DB and
        release its lock. The overlay is kept (an open() later continues with it)."""
        db = self._db
        if db is None:
            return
        try:
            self._flush()
        finally:
            self._db = None
            self._get = _closed_get
            db.close()

    def native_metrics(self) -> dict[str, float]:
        """RocksDB's own figures of this DB, by the names of Flink's metrics (rocksdb_options.py);
        safe from another thread: a DB closed meanwhile gives {}."""
        return native_metrics(self._db)

    def __enter__(self) -> RocksDBKeyedStateBackend:
        self.open()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _require_db(self) -> Any:
        if self._db is None:
            _closed_get()
        return self._db

    def _write(self, batch: Any) -> None:
        self._db.write(batch, self._write_opts)
        self._unflushed = True

    def _batch(self) -> Any:
        # lazy: rocksdict (the native library) only where a RocksDB backend runs
        from rocksdict import WriteBatch

        return WriteBatch(raw_mode=True)

    def _scan(self, start: bytes, end: bytes | None, keys_only: bool = False) -> Any:
        # lazy: rocksdict (the native library) only where a RocksDB backend runs
        from rocksdict import ReadOptions

        ro = ReadOptions()
        if end is not None:
            ro.set_iterate_upper_bound(end)
        db = self._require_db()
        it = db.keys(from_key=start, read_opt=ro) if keys_only else db.items(from_key=start, read_opt=ro)
        # a generator keeps ``ro`` (and its upper bound) alive for as long as the iteration runs
        yield from it

    def _ensure_state(self, name: str, kind: str, preferred: int | None = None, batch: Any = None) -> int:
        """The state id of ``name`` in this DB, registering it (or its kind) if needed
        (rocksdb_meta.py)."""
        return rocksdb_meta.ensure_state(self, name, kind, preferred, batch)

    def remap_named_tuples(self, value_classes: dict[str, dict | None]) -> None:
        """The native files just restored into the DB hold, for each state, values of the named
        tuple class (and fields) ``value_classes`` records (``_metadata``): read the states
        whose class has other fields now through an unpickler that rebuilds them by field name
        (compatibility.py) until their registration rewrites them."""
        self._remap = rocksdb_migration.remapping(value_classes)

    def value_class(self, name: str) -> dict | None:
        """The named tuple class and fields of state ``name``'s stored values, for ``_metadata``
        (rocksdb_migration.py)."""
        return rocksdb_migration.stored_value_class(self, name)

    # -- state registration ------------------------------------------------------------------

    @property
    def kinds(self) -> dict[str, str]:
        """The kind of every state registered in this backend (in this process)."""
        return {name: t.kind for name, t in self._tables.items()}

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        name = descriptor.name
        table = self._tables.get(name)
        check_redeclared(self, descriptor, None if table is None else table.kind)
        if table is None:
            self._require_db()
            table = self._tables[name] = RocksDBTable(name, rocksdb_migration.register(self, descriptor), descriptor.kind, self)
        if type(descriptor) is ValueStateDescriptor and table.kind != "map":
            return RocksDBValueState(self, table, descriptor)
        return keyed_state(self, table, descriptor)

    # -- encoding ----------------------------------------------------------------------------

    def _encode(self, key: Any) -> tuple[bytes, bytes]:
        """``(key group bytes, len + key bytes + empty namespace)``, cached for the epoch."""
        if type(key) is str:  # assign_to_key_group of a str, inlined (its canonical bytes)
            kb = pickle.dumps(key, 5)
            group = (_mmh3_hash(b"s" + key.encode("utf-8"), 0, False) & 0x7FFFFFFF) % self.max_parallelism
        else:
            kb = key_bytes(key)
            group = assign_to_key_group(key, self.max_parallelism)
        enc = self._enc[key] = (self._kg_bytes[group], pack_u32(len(kb)) + kb + EMPTY_NS)
        return enc

    def _db_key(self, table: RocksDBTable, key: Any) -> bytes:
        enc = self._enc.get(key)
        if enc is None:
            enc = self._encode(key)
        return enc[0] + table.sidb + enc[1]

    # -- epoch lifecycle -----------------------------------------------------------------------

    def delta(self) -> RocksDBDelta:
        """The changes of the current epoch (the overlay) as a picklable :class:`RocksDBDelta`."""
        return rocksdb_delta.diff(self, True)

    def changed_values(self) -> Iterator[tuple[str, Any, Any]]:
        """``(state name, key, value)`` of every value written in the current epoch (what
        :meth:`delta` will pickle; a MapState entry's value as ``{user key: value}``): to name
        the one that cannot be pickled."""
        return rocksdb_delta.changed_values(self._tables)

    def changed_keys(self) -> int:
        return rocksdb_delta.changed_keys(self._tables)

    def _drop_overlay(self) -> None:
        for table in self._tables.values():
            table.clear()
        self._enc.clear()

    def commit(self) -> None:
        """Drop the overlay without writing it: the committed delta reaches the DB through
        :meth:`apply`."""
        self._drop_overlay()

    def rollback(self) -> None:
        self._drop_overlay()

    def apply(self, delta: RocksDBDelta | None, version: int | None = None) -> None:
        """Write a committed delta (and optionally the epoch it completes) in one WriteBatch.
        Call it with an overlay that holds no changes (it is then only a read cache and is
        dropped) or with the overlay the delta came from."""
        self._require_db()
        if not self.changed_keys():
            self._drop_overlay()
        wb = self._batch()
        if delta:
            if not isinstance(delta, RocksDBDelta):
                msg = f"RocksDBKeyedStateBackend.apply() needs a RocksDBDelta; got {type(delta).__name__}"
                raise TypeError(msg)
            rocksdb_delta.write_delta(self, wb, delta)
        if version is not None:
            wb.put(META_VERSION, pack_u64(version))
        if len(wb):
            self._write(wb)
        if version is not None:
            self._version = version
        self._log.applied(delta, version)

    # -- the changelog ---------------------------------------------------------------------------

    def record_changes(self) -> None:
        """Keep every committed delta from now on (the changelog's source); the log is complete
        from the current version."""
        self._log.record(self._version)

    def _forget_log(self) -> None:
        self._log.forget()

    def changes_since(self, version: int) -> tuple[list[tuple[int, RocksDBDelta]], int] | None:
        """``(the committed deltas applied after version, in order, their bytes)``; None if the
        log does not hold all of them (not recording, started later, or forgotten). The deltas
        up to ``version`` go: a completed checkpoint holds them."""
        return self._log.since(version, self._version)

    def materialized(self) -> None:
        """A snapshot of the DB as it is now was taken: a log forgotten earlier restarts here."""
        self.materialize_next = False
        self._log.materialized(self._version)

    def flush_in_background(self) -> None:
        """Start flushing the memtables without waiting (RocksDB's background threads), ahead of
        the next checkpoint's materialization (``materialize_next``)."""
        self.materialize_next = True
        db = self._db
        if db is not None and self._unflushed:
            db.flush(False)

    def version(self) -> int:
        """The committed epoch the DB holds (0 for a new DB)."""
        return self._version

    def set_version(self, epoch: int) -> None:
        self.apply(None, version=epoch)

    # -- whole-state views ---------------------------------------------------------------------

    def snapshot(self) -> dict[str, dict[Any, Any]]:
        """All state (committed DB content with the overlay on top): ``{state name: {key:
        value}}`` as the heap backend's snapshot (MapState values are dicts, ListState lists).
        O(state)."""
        return rocksdb_views.snapshot(self)

    def iter_entries(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` of one state, the committed DB content with the overlay on top
        (rocksdb_views.py). For rebuilding an in-memory index, such as a timer queue, when an
        operator opens."""
        return rocksdb_views.iter_entries(self, state_name)

    def restore(self, tables: dict[str, dict[Any, Any]], kinds: dict[str, str] | None = None) -> None:
        """Replace the DB content with ``tables`` (heap snapshot format) and drop the overlay
        (rocksdb_views.py)."""
        rocksdb_views.restore(self, tables, kinds)

    def keys_per_state(self) -> dict[str, int]:
        """Committed keys per state name, counted from the DB's key bytes (nothing is
        unpickled: safe on files from elsewhere, as ``flowpoint inspect`` needs). O(entries)."""
        return rocksdb_views.keys_per_state(self)

    def num_keys(self) -> int:
        """Number of (state, key) pairs with state, overlay included (as the heap backend's).
        O(keys changed in this epoch): the committed count is kept in the DB."""
        self._require_db()
        if not any(t.dirty or t.maps for t in self._tables.values()):
            return self._count
        return self._count + rocksdb_delta.diff(self, False).key_count_change

    # -- checkpoints ---------------------------------------------------------------------------

    def create_checkpoint(self, target_dir: str) -> list[tuple[str, int]]:
        """A RocksDB checkpoint (hard links) of the committed DB in ``target_dir`` (which must
        not exist); returns ``[(file name, size)]`` of every file in it. SST file names are
        unique within one DB's history, so a name a previous checkpoint listed with the same
        size is the same file (incremental upload)."""
        db = self._require_db()
        return rocksdb_files.create_checkpoint(db, target_dir, self._flush)

    def _flush(self) -> None:
        if self._unflushed:
            self._db.flush(True)
            self._unflushed = False

    @staticmethod
    def restore_files(db_path: str, source_dir: str, replace: bool = False) -> None:
        """Make ``db_path`` a DB from a checkpoint directory (rocksdb_files.py)."""
        rocksdb_files.restore_files(db_path, source_dir, replace)


__all__ = [
    "META", "RocksDBDelta", "RocksDBKeyedStateBackend", "RocksDBMemory", "key_bytes", "key_group_prefix", "parse_db_key", "prefix_end",
    "shared_memory",
]
