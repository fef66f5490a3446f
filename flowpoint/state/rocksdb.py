"""RocksDB keyed state: committed state on local disk, the current epoch's changes in memory.

The DB (through ``rocksdict``) holds only *committed* state. The state kinds are those of
``kinds.py``, over one state table per state name (``_Table``): while a task runs, its operators
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

import io
import os
import pickle
import shutil
import struct
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import mmh3

from flowpoint import private_files
from flowpoint.api.state import StateDescriptor, ValueStateDescriptor
from flowpoint.errors import JobExecutionError, StateAccessError, StateDecodeError
from flowpoint.pickles import dumps
from flowpoint.state.compatibility import (
    Recorded,
    check_redeclared,
    migrate_value,
    on_register,
    remapping_loads,
    value_class,
    worth_scanning,
)
from flowpoint.state.key_identity import CurrentKey, StateKey, state_key
from flowpoint.state.keygroups import assign_to_key_group, canonical_bytes
from flowpoint.state.kinds import ABSENT, ATOMIC, KeyedValueState, immutable, keyed_state
from flowpoint.worker_resources import worker

_loads = pickle.loads
_pickle_dumps = pickle.dumps

# -- constants and encoding ---------------------------------------------------------------------

META = b"\xff\xff"
META_STATE = META + b"S"  # + name (utf-8) -> state id (1 byte) + kind (ascii)
META_VERSION = META + b"V"  # -> committed epoch (8 bytes)
META_COUNT = META + b"N"  # -> number of (state, key) pairs (8 bytes)
META_FORMAT = META + b"F"  # -> layout version (8 bytes)
FORMAT_VERSION = 1
# a changelog kept in memory beyond this (checkpoints not completing) is dropped: the next
# checkpoint then materializes instead of uploading it
CHANGELOG_MEMORY_BYTES = 256 << 20
DATA_END = META  # every data key sorts below this (key groups are < 2**15)
UNKNOWN_KIND = "?"  # restored from a snapshot before the state was declared
MAX_STATES = 256

_EMPTY_NS = b"\x00\x00\x00\x00"  # length-prefixed empty namespace
_pack_u32 = struct.Struct(">I").pack
_mmh3_hash = mmh3.hash
_pack_u64 = struct.Struct(">Q").pack
_unpack_u64 = struct.Struct(">Q").unpack

_MISS: Any = object()
_ABSENT = ABSENT  # overlay tombstone: no value for the key (kinds.py)
_KEY_ATOMIC = frozenset({int, bool, str, bytes, type(None)})


class _SortedFrozenset:
    """Pickles as ``frozenset(items)`` with the items in canonical order."""

    __slots__ = ("items",)

    def __init__(self, items: tuple) -> None:
        self.items = items

    def __reduce__(self) -> Any:
        return (frozenset, (self.items,))


class _Sorted:
    """Pickles as ``factory(items)`` with the items in canonical order (dict and set keys)."""

    __slots__ = ("factory", "items")

    def __init__(self, factory: Any, items: list) -> None:
        self.factory = factory
        self.items = items

    def __reduce__(self) -> Any:
        return (self.factory, (self.items,))


_NAN = float("nan")  # every NaN key pickles as this one


def _normalize(key: Any) -> Any:
    """The form of a key that is pickled: equal keys (as ``keygroups.canonical_bytes`` sees
    them) give equal pickles."""
    t = type(key)
    if t in _KEY_ATOMIC:
        return key
    if t is StateKey:
        return _normalize(key.key)
    if t is float:
        return _NAN if key != key else 0.0 if key == 0.0 else key
    if isinstance(key, tuple):
        return tuple(_normalize(x) for x in key)
    if isinstance(key, list):
        return [_normalize(x) for x in key]
    if isinstance(key, dict):
        items = sorted(((_normalize(k), _normalize(v)) for k, v in key.items()), key=lambda kv: canonical_bytes(kv))
        return _Sorted(dict, items)
    if isinstance(key, set):
        return _Sorted(set, sorted((_normalize(k) for k in key), key=canonical_bytes))
    if isinstance(key, str):
        return str(key)
    if isinstance(key, bool):
        return bool(key)
    if isinstance(key, int):
        return int.__index__(key)
    if isinstance(key, float):
        return _normalize(float(key))
    if isinstance(key, bytes):
        return bytes(key)
    if isinstance(key, frozenset):
        items = sorted((_normalize(k) for k in key), key=canonical_bytes)
        return _SortedFrozenset(tuple(items))
    if hasattr(key, "item") and hasattr(key, "dtype"):  # numpy scalar
        return _normalize(key.item())
    return key


def key_bytes(key: Any) -> bytes:
    """Pickle (protocol 5) of a key or map user key, canonical for equal keys."""
    t = type(key)
    if t is str or t is int or t is bytes:
        return pickle.dumps(key, 5)
    buf = io.BytesIO()
    p = pickle.Pickler(buf, 5)
    p.fast = True  # no memo: ("a", "a") pickles alike whether or not the two are one object
    p.dump(_normalize(key))
    return buf.getvalue()


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest byte string greater than every string starting with ``prefix``."""
    stripped = prefix.rstrip(b"\xff")
    if not stripped:
        return None
    return stripped[:-1] + bytes([stripped[-1] + 1])


def parse_db_key(kb: bytes) -> tuple[int, int, bytes, bytes, bytes]:
    """``(key group, state id, key bytes, namespace bytes, user key bytes)`` of a data key."""
    klen = int.from_bytes(kb[3:7], "big")
    p = 7 + klen
    nlen = int.from_bytes(kb[p : p + 4], "big")
    q = p + 4 + nlen
    return int.from_bytes(kb[0:2], "big"), kb[2], kb[7:p], kb[p + 4 : q], kb[q:]


def key_group_prefix(key_group: int) -> bytes:
    """Start of a key group's DB key range (rescaling reads or deletes ranges of these)."""
    return key_group.to_bytes(2, "big")


# -- options -------------------------------------------------------------------------------------

MANAGED_PER_SLOT = 256 << 20  # state.backend.rocksdb.memory.fixed-per-slot's default when managed


