"""``/jobs/:jid/checkpoints`` and ``/jobs/:jid/checkpoints/config`` in the shapes of Flink's
``CheckpointingStatistics`` and ``CheckpointConfigInfo``.

Savepoints are in the same history as checkpoints (ids are shared), with ``is_savepoint`` true,
``checkpoint_type`` ``SAVEPOINT`` (``SYNC_SAVEPOINT`` for a stop-with-savepoint's) and their
directory as ``external_path``. ``checkpointed_size`` is what the checkpoint wrote (its
incremental size); there is no alignment, so ``alignment_buffered``, ``processed_data`` and
``persisted_data`` are 0. Each history entry's ``flowpoint`` object has the synchronous and
asynchronous durations, the incremental size and the epoch it was taken after.
"""

from __future__ import annotations

from typing import Any

from flowpoint.clock import now_ms
from flowpoint.control.rest.stats import summary

HISTORY_SIZE = 10  # Flink's web.checkpoints.history
DISABLED_INTERVAL = 9223372036854775807  # Flink's interval of a job without periodic checkpoints
TYPES = {"checkpoint": "CHECKPOINT", "savepoint": "SAVEPOINT", "stop": "SYNC_SAVEPOINT"}
CLASS_NAMES = {"COMPLETED": "completed", "FAILED": "failed"}
BACKENDS = {"hashmap": "HashMapStateBackend", "rocksdb": "EmbeddedRocksDBStateBackend"}
STORAGES = {"filesystem": "FileSystemCheckpointStorage", "jobmanager": "JobManagerCheckpointStorage"}


def _end_to_end(st: Any, now: int) -> int:
    if st.status == "IN_PROGRESS":
        return max(0, now - st.trigger_time_ms)
    return int(st.end_to_end_ms)


def history_entry(st: Any, discarded: bool, now: int, unit: str = "epoch") -> dict:
    """One checkpoint or savepoint (Flink's ``CheckpointStatistics`` and its completed and
    failed kinds)."""
    savepoint = st.kind != "checkpoint"
    end_to_end = _end_to_end(st, now)
    entry: dict[str, Any] = {
        "className": CLASS_NAMES.get(st.status, "in_progress"), "id": st.checkpoint_id, "status": st.status,
        "is_savepoint": savepoint, "savepointFormat": "CANONICAL" if savepoint else None,
        "trigger_timestamp": st.trigger_time_ms,
        "latest_ack_timestamp": st.trigger_time_ms + end_to_end if st.tasks_acknowledged else -1,
        "state_size": st.state_size, "checkpointed_size": st.incremental_size, "end_to_end_duration": end_to_end,
        "alignment_buffered": 0, "processed_data": 0, "persisted_data": 0,
        "num_subtasks": st.tasks_total, "num_acknowledged_subtasks": st.tasks_acknowledged,
        "checkpoint_type": TYPES.get(st.kind, "CHECKPOINT"), "tasks": {},
        "flowpoint": {
            "sync_duration": round(st.sync_ms), "async_duration": round(st.async_ms),
            "incremental_size": st.incremental_size, "epoch": st.epoch, "unit": unit,
            **({"segment": st.epoch} if unit == "segment" else {}),
        },
    }
    if st.status == "COMPLETED":
        entry["external_path"] = st.path
        entry["discarded"] = discarded
    elif st.status == "FAILED":
        entry["failure_timestamp"] = st.trigger_time_ms + end_to_end
        entry["failure_message"] = st.failure_reason
    return entry


def _discarded(stats: list, settings: Any, state: str) -> set[int]:
    """Ids of completed checkpoints whose files are gone: subsumed by newer ones beyond
    ``state.checkpoints.num-retained``, or all of them once the job ended in a state whose
    checkpoints are not kept. Savepoints are the user's: never."""
    done = [s.checkpoint_id for s in stats if s.kind == "checkpoint" and s.status == "COMPLETED"]
    if settings is None:
        return set()
    keep_none = state == "FINISHED" or (state == "CANCELED" and settings.retention != "RETAIN_ON_CANCELLATION")
    if keep_none and settings.storage == "filesystem":
        return set(done)
    return set(done[:-settings.num_retained]) if settings.num_retained > 0 else set(done)


