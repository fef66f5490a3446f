"""State time-to-live: ``StateTtlConfig``, named and built as in PyFlink.

    ttl = StateTtlConfig.new_builder(Time.seconds(60)) \\
        .set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite) \\
        .set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired) \\
        .build()
    descriptor.enable_time_to_live(ttl)

A value (a list element, a map entry) carries the processing time it was last written (and, with
``OnReadAndWrite``, read); ``ttl`` after that it has expired. An expired value is never returned
with ``NeverReturnExpired``; with ``ReturnExpiredIfNotCleanedUp`` it is returned until it is
cleaned up. Cleanup removes expired values: on every access of the key, and in the background
after every epoch (incremental: ``cleanup_size`` entries per state and record processed, or a full
pass with ``cleanup_full_snapshot()``), so the next checkpoint and savepoint no longer hold them.
Time is the epoch's processing time (docs/architecture.md, section 4), the same in every task of an epoch and in a
retried task, so expiry is deterministic. ``flowpoint/state/ttl.py`` implements it over both
backends.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from flowpoint.api.time import Duration, Time, to_millis
from flowpoint.errors import ConfigurationError


class StateTtlConfig:
    class UpdateType(Enum):
        Disabled = 0
        OnCreateAndWrite = 1
        OnReadAndWrite = 2

    class StateVisibility(Enum):
        ReturnExpiredIfNotCleanedUp = 0
        NeverReturnExpired = 1

    class TtlTimeCharacteristic(Enum):
        ProcessingTime = 0

    def __init__(self, update_type: StateTtlConfig.UpdateType, state_visibility: StateTtlConfig.StateVisibility,
                 ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic, ttl: Time | Duration | int,
                 cleanup_strategies: StateTtlConfig.CleanupStrategies):
        self._update_type = update_type
        self._state_visibility = state_visibility
        self._ttl_time_characteristic = ttl_time_characteristic
        self._ttl = ttl
        self._cleanup_strategies = cleanup_strategies
        self.ttl_ms = to_millis(ttl, "the state TTL")
        if self.ttl_ms <= 0:
            msg = f"the state TTL must be positive; got {self.ttl_ms} ms"
            raise ConfigurationError(msg)

    @staticmethod
    def new_builder(ttl: Time | Duration | int) -> StateTtlConfig.Builder:
        return StateTtlConfig.Builder(ttl)

    def get_update_type(self) -> StateTtlConfig.UpdateType:
        return self._update_type

    def get_state_visibility(self) -> StateTtlConfig.StateVisibility:
        return self._state_visibility

    def get_ttl(self) -> Any:
        return self._ttl

    def get_ttl_time_characteristic(self) -> StateTtlConfig.TtlTimeCharacteristic:
        return self._ttl_time_characteristic

    def is_enabled(self) -> bool:
        return self._update_type is not StateTtlConfig.UpdateType.Disabled

    def get_cleanup_strategies(self) -> StateTtlConfig.CleanupStrategies:
        return self._cleanup_strategies

    @property
    def update_on_read(self) -> bool:
        return self._update_type is StateTtlConfig.UpdateType.OnReadAndWrite

    @property
    def return_expired(self) -> bool:
        return self._state_visibility is StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp

    def __repr__(self) -> str:
        return (f"StateTtlConfig<update_type={self._update_type}, state_visibility={self._state_visibility}, "
                f"ttl_time_characteristic={self._ttl_time_characteristic}, ttl={self.ttl_ms} ms>")

    class Builder:
        def __init__(self, ttl: Time | Duration | int):
            self._ttl = ttl
            self._update_type = StateTtlConfig.UpdateType.OnCreateAndWrite
            self._state_visibility = StateTtlConfig.StateVisibility.NeverReturnExpired
            self._ttl_time_characteristic = StateTtlConfig.TtlTimeCharacteristic.ProcessingTime
            self._is_cleanup_in_background = True
            self._strategies: dict[StateTtlConfig.CleanupStrategies.Strategies, Any] = {}

        def set_update_type(self, update_type: StateTtlConfig.UpdateType) -> StateTtlConfig.Builder:
            self._update_type = update_type
            return self

        def update_ttl_on_create_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnCreateAndWrite)

        def update_ttl_on_read_and_write(self) -> StateTtlConfig.Builder:
            return self.set_update_type(StateTtlConfig.UpdateType.OnReadAndWrite)

        def set_state_visibility(self, state_visibility: StateTtlConfig.StateVisibility) -> StateTtlConfig.Builder:
            self._state_visibility = state_visibility
            return self

        def return_expired_if_not_cleaned_up(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.ReturnExpiredIfNotCleanedUp)

        def never_return_expired(self) -> StateTtlConfig.Builder:
            return self.set_state_visibility(StateTtlConfig.StateVisibility.NeverReturnExpired)

        def set_ttl_time_characteristic(self, ttl_time_characteristic: StateTtlConfig.TtlTimeCharacteristic) -> StateTtlConfig.Builder:
            self._ttl_time_characteristic = ttl_time_characteristic
            return self

        def use_processing_time(self) -> StateTtlConfig.Builder:
            return self.set_ttl_time_characteristic(StateTtlConfig.TtlTimeCharacteristic.ProcessingTime)

        def cleanup_full_snapshot(self) -> StateTtlConfig.Builder:
            """Remove every expired value after each epoch (a full pass over the state), so no
            checkpoint or savepoint holds one."""
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT] = StateTtlConfig.CleanupStrategies.EMPTY_STRATEGY
            return self

        def cleanup_incrementally(self, cleanup_size: int, run_cleanup_for_every_record: bool) -> StateTtlConfig.Builder:
            """After each epoch, check ``cleanup_size`` entries per record the operator processed
            (with ``run_cleanup_for_every_record`` False: ``cleanup_size`` per epoch)."""
            if not isinstance(cleanup_size, int) or cleanup_size < 1:
                msg = f"cleanup_incrementally() needs a positive cleanup_size; got {cleanup_size!r}"
                raise ConfigurationError(msg)
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.INCREMENTAL_CLEANUP] = \
                StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy(cleanup_size, run_cleanup_for_every_record)
            return self

        def cleanup_in_rocksdb_compact_filter(self, query_time_after_num_entries: int, periodic_compaction_time: Duration | None = None) -> StateTtlConfig.Builder:
            """RocksDB: flowpoint cleans up the same way on both backends (incrementally after each
            epoch); the numbers are kept and returned."""
            self._strategies[StateTtlConfig.CleanupStrategies.Strategies.ROCKSDB_COMPACTION_FILTER] = \
                StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy(query_time_after_num_entries, periodic_compaction_time)
            return self

        def disable_cleanup_in_background(self) -> StateTtlConfig.Builder:
            """Expired values are then removed only when their key is accessed (and never
            returned with NeverReturnExpired)."""
            self._is_cleanup_in_background = False
            return self

        def set_ttl(self, ttl: Time | Duration | int) -> StateTtlConfig.Builder:
            self._ttl = ttl
            return self

        def build(self) -> StateTtlConfig:
            return StateTtlConfig(self._update_type, self._state_visibility, self._ttl_time_characteristic, self._ttl,
                                  StateTtlConfig.CleanupStrategies(self._strategies, self._is_cleanup_in_background))

    class CleanupStrategies:
        class Strategies(Enum):
            FULL_STATE_SCAN_SNAPSHOT = 0
            INCREMENTAL_CLEANUP = 1
            ROCKSDB_COMPACTION_FILTER = 2

        class CleanupStrategy:
            pass

        class EmptyCleanupStrategy(CleanupStrategy):
            pass

        class IncrementalCleanupStrategy(CleanupStrategy):
            def __init__(self, cleanup_size: int, run_cleanup_for_every_record: bool):
                self._cleanup_size = cleanup_size
                self._run_cleanup_for_every_record = run_cleanup_for_every_record

            def get_cleanup_size(self) -> int:
                return self._cleanup_size

            def run_cleanup_for_every_record(self) -> bool:
                return self._run_cleanup_for_every_record

        class RocksdbCompactFilterCleanupStrategy(CleanupStrategy):
            def __init__(self, query_time_after_num_entries: int, periodic_compaction_time: Duration | None = None):
                self._query_time_after_num_entries = query_time_after_num_entries
                self._periodic_compaction_time = periodic_compaction_time

            def get_query_time_after_num_entries(self) -> int:
                return self._query_time_after_num_entries

            def get_periodic_compaction_time(self) -> Duration | None:
                return self._periodic_compaction_time

        EMPTY_STRATEGY = EmptyCleanupStrategy()

        def __init__(self, strategies: dict, is_cleanup_in_background: bool):
            self._strategies = dict(strategies)
            self._is_cleanup_in_background = is_cleanup_in_background

        def is_cleanup_in_background(self) -> bool:
            return self._is_cleanup_in_background

        def in_full_snapshot(self) -> bool:
            return StateTtlConfig.CleanupStrategies.Strategies.FULL_STATE_SCAN_SNAPSHOT in self._strategies

        def get_incremental_cleanup_strategy(self) -> Any:
            s = self._strategies.get(StateTtlConfig.CleanupStrategies.Strategies.INCREMENTAL_CLEANUP)
            if s is None and self._is_cleanup_in_background:
                return StateTtlConfig.CleanupStrategies.IncrementalCleanupStrategy(5, False)  # Flink's default
            return s

        def get_rocksdb_compact_filter_cleanup_strategy(self) -> Any:
            s = self._strategies.get(StateTtlConfig.CleanupStrategies.Strategies.ROCKSDB_COMPACTION_FILTER)
            if s is None and self._is_cleanup_in_background:
                return StateTtlConfig.CleanupStrategies.RocksdbCompactFilterCleanupStrategy(1000)
            return s