# RocksDB's integer properties reported as metrics, named as Flink's RocksDB native metrics
NATIVE_METRICS = (
    "rocksdb.block-cache-usage",
    "rocksdb.block-cache-capacity",
    "rocksdb.block-cache-pinned-usage",
    "rocksdb.cur-size-all-mem-tables",
    "rocksdb.size-all-mem-tables",
    "rocksdb.estimate-pending-compaction-bytes",
    "rocksdb.live-sst-files-size",
    "rocksdb.total-sst-files-size",
    "rocksdb.estimate-live-data-size",
    "rocksdb.estimate-num-keys",
    "rocksdb.num-running-compactions",
    "rocksdb.num-running-flushes",
    "rocksdb.estimate-table-readers-mem",
)


@dataclass(frozen=True)
class RocksDBMemory:
    """How much memory a slot's DBs may use (Flink's ``state.backend.rocksdb.memory.*``).

    ``managed`` (or ``fixed_per_slot`` set): the DBs of one Python worker (a slot) share one LRU
    block cache of ``fixed_per_slot`` bytes (default :data:`MANAGED_PER_SLOT`), and a write buffer
    manager of ``write_buffer_ratio`` of it charges their memtables to that cache, so block
    cache, index and filter blocks and memtables together stay within it, however many keys and
    operators there are. Otherwise each DB has its own ``block_cache_size`` cache and up to
    ``write_buffer_count`` memtables of ``write_buffer_size``: memory grows with the number of DBs."""

    managed: bool = True
    fixed_per_slot: int | None = None
    write_buffer_ratio: float = 0.5
    block_cache_size: int = 8 << 20
    write_buffer_size: int = 64 << 20
    write_buffer_count: int = 2

    @property
    def bounded(self) -> bool:
        return self.managed or self.fixed_per_slot is not None

    @property
    def per_slot(self) -> int:
        return self.fixed_per_slot or MANAGED_PER_SLOT

    @classmethod
    def from_config(cls, config: Any) -> RocksDBMemory:
        return cls(
            bool(config.get("state.backend.rocksdb.memory.managed")), config.get("state.backend.rocksdb.memory.fixed-per-slot"),
            float(config.get("state.backend.rocksdb.memory.write-buffer-ratio")), int(config.get("state.backend.rocksdb.block.cache-size")),
            int(config.get("state.backend.rocksdb.writebuffer.size")), int(config.get("state.backend.rocksdb.writebuffer.count")),
        )

    def fields(self) -> tuple[tuple[str, Any], ...]:
        """As a StateLocation carries it (plain values)."""
        return tuple((f, getattr(self, f)) for f in self.__dataclass_fields__)


def shared_memory(memory: RocksDBMemory) -> tuple[Any, Any]:
    """This worker's (slot's) block cache and write buffer manager for ``memory``: built once per
    setting and worker process (flowpoint/worker_resources.py; a forked worker makes its own)."""
    from rocksdict import Cache, WriteBufferManager

    def build() -> tuple[Any, Any]:
        cache = Cache(memory.per_slot)
        return cache, WriteBufferManager.new_write_buffer_manager_with_cache(int(memory.per_slot * memory.write_buffer_ratio), False, cache)

    # (jobs with other settings in this worker before: theirs go with their DBs)
    return worker().cache("rocksdb.shared-memory", 4).get_or_create(memory, build)


def _options(memory: RocksDBMemory | None = None) -> Any:
    from rocksdict import (
        BlockBasedOptions,
        Cache,
        DBCompactionStyle,
        DBCompressionType,
        Options,
        UniversalCompactOptions,
    )

    memory = memory or RocksDBMemory()
    o = Options(raw_mode=True)
    o.create_if_missing(True)
    # Universal compaction: every flush (at least one per checkpoint) adds a sorted run; runs of
    # similar size merge, at least 4 at a time, once 24 of them exist, and the large base run is
    # rewritten only when the newer runs add up to twice its size. An incremental checkpoint
    # after updating 1 % of the keys therefore shares all but the new run and an occasional merge
    # of small runs with the previous checkpoint. Level style rewrites the whole last level every
    # few flushes when the updates are spread over all key groups (as they always are): about
    # 20 % per checkpoint instead of 1.5-3.5 % (benchmarks/state_backends.py measures both).
    # Merging 4 runs at a time out of 24 rather than 2 out of 12 uploads a fifth less for a key
    # set that grows without end and an eighth less for one updated in place, with a smaller
    # state and point reads about a tenth slower; rewriting the base less often (1000 %) uploads less
    # still but keeps more old versions and reads a third slower (benchmarks/compaction.py).
    o.set_compaction_style(DBCompactionStyle.universal())
    u = UniversalCompactOptions()
    u.size_ratio = 1
    u.min_merge_width = 4
    u.max_size_amplification_percent = 200
    o.set_universal_compaction_options(u)
    o.set_level_zero_file_num_compaction_trigger(24)
    o.set_level_zero_slowdown_writes_trigger(40)
    o.set_level_zero_stop_writes_trigger(60)
    o.set_write_buffer_size(memory.write_buffer_size)
    o.set_max_write_buffer_number(memory.write_buffer_count)
    t = BlockBasedOptions()
    t.set_bloom_filter(10, False)  # point lookups skip the runs that do not hold the key
    if memory.bounded:
        cache, buffers = shared_memory(memory)
        o.set_write_buffer_manager(buffers)
        t.set_block_cache(cache)
        t.set_cache_index_and_filter_blocks(True)  # (counted in the bound too)
        t.set_pin_l0_filter_and_index_blocks_in_cache(True)
    else:
        t.set_block_cache(Cache(memory.block_cache_size))
    o.set_max_background_jobs(2)
    o.set_compression_type(DBCompressionType.lz4())
    o.set_keep_log_file_num(2)
    o.set_max_log_file_size(1 << 20)
    o.set_block_based_table_factory(t)
    return o


def _write_options() -> Any:
    from rocksdict import WriteOptions

    w = WriteOptions()
    w.disable_wal = True
    return w


def _is_lock_error(e: BaseException) -> bool:
    text = str(e).lower()
    return "lock" in text and ("resource temporarily unavailable" in text or "lock hold" in text or "no locks" in text or "while lock" in text)


# -- delta ---------------------------------------------------------------------------------------


