"""Opening a RocksDB directory for the RocksDB backend (flowpoint/state/rocksdb.py): the DB's
options (universal compaction, the slot's shared memory budget), the write options (no WAL),
the lock retry, and RocksDB's own figures as metrics.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from flowpoint import private_files
from flowpoint.errors import JobExecutionError, StateAccessError
from flowpoint.worker_resources import worker

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




def open_db(db_path: str, memory: RocksDBMemory, timeout: float, operator_name: str) -> tuple[Any, Any]:
    """Open (or create) the DB at ``db_path``: ``(the DB, its write options, set)``. A DB locked
    by another process (or another open backend) is retried for ``timeout`` seconds."""
    # lazy: rocksdict (the native library) only where a RocksDB backend opens
    from rocksdict import Rdict

    parent = os.path.dirname(os.path.abspath(db_path))
    private_files.makedirs(parent)
    options = _options(memory)
    deadline = time.monotonic() + timeout
    delay = 0.01
    while True:
        try:
            db = Rdict(db_path, options)
            break
        except Exception as e:  # rocksdict raises plain Exception
            if not _is_lock_error(e):
                msg = f"cannot open the RocksDB state of operator {operator_name!r} at {db_path}: {e}"
                raise StateAccessError(msg) from e
            left = deadline - time.monotonic()
            if left <= 0:
                msg = (
                    f"the RocksDB state directory {db_path} of operator {operator_name!r} is "
                    f"locked by another process (or another open backend) and was not released within "
                    f"{timeout:g} s: {e}"
                )
                raise JobExecutionError(msg) from e  # recoverable: a retry may find it released
            time.sleep(min(delay, left))
            delay = min(delay * 2, 0.5)
    if os.name == "posix":
        os.chmod(db_path, 0o700)  # RocksDB creates its files with the umask's mode: close the directory
    write_options = _write_options()
    db.set_write_options(write_options)
    return db, write_options


def native_metrics(db: Any) -> dict[str, float]:
    """RocksDB's own figures of ``db`` (None: closed), by the names of Flink's
    ``state.backend.rocksdb.metrics.*`` (``rocksdb.block-cache-usage``, ...), plus
    ``rocksdb.live-sst-files`` (flowpoint's: the number of live SST files). Cheap (a few
    property reads, microseconds); safe from another thread: a DB closed meanwhile gives {}."""
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