def _restored(client: Any) -> tuple[int, dict | None]:
    restores = client.get_restore_history()
    if not restores:
        return 0, None
    r = restores[-1]
    return len(restores), {"id": r.checkpoint_id, "restore_timestamp": r.timestamp_ms, "is_savepoint": r.is_savepoint, "external_path": r.path}


def checkpointing_statistics(client: Any) -> dict:
    """``GET /jobs/:jid/checkpoints``."""
    now = now_ms()
    stats = sorted([*client.get_checkpoint_stats(), *client.get_savepoint_stats()], key=lambda s: s.checkpoint_id)
    discarded = _discarded(stats, client.get_checkpoint_settings(), client.get_job_status().value)
    unit = "segment" if client.get_runtime() == "continuous" else "epoch"
    entries = [history_entry(s, s.checkpoint_id in discarded, now, unit) for s in stats]
    done = [(s, e) for s, e in zip(stats, entries, strict=True) if s.status == "COMPLETED"]
    restored_count, restored = _restored(client)

    def latest(pick: Any) -> dict | None:
        found = [e for s, e in zip(stats, entries, strict=True) if pick(s)]
        return found[-1] if found else None

    return {
        "counts": {
            "restored": restored_count, "total": len(stats),
            "in_progress": sum(1 for s in stats if s.status == "IN_PROGRESS"),
            "completed": len(done), "failed": sum(1 for s in stats if s.status == "FAILED"),
        },
        "summary": {
            "checkpointed_size": summary([s.incremental_size for s, _ in done]),
            "state_size": summary([s.state_size for s, _ in done]),
            "end_to_end_duration": summary([e["end_to_end_duration"] for _, e in done]),
            "alignment_buffered": summary([0 for _ in done]),
            "processed_data": summary([0 for _ in done]),
            "persisted_data": summary([0 for _ in done]),
            "flowpoint": {
                "sync_duration": summary([s.sync_ms for s, _ in done]),
                "async_duration": summary([s.async_ms for s, _ in done]),
                "incremental_size": summary([s.incremental_size for s, _ in done]),
            },
        },
        "latest": {
            "completed": latest(lambda s: s.status == "COMPLETED" and s.kind == "checkpoint"),
            "savepoint": latest(lambda s: s.status == "COMPLETED" and s.kind != "checkpoint"),
            "failed": latest(lambda s: s.status == "FAILED"),
            "restored": restored,
        },
        "history": list(reversed(entries))[:HISTORY_SIZE],
    }


def checkpoint_config(client: Any) -> dict | None:
    """``GET /jobs/:jid/checkpoints/config``; None until the job runs (its settings are
    resolved when it starts)."""
    s = client.get_checkpoint_settings()
    if s is None:
        return None
    changelog = bool(getattr(s, "rocksdb_changelog", False)) and s.backend == "rocksdb"
    return {
        "mode": s.mode, "interval": s.interval_ms if s.enabled else DISABLED_INTERVAL,
        "timeout": s.timeout_ms, "min_pause": s.min_pause_ms, "max_concurrent": s.max_concurrent,
        "externalization": {
            "enabled": s.retention != "NO_EXTERNALIZED_CHECKPOINTS",
            "delete_on_cancellation": s.retention == "DELETE_ON_CANCELLATION",
        },
        "state_backend": BACKENDS.get(s.backend, s.backend), "checkpoint_storage": STORAGES.get(s.storage, s.storage),
        "unaligned_checkpoints": bool(getattr(s, "unaligned", False)), "tolerable_failed_checkpoints": s.tolerable_failures,
        "aligned_checkpoint_timeout": int(getattr(s, "aligned_timeout_ms", 0)), "checkpoints_after_tasks_finish": True, "state_changelog_enabled": changelog,
        "changelog_periodic_materialization_interval": int(getattr(s, "materialize_interval_ms", 0)) if changelog else 0,
        "changelog_storage": "filesystem" if changelog else "",
        "flowpoint": {
            "enabled": s.enabled, "runtime": client.get_runtime(), "checkpoints-dir": s.checkpoints_dir,
            "savepoints-dir": s.savepoints_dir, "retained": s.num_retained, "incremental": s.incremental,
        },
    }