@dataclass
class RocksDBDelta:
    """One epoch's changes of one backend, as DB bytes. Applied in this order: prefix deletes,
    deletes, puts (the three never name the same DB key twice)."""

    puts: dict[bytes, bytes] = field(default_factory=dict)
    deletes: list[bytes] = field(default_factory=list)
    prefix_deletes: list[bytes] = field(default_factory=list)
    states: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (state id, kind)
    key_count_change: int = 0

    def __bool__(self) -> bool:
        return bool(self.puts or self.deletes or self.prefix_deletes)

    def __len__(self) -> int:
        return len(self.puts) + len(self.deletes) + len(self.prefix_deletes)

    def nbytes(self) -> int:
        return (
            sum(len(k) + len(v) for k, v in self.puts.items())
            + sum(map(len, self.deletes))
            + sum(map(len, self.prefix_deletes))
        )


# -- overlay -------------------------------------------------------------------------------------


class _Raw:
    """A map value read from the DB and not yet handed to user code (kept as bytes, so that
    ``contains``/``keys`` never mark mutable values as possibly changed)."""

    __slots__ = ("raw",)

    def __init__(self, raw: bytes) -> None:
        self.raw = raw


class _MapOverlay:
    """The overlay of one key's map: entries read or written this epoch."""

    __slots__ = ("entries", "dirty", "orig", "cleared", "complete", "prefix")

    def __init__(self) -> None:
        self.entries: dict[Any, Any] = {}  # user key -> value | _Raw | _ABSENT
        self.dirty: set[Any] = set()  # user keys to write
        self.orig: dict[Any, bytes | None] = {}  # user key -> DB bytes before the epoch
        self.cleared = False  # a prefix delete precedes the entries
        self.complete = False  # entries hold every live entry (after a scan or a clear)
        self.prefix: bytes | None = None


class _Table:
    """One state's table (``kinds.py``) in RocksDB: an overlay of the values read or written this
    epoch over the DB, decoded lazily; ``dirty`` keys are written by the epoch's delta."""

    __slots__ = ("name", "sid", "sidb", "kind", "cache", "dirty", "orig", "maps", "backend")

    def __init__(self, name: str, sid: int, kind: str, backend: RocksDBKeyedStateBackend) -> None:
        self.name = name
        self.sid = sid
        self.sidb = bytes([sid])
        self.kind = kind
        self.backend = backend
        self.cache: dict[Any, Any] = {}  # key -> value (_ABSENT when there is none)
        self.dirty: set[Any] = set()  # keys whose value may differ from the DB's
        self.orig: dict[Any, tuple[bytes, bytes | None]] = {}  # key -> (DB key, DB bytes before the epoch)
        self.maps: dict[Any, _MapOverlay] = {}  # MapState only

    def clear(self) -> None:
        self.cache.clear()
        self.dirty.clear()
        self.orig.clear()
        self.maps.clear()

    def _undecodable(self, e: Exception) -> StateDecodeError:
        """A committed value or user key that does not unpickle: no restart can fix it."""
        b = self.backend
        msg = (
            f"a stored value of state {self.name!r} of operator {b.operator_name!r} (RocksDB at {b.db_path}) "
            f"cannot be unpickled ({type(e).__name__}: {str(e)[:300]}): the job no longer defines a class or module "
            f"the state uses, or the restored files were damaged before their checksums were computed; restore from "
            f"another checkpoint or savepoint, or bring the class back"
        )
        return StateDecodeError(msg, path=b.db_path)

    # -- one value per key -----------------------------------------------------------------------

    def _load(self, key: Any) -> Any:
        """The committed value of ``key`` (``_ABSENT`` if none), now cached in the overlay and
        remembered with its DB key and bytes."""
        b = self.backend
        enc = b._enc.get(key)
        if enc is None:
            enc = b._encode(key)
        kb = enc[0] + self.sidb + enc[1]
        raw = b._get(kb)
        self.orig[key] = (kb, raw)
        if raw is None:
            self.cache[key] = _ABSENT
            return _ABSENT
        try:
            value = self.cache[key] = _loads(raw)
        except Exception as e:
            raise self._undecodable(e) from e
        return value

    def peek(self, key: Any) -> Any:
        value = self.cache.get(key, _MISS)
        if value is _MISS:
            value = self._load(key)
        return value

    def read(self, key: Any) -> Any:
        value = self.cache.get(key, _MISS)
        if value is _MISS:
            value = self._load(key)
        if value is not _ABSENT and type(value) not in ATOMIC and not immutable(value):
            self.dirty.add(key)  # user code may change it in place: write it with the delta
        return value

    def write(self, key: Any, value: Any) -> None:
        self.cache[key] = value
        self.dirty.add(key)

    def remove(self, key: Any) -> None:
        if self.kind == "map":
            self._map_clear(key)
        elif self.peek(key) is not _ABSENT:
            self.cache[key] = _ABSENT
            self.dirty.add(key)

    # -- MapState: one DB entry per user key ---------------------------------------------------

    def _mo(self, key: Any) -> _MapOverlay:
        mo = self.maps.get(key)
        if mo is None:
            mo = self.maps[key] = _MapOverlay()
            mo.prefix = self.backend._db_key(self, key)
        return mo

    def _entry(self, mo: _MapOverlay, uk: Any) -> Any:
        value = mo.entries.get(uk, _MISS)
        if value is _MISS:
            if mo.complete:
                return _ABSENT
            raw = self.backend._get(mo.prefix + key_bytes(uk))  # type: ignore[operator]
            mo.orig[uk] = raw
            value = mo.entries[uk] = _ABSENT if raw is None else _Raw(raw)
        return value

    def _value(self, mo: _MapOverlay, uk: Any, value: Any) -> Any:
        """A value about to be handed to user code."""
        if type(value) is _Raw:
            try:
                value = mo.entries[uk] = _loads(value.raw)
            except Exception as e:
                raise self._undecodable(e) from e
            if not immutable(value):
                mo.dirty.add(uk)
        return value

    def _scan_entries(self, mo: _MapOverlay) -> Iterator[tuple[Any, bytes]]:
        prefix = mo.prefix
        n = len(prefix)  # type: ignore[arg-type]
        for kb, raw in self.backend._scan(prefix, prefix_end(prefix)):  # type: ignore[arg-type]
            try:
                uk = _loads(kb[n:])
            except Exception as e:
                raise self._undecodable(e) from e
            yield uk, raw

    def _load_all(self, mo: _MapOverlay) -> None:
        if mo.complete:
            return
        entries, orig = mo.entries, mo.orig
        for uk, raw in self._scan_entries(mo):
            if uk not in entries:
                entries[uk] = _Raw(raw)
                orig[uk] = raw
        mo.complete = True

    def map_get(self, key: Any, uk: Any) -> Any:
        mo = self._mo(key)
        value = self._entry(mo, uk)
        if value is _ABSENT:
            return _ABSENT
        return self._value(mo, uk, value)

    def map_put(self, key: Any, uk: Any, value: Any) -> None:
        mo = self._mo(key)
        mo.entries[uk] = value
        mo.dirty.add(uk)

    def map_put_all(self, key: Any, values: dict) -> None:
        mo = self._mo(key)
        mo.entries.update(values)
        mo.dirty.update(values)

    def map_remove(self, key: Any, uk: Any) -> None:
        mo = self._mo(key)
        if self._entry(mo, uk) is not _ABSENT:
            mo.entries[uk] = _ABSENT
            mo.dirty.add(uk)

    def map_contains(self, key: Any, uk: Any) -> bool:
        return self._entry(self._mo(key), uk) is not _ABSENT

    def map_items(self, key: Any) -> list:
        mo = self._mo(key)
        self._load_all(mo)
        return [(uk, self._value(mo, uk, v)) for uk, v in list(mo.entries.items()) if v is not _ABSENT]

    def map_keys(self, key: Any) -> list:
        mo = self._mo(key)
        self._load_all(mo)
        return [uk for uk, v in mo.entries.items() if v is not _ABSENT]

    def map_values(self, key: Any) -> list:
        mo = self._mo(key)
        self._load_all(mo)
        return [self._value(mo, uk, v) for uk, v in list(mo.entries.items()) if v is not _ABSENT]

    def map_is_empty(self, key: Any) -> bool:
        mo = self._mo(key)
        for v in mo.entries.values():
            if v is not _ABSENT:
                return False
        if mo.complete:
            return True
        for uk, raw in self._scan_entries(mo):
            if mo.entries.get(uk, _MISS) is _ABSENT:
                continue
            mo.entries[uk] = _Raw(raw)
            mo.orig[uk] = raw
            return False
        mo.complete = True
        return True

    def _map_clear(self, key: Any) -> None:
        mo = self._mo(key)
        if self.map_is_empty(key):
            return
        mo.entries.clear()
        mo.dirty.clear()
        mo.orig.clear()
        mo.cleared = True
        mo.complete = True


class RocksDBValueState(KeyedValueState):
    """``ValueState`` over a RocksDB :class:`_Table` with the table's read and write inlined:
    the overlay's dict first, the DB only for a key the epoch has not seen."""

    __slots__ = ()

    def value(self) -> Any:
        key = self._b._sk
        if key is None:
            self._key()
        t = self._t
        v = t.cache.get(key, _MISS)
        if v is _MISS:
            v = t._load(key)
        if v is _ABSENT:
            return None
        if type(v) not in ATOMIC and not immutable(v):
            t.dirty.add(key)  # user code may change it in place: write it with the delta
        return v

    def update(self, value: Any) -> None:
        key = self._b._sk
        if key is None:
            self._key()
        t = self._t
        if value is None:
            t.remove(key)
            return
        t.cache[key] = value
        t.dirty.add(key)


def _closed_get(*_args: Any) -> Any:
    msg = "the RocksDB state backend is not open; call open() first"
    raise StateAccessError(msg)


# -- backend -------------------------------------------------------------------------------------


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
        # name, until their registration rewrites them (remap_named_tuples, _migrate_values)
        self._remap: dict[str, Any] = {}
        self._value_classes: dict[str, dict | None] = {}  # name -> value_class() found in the DB
        self._tables: dict[str, _Table] = {}
        self._enc: dict[Any, tuple[bytes, bytes]] = {}  # key -> (key group bytes, rest of key)
        self._kg_bytes = [key_group_prefix(g) for g in range(max_parallelism)]
        self._version = 0
        self._count = 0
        # the changelog (state.backend.changelog.enabled): every committed delta applied since
        # version ``_log_from`` (None: not known since when; the next materialization restarts it)
        self._log: list[tuple[int, RocksDBDelta, int]] | None = None  # (version, delta, its bytes)
        self._log_from: int | None = None
        self._log_bytes = 0
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
        from rocksdict import Rdict

        timeout = self.lock_timeout if timeout is None else timeout
        parent = os.path.dirname(os.path.abspath(self.db_path))
        private_files.makedirs(parent)
        options = _options(self.memory)
        deadline = time.monotonic() + timeout
        delay = 0.01
        while True:
            try:
                db = Rdict(self.db_path, options)
                break
            except Exception as e:  # rocksdict raises plain Exception
                if not _is_lock_error(e):
                    msg = f"cannot open the RocksDB state of operator {self.operator_name!r} at {self.db_path}: {e}"
                    raise StateAccessError(msg) from e
                left = deadline - time.monotonic()
                if left <= 0:
                    msg = (
                        f"the RocksDB state directory {self.db_path} of operator {self.operator_name!r} is "
                        f"locked by another process (or another open backend) and was not released within "
                        f"{timeout:g} s: {e}"
                    )
                    raise JobExecutionError(msg) from e  # recoverable: a retry may find it released
                time.sleep(min(delay, left))
                delay = min(delay * 2, 0.5)
        if os.name == "posix":
            os.chmod(self.db_path, 0o700)  # RocksDB creates its files with the umask's mode: close the directory
        self._write_opts = _write_options()
        db.set_write_options(self._write_opts)
        self._db = db
        self._get = db.get
        try:
            self._load_meta()
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
            if self._unflushed:
                db.flush(True)
                self._unflushed = False
        finally:
            self._db = None
            self._get = _closed_get
            db.close()

    def native_metrics(self) -> dict[str, float]:
        """RocksDB's own figures of this DB, by the names of Flink's
        ``state.backend.rocksdb.metrics.*`` (``rocksdb.block-cache-usage``, ...), plus
        ``rocksdb.live-sst-files`` (flowpoint's: the number of live SST files). Cheap (a few
        property reads, microseconds); safe from another thread: a DB closed meanwhile gives {}."""
        db = self._db
        if db is None:
            return {}
        out: dict[str, float] = {}
        try:
            for name in NATIVE_METRICS:
                value = db.property_int_value(name)
                if value is not None:
                    out[name] = float(value)
            out["rocksdb.live-sst-files"] = float(len(db.live_files()))
        except Exception:  # noqa: BLE001 - closed meanwhile (DbClosedError), or busy: no figures this time
            return {}
        return out

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
        from rocksdict import WriteBatch

        return WriteBatch(raw_mode=True)

    def _load_meta(self) -> None:
        db = self._db
        self._names.clear()
        end = prefix_end(META_STATE)
        for k, v in self._scan(META_STATE, end):
            self._names[k[len(META_STATE) :].decode("utf-8")] = (v[0], v[1:].decode("ascii"))
        raw = db.get(META_VERSION)
        self._version = _unpack_u64(raw)[0] if raw is not None else 0
        raw = db.get(META_COUNT)
        if raw is None:
            wb = self._batch()
            self._count = self._count_by_scan()
            wb.put(META_COUNT, _pack_u64(self._count))
            wb.put(META_FORMAT, _pack_u64(FORMAT_VERSION))
            self._write(wb)
        else:
            self._count = _unpack_u64(raw)[0]
        raw = db.get(META_FORMAT)
        if raw is not None and _unpack_u64(raw)[0] != FORMAT_VERSION:
            msg = f"the RocksDB state at {self.db_path} has layout version {_unpack_u64(raw)[0]}; this flowpoint reads version {FORMAT_VERSION}"
            raise StateAccessError(msg)
        for name, table in self._tables.items():  # states declared before a close/open
            known = self._names.get(name)
            if known is None or known[0] != table.sid:
                sid = self._ensure_state(name, table.kind, table.sid)
                table.sid, table.sidb = sid, bytes([sid])

    def _scan(self, start: bytes, end: bytes | None, keys_only: bool = False) -> Any:
        from rocksdict import ReadOptions

        ro = ReadOptions()
        if end is not None:
            ro.set_iterate_upper_bound(end)
        db = self._require_db()
        it = db.keys(from_key=start, read_opt=ro) if keys_only else db.items(from_key=start, read_opt=ro)
        # a generator keeps ``ro`` (and its upper bound) alive for as long as the iteration runs
        yield from it

    def _has_prefix(self, prefix: bytes) -> bool:
        for _ in self._scan(prefix, prefix_end(prefix), keys_only=True):
            return True
        return False

    # -- state ids -------------------------------------------------------------------------

    def _ensure_state(self, name: str, kind: str, preferred: int | None = None, batch: Any = None) -> int:
        """The state id of ``name`` in this DB, registering it (or its kind) if needed."""
        known = self._names.get(name)
        if known is not None:
            sid, k = known
            if k == kind or kind == UNKNOWN_KIND:
                return sid
            if k != UNKNOWN_KIND:
                msg = (
                    f"operator {self.operator_name!r} declares state {name!r} as {kind} state, "
                    f"but it was declared as {k} state before; give the two states different names"
                )
                raise StateAccessError(msg)
            if kind == "map":
                self._migrate_to_map(name, sid)
        else:
            used = {s for s, _ in self._names.values()}
            if preferred is not None and preferred not in used:
                sid = preferred
            else:
                sid = next((i for i in range(MAX_STATES) if i not in used), -1)
                if sid < 0:
                    msg = f"operator {self.operator_name!r} declares more than {MAX_STATES} keyed states; the RocksDB backend holds at most {MAX_STATES}"
                    raise StateAccessError(msg)
        self._names[name] = (sid, kind)
        entry = (META_STATE + name.encode("utf-8"), bytes([sid]) + kind.encode("ascii"))
        if batch is not None:
            batch.put(*entry)
        else:
            wb = self._batch()
            wb.put(*entry)
            self._write(wb)
        return sid

    def _migrate_to_map(self, name: str, sid: int) -> None:
        """A state restored before its kind was known holds whole dicts; a MapState keeps one
        entry per user key."""
        wb = self._batch()
        emptied = 0
        for kb, raw in self._scan(b"", DATA_END):
            if kb[2] != sid:
                continue
            wb.delete(kb)
            value = _loads(raw)
            if not value:
                emptied += 1
            for uk, v in value.items():
                wb.put(kb + key_bytes(uk), dumps(v))
        if emptied:
            self._count -= emptied
            wb.put(META_COUNT, _pack_u64(self._count))
        self._write(wb)
        self._forget_log()  # rewritten in place: the changelog cannot replay it

    def _migrate_values(self, sid: int, kind: str, migrate: Any, loads: Any = None) -> None:
        """Bring every restored value of one state to its declared schema (compatibility.py).
        With ``loads`` (the state's named tuples were pickled with older fields), every value is
        unpickled with it and written again, so that later reads need no remapping."""
        wb = self._batch()
        changed = 0
        first = loads is None
        loads = loads or _loads
        as_kind = "list" if kind == "list" else "value"  # a map entry is one value
        for kb, raw in self._scan(b"", DATA_END):
            if kb[2] != sid:
                continue
            value = loads(raw)
            if first:
                first = False
                if not worth_scanning(migrate, as_kind, value):
                    return
            new = value if migrate is None else migrate_value(as_kind, value, migrate)
            if new is not value or loads is not _loads:
                wb.put(kb, dumps(new))
                changed += 1
        if changed:
            self._write(wb)
            self._forget_log()  # rewritten in place: the changelog cannot replay it

    def remap_named_tuples(self, value_classes: dict[str, dict | None]) -> None:
        """The native files just restored into the DB hold, for each state, values of the named
        tuple class (and fields) ``value_classes`` records (``_metadata``): read the states
        whose class has other fields now through an unpickler that rebuilds them by field name
        (compatibility.py) until their registration rewrites them."""
        self._remap = {}
        for name, cls in value_classes.items():
            loads = remapping_loads([cls])
            if loads is not None:
                self._remap[name] = loads

    def value_class(self, name: str) -> dict | None:
        """The named tuple class and fields of state ``name``'s stored values, for ``_metadata``
        (compatibility.value_class): as restored while they are not rewritten yet, else from the
        first stored value (one seek per key group holding data before it; remembered once
        found)."""
        if name in self._remap:
            recorded = self.restored_states.get(name)
            return recorded.value_class if recorded is not None else None
        if name in self._value_classes:
            return self._value_classes[name]
        known = self._names.get(name)
        if known is None:
            return None
        sid, kind = known
        raw = self._first_value(sid)
        if raw is None:
            return None
        out = self._value_classes[name] = value_class("list" if kind == "list" else "value", _loads(raw))
        return out

    def _first_value(self, sid: int) -> bytes | None:
        from rocksdict import ReadOptions

        ro = ReadOptions()
        ro.set_iterate_upper_bound(DATA_END)
        it = self._require_db().iter(ro)
        sidb = bytes([sid])
        it.seek(key_group_prefix(0) + sidb)
        try:
            while it.valid():
                kb = it.key()
                if kb[2] == sid:
                    return it.value()
                it.seek(key_group_prefix(int.from_bytes(kb[0:2], "big") + (kb[2] > sid)) + sidb)
            return None
        finally:
            del it

    # -- state registration ------------------------------------------------------------------

    @property
    def kinds(self) -> dict[str, str]:
        """The kind of every state registered in this backend (in this process)."""
        return {name: t.kind for name, t in self._tables.items()}

    def get_partitioned_state(self, descriptor: StateDescriptor) -> Any:
        name = descriptor.name
        kind = descriptor.kind
        table = self._tables.get(name)
        check_redeclared(self, descriptor, None if table is None else table.kind)
        if table is None:
            self._require_db()
            known = self._names.get(name)
            recorded = self.restored_states.get(name)
            if known is not None and known[1] != UNKNOWN_KIND:  # the DB knows the declared kind
                recorded = Recorded(known[1], True, recorded.schema if recorded is not None else None)
            migrate = on_register(self, descriptor, recorded)
            sid = self._ensure_state(name, kind)
            remap = self._remap.get(name)
            if migrate is not None or remap is not None:
                self._migrate_values(sid, kind, migrate, remap)
                self._remap.pop(name, None)
                self._value_classes.pop(name, None)
            table = self._tables[name] = _Table(name, sid, kind, self)
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
        enc = self._enc[key] = (self._kg_bytes[group], _pack_u32(len(kb)) + kb + _EMPTY_NS)
        return enc

    def _db_key(self, table: _Table, key: Any) -> bytes:
        enc = self._enc.get(key)
        if enc is None:
            enc = self._encode(key)
        return enc[0] + table.sidb + enc[1]

    # -- epoch lifecycle -----------------------------------------------------------------------

    def _map_exists_after(self, mo: _MapOverlay) -> bool:
        for v in mo.entries.values():
            if v is not _ABSENT:
                return True
        if mo.complete:
            return False
        for kb in self._scan(mo.prefix, prefix_end(mo.prefix), keys_only=True):  # type: ignore[arg-type]
            if mo.entries.get(_loads(kb[len(mo.prefix) :]), _MISS) is not _ABSENT:  # type: ignore[arg-type]
                return True
        return False

    def _diff(self, encode_values: bool) -> RocksDBDelta:
        """The overlay against the DB: byte-level changes (values only if ``encode_values``)
        and the change in the number of (state, key) pairs."""
        out = RocksDBDelta()
        get = self._get
        for table in self._tables.values():
            touched = False
            if table.kind != "map":
                absent = _ABSENT
                cache, orig = table.cache, table.orig
                for key in table.dirty:
                    value = cache[key]
                    known = orig.get(key)
                    if known is None:  # written without being read: look the old value up
                        kb = self._db_key(table, key)
                        before = get(kb)
                        orig[key] = (kb, before)
                    else:
                        kb, before = known
                    if value is absent:
                        if before is None:
                            continue
                        out.deletes.append(kb)
                        out.key_count_change -= 1
                    else:
                        if encode_values:
                            try:
                                vb = _pickle_dumps(value, 5)
                            except Exception:
                                vb = dumps(value)
                            if vb == before:
                                continue
                            out.puts[kb] = vb
                        else:
                            out.puts[kb] = b""
                        if before is None:
                            out.key_count_change += 1
                    touched = True
            else:
                for key, mo in table.maps.items():
                    if not mo.dirty and not mo.cleared:
                        continue
                    if mo.prefix is None:
                        mo.prefix = self._db_key(table, key)
                    prefix = mo.prefix
                    existed = self._has_prefix(prefix)
                    if mo.cleared and existed:
                        out.prefix_deletes.append(prefix)
                        touched = True
                    for uk in mo.dirty:
                        value = mo.entries[uk]
                        ekb = prefix + key_bytes(uk)
                        if mo.cleared:
                            before = None
                        else:
                            before = mo.orig.get(uk, _MISS)
                            if before is _MISS:
                                before = mo.orig[uk] = get(ekb)
                        if value is _ABSENT:
                            if before is None:
                                continue
                            out.deletes.append(ekb)
                        else:
                            if type(value) is _Raw:
                                continue
                            if encode_values:
                                vb = dumps(value)
                                if vb == before:
                                    continue
                                out.puts[ekb] = vb
                            else:
                                out.puts[ekb] = b""
                        touched = True
                    out.key_count_change += self._map_exists_after(mo) - existed
            if touched:
                out.states[table.name] = (table.sid, table.kind)
        return out

    def delta(self) -> RocksDBDelta:
        """The changes of the current epoch (the overlay) as a picklable :class:`RocksDBDelta`."""
        return self._diff(True)

    def changed_values(self) -> Iterator[tuple[str, Any, Any]]:
        """``(state name, key, value)`` of every value written in the current epoch (what
        :meth:`delta` will pickle; a MapState entry's value as ``{user key: value}``): to name
        the one that cannot be pickled."""
        for table in self._tables.values():
            if table.kind != "map":
                absent = _ABSENT
                for key in table.dirty:
                    value = table.cache.get(key, absent)
                    if value is not absent:
                        yield table.name, key, value
                continue
            for key, mo in table.maps.items():
                for uk in mo.dirty:
                    value = mo.entries.get(uk, _ABSENT)
                    if value is not _ABSENT and type(value) is not _Raw:
                        yield table.name, key, {uk: value}

    def changed_keys(self) -> int:
        n = 0
        for table in self._tables.values():
            n += len(table.dirty)
            for mo in table.maps.values():
                if mo.dirty or mo.cleared:
                    n += 1
        return n

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
            remap: dict[int, bytes] = {}
            for name, (sid, kind) in delta.states.items():
                local = self._ensure_state(name, kind, sid, wb)
                if local != sid:
                    remap[sid] = bytes([local])
                table = self._tables.get(name)
                if table is not None and table.sid != local:  # pragma: no cover - defensive
                    table.sid, table.sidb = local, bytes([local])

            if remap:

                def fix(kb: bytes) -> bytes:
                    r = remap.get(kb[2])
                    return kb if r is None else kb[:2] + r + kb[3:]

            else:

                def fix(kb: bytes) -> bytes:
                    return kb

            for prefix in delta.prefix_deletes:
                prefix = fix(prefix)
                wb.delete_range(prefix, prefix_end(prefix))
            delete, put = wb.delete, wb.put
            if remap:
                for kb in delta.deletes:
                    delete(fix(kb))
                for kb, vb in delta.puts.items():
                    put(fix(kb), vb)
            else:
                for kb in delta.deletes:
                    delete(kb)
                for kb, vb in delta.puts.items():
                    put(kb, vb)
            if delta.key_count_change:
                self._count += delta.key_count_change
                wb.put(META_COUNT, _pack_u64(self._count))
        if version is not None:
            wb.put(META_VERSION, _pack_u64(version))
        if len(wb):
            self._write(wb)
        if version is not None:
            self._version = version
        if self._log is not None and delta:
            if version is None:
                self._forget_log()  # a change no version names: the log cannot say when it happened
            else:
                size = delta.nbytes()
                self._log.append((version, delta, size))
                self._log_bytes += size
                if self._log_bytes > CHANGELOG_MEMORY_BYTES:
                    self._forget_log()  # checkpoints have not completed for long: the next one materializes

    # -- the changelog ---------------------------------------------------------------------------

    def record_changes(self) -> None:
        """Keep every committed delta from now on (the changelog's source); the log is complete
        from the current version."""
        if self._log is None:
            self._log, self._log_from, self._log_bytes = [], self._version, 0

    def _forget_log(self) -> None:
        if self._log is not None:
            self._log, self._log_from, self._log_bytes = [], None, 0

    def changes_since(self, version: int) -> tuple[list[tuple[int, RocksDBDelta]], int] | None:
        """``(the committed deltas applied after version, in order, their bytes)``; None if the
        log does not hold all of them (not recording, started later, or forgotten). The deltas
        up to ``version`` go: a completed checkpoint holds them."""
        if self._log is None or self._log_from is None or not self._log_from <= version <= self._version:
            return None
        if version > self._log_from:
            self._log = [e for e in self._log if e[0] > version]
            self._log_bytes = sum(e[2] for e in self._log)
            self._log_from = version
        return [(v, d) for v, d, _size in self._log], self._log_bytes

    def materialized(self) -> None:
        """A snapshot of the DB as it is now was taken: a log forgotten earlier restarts here."""
        self.materialize_next = False
        if self._log is not None and self._log_from is None:
            self._log, self._log_from, self._log_bytes = [], self._version, 0

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

    def _committed_tables(self) -> dict[str, dict[Any, Any]]:
        names = {sid: (name, kind) for name, (sid, kind) in self._names.items()}
        value_loads = {sid: self._remap.get(name, _loads) for sid, (name, _kind) in names.items()}
        out: dict[str, dict[Any, Any]] = {}
        for kb, raw in self._scan(b"", DATA_END):
            _kg, sid, kbytes, _ns, ukb = parse_db_key(kb)
            name, kind = names.get(sid, (None, None))
            if name is None:  # pragma: no cover - data of an unregistered id
                continue
            table = out.setdefault(name, {})
            key = state_key(_loads(kbytes))
            if kind == "map":
                table.setdefault(key, {})[_loads(ukb)] = value_loads[sid](raw)
            else:
                table[key] = value_loads[sid](raw)
        return out

    def snapshot(self) -> dict[str, dict[Any, Any]]:
        """All state (committed DB content with the overlay on top): ``{state name: {key:
        value}}`` as the heap backend's snapshot (MapState values are dicts, ListState lists).
        O(state)."""
        out = self._committed_tables()
        for table in self._tables.values():
            if table.cache or table.maps:
                _overlay_onto(table, out.setdefault(table.name, {}))
        return {name: table for name, table in out.items() if table}

    def iter_entries(self, state_name: str) -> Iterator[tuple[Any, Any]]:
        """Every ``(key, value)`` of one state, the committed DB content with the overlay on top
        (MapState: the value is the key's dict; keys as stored, so a ``Row`` key comes back as a
        tuple). For rebuilding an in-memory index, such as a timer queue, when an operator opens.
        Costs one seek per key group holding the state plus one read per entry."""
        known = self._names.get(state_name)
        if known is None:
            return iter(())
        sid, kind = known
        entries = self._committed_entries(sid, kind)
        table = self._tables.get(state_name)
        if table is not None and (table.cache or table.maps):
            _overlay_onto(table, entries)
        return iter(list(entries.items()))

    def _committed_entries(self, sid: int, kind: str) -> dict[Any, Any]:
        """``{key: value}`` of one state id in the DB: one iterator that seeks from key group to
        key group, skipping the other states' ranges."""
        from rocksdict import ReadOptions

        ro = ReadOptions()
        ro.set_iterate_upper_bound(DATA_END)
        it = self._require_db().iter(ro)
        sidb = bytes([sid])
        out: dict[Any, Any] = {}
        loads = next((self._remap.get(name, _loads) for name, (s, _k) in self._names.items() if s == sid), _loads)
        it.seek(key_group_prefix(0) + sidb)
        while it.valid():
            kb = it.key()
            if kb[2] != sid:
                group = int.from_bytes(kb[0:2], "big") + (kb[2] > sid)
                it.seek(key_group_prefix(group) + sidb)
                continue
            _kg, _sid, kbytes, _ns, ukb = parse_db_key(kb)
            key = state_key(_loads(kbytes))
            if kind == "map":
                out.setdefault(key, {})[_loads(ukb)] = loads(it.value())
            else:
                out[key] = loads(it.value())
            it.next()
        del it
        return out

    def restore(self, tables: dict[str, dict[Any, Any]], kinds: dict[str, str] | None = None) -> None:
        """Replace the DB content with ``tables`` (heap snapshot format) and drop the overlay.

        The kind of each state comes from ``kinds``, from its declaration, or from the DB; a
        state of unknown kind is stored one entry per key and split into per-user-key entries
        if it is later declared as MapState."""
        self._require_db()
        self._drop_overlay()
        self._remap, self._value_classes = {}, {}
        wb = self._batch()
        wb.delete_range(b"", DATA_END)
        count = 0
        maxp = self.max_parallelism
        for name, table in tables.items():
            kind = (kinds or {}).get(name)
            if kind is None:
                known = self._names.get(name)
                kind = known[1] if known is not None else UNKNOWN_KIND
            sid = self._ensure_state(name, kind, batch=wb)
            sidb = bytes([sid])
            for key, value in table.items():
                kb = key_bytes(key)
                dbk = assign_to_key_group(key, maxp).to_bytes(2, "big") + sidb + _pack_u32(len(kb)) + kb + _EMPTY_NS
                if kind == "map":
                    if not value:
                        continue
                    for uk, v in value.items():
                        wb.put(dbk + key_bytes(uk), dumps(v))
                else:
                    if value is None and kind == "value" or kind == "list" and not value:
                        continue
                    wb.put(dbk, dumps(value))
                count += 1
        self._count = count
        wb.put(META_COUNT, _pack_u64(count))
        self._write(wb)
        self._forget_log()

    def _count_by_scan(self) -> int:
        names = {sid: kind for sid, kind in self._names.values()}
        count = 0
        last_map_prefix = None
        for kb in self._scan(b"", DATA_END, keys_only=True):
            if names.get(kb[2]) == "map":
                _kg, _sid, kbytes, ns, ukb = parse_db_key(kb)
                prefix = kb[: len(kb) - len(ukb)]
                if prefix == last_map_prefix:
                    continue
                last_map_prefix = prefix
            count += 1
        return count

    def keys_per_state(self) -> dict[str, int]:
        """Committed keys per state name, counted from the DB's key bytes (nothing is
        unpickled: safe on files from elsewhere, as ``flowpoint inspect`` needs). O(entries)."""
        names = {sid: (name, kind) for name, (sid, kind) in self._names.items()}
        counts: dict[str, int] = {}
        last_map_prefix = None
        for kb in self._scan(b"", DATA_END, keys_only=True):
            name, kind = names.get(kb[2], (None, None))
            if name is None:
                continue
            if kind == "map":
                _kg, _sid, _kbytes, _ns, ukb = parse_db_key(kb)
                prefix = kb[: len(kb) - len(ukb)]
                if prefix == last_map_prefix:
                    continue
                last_map_prefix = prefix
            counts[name] = counts.get(name, 0) + 1
        return counts

    def num_keys(self) -> int:
        """Number of (state, key) pairs with state, overlay included (as the heap backend's).
        O(keys changed in this epoch): the committed count is kept in the DB."""
        if self._db is None:
            _closed_get()
        if not any(t.dirty or t.maps for t in self._tables.values()):
            return self._count
        return self._count + self._diff(False).key_count_change

    # -- checkpoints ---------------------------------------------------------------------------

    def create_checkpoint(self, target_dir: str) -> list[tuple[str, int]]:
        """A RocksDB checkpoint (hard links) of the committed DB in ``target_dir`` (which must
        not exist); returns ``[(file name, size)]`` of every file in it. SST file names are
        unique within one DB's history, so a name a previous checkpoint listed with the same
        size is the same file (incremental upload)."""
        from rocksdict import Checkpoint

        db = self._require_db()
        if os.path.exists(target_dir):
            msg = f"checkpoint directory {target_dir} already exists"
            raise StateAccessError(msg)
        private_files.makedirs(os.path.dirname(os.path.abspath(target_dir)))
        if self._unflushed:
            db.flush(True)
            self._unflushed = False
        Checkpoint(db).create_checkpoint(target_dir)
        os.chmod(target_dir, private_files.DIR_MODE)  # RocksDB creates it with the umask's mode
        return sorted((name, os.path.getsize(os.path.join(target_dir, name))) for name in os.listdir(target_dir))

    @staticmethod
    def restore_files(db_path: str, source_dir: str, replace: bool = False) -> None:
        """Make ``db_path`` a DB from a checkpoint directory: SST files are hard-linked when the
        file system allows (they are immutable), everything else is copied. ``db_path`` must not
        exist or be empty unless ``replace``."""
        if not os.path.isfile(os.path.join(source_dir, "CURRENT")):
            msg = f"{source_dir} is not a RocksDB checkpoint (no CURRENT file)"
            raise StateAccessError(msg)
        if os.path.exists(db_path) and os.listdir(db_path):
            if not replace:
                msg = f"cannot restore RocksDB state into {db_path}: the directory is not empty"
                raise StateAccessError(msg)
            shutil.rmtree(db_path)
        tmp = db_path.rstrip(os.sep) + ".restoring"
        shutil.rmtree(tmp, ignore_errors=True)
        private_files.makedirs(tmp)
        for name in os.listdir(source_dir):
            src = os.path.join(source_dir, name)
            dst = os.path.join(tmp, name)
            if name.endswith((".sst", ".blob")):
                try:
                    os.link(src, dst)
                    continue
                except OSError:
                    pass
            shutil.copy2(src, dst)
        if os.path.isdir(db_path):
            os.rmdir(db_path)
        os.replace(tmp, db_path)


def _overlay_onto(table: _Table, target: dict[Any, Any]) -> None:
    """Apply one state's overlay to ``target`` (``{key: value}`` read from the DB)."""
    if table.kind != "map":
        absent = _ABSENT
        for key, value in table.cache.items():
            if value is absent:
                target.pop(key, None)
            else:
                target[key] = value
        return
    for key, mo in table.maps.items():
        current = {} if mo.cleared else target.get(key, {})
        for uk, value in mo.entries.items():
            if value is _ABSENT:
                current.pop(uk, None)
            else:
                current[uk] = _loads(value.raw) if type(value) is _Raw else value
        if current:
            target[key] = current
        else:
            target.pop(key, None)


# -- state objects -------------------------------------------------------------------------------


__all__ = ["RocksDBDelta", "RocksDBKeyedStateBackend", "key_bytes", "key_group_prefix", "parse_db_key", "prefix_end"]
