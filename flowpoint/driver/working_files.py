"""A job's working files (driver side): where they live, the job's lock, and removing them.

Working state lives per run (``<job id>/run-<n>``; a restart begins run n+1 from a checkpoint)
in executor-local directories under ``state.working.dir`` and, durable, under the durable root
(flowpoint/partition/durable.py). The driver holds the job's lock file in its working directory
while the job runs; a run that restored another run's checkpoint removes what that run left
behind if its process died without removing it.
"""

from __future__ import annotations

import contextlib
import logging
import os
from typing import Any

from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.part_writer import join
from flowpoint.partition import durable
from flowpoint.partition.protocol import StateLocation
from flowpoint.partition.working import (
    JobLock,
    claim_leftovers,
    ensure_working_dir,
    lock_path,
    remove_job_dir,
    resolve_working_dir,
)
from flowpoint.spark.adapter_choice import adapter_for
from flowpoint.state.rocksdb import RocksDBMemory

log = logging.getLogger("flowpoint")


class WorkingFiles:
    def __init__(self, config: Any, job_id: str, spark: Any):
        self.config = config
        self.job_id = job_id
        self.spark = spark
        # state.working.dir, else a per-user default that each process (driver, executor) finds
        # itself; created private (0700) and checked when the job starts (partition/working.py)
        self.configured = config.get("state.working.dir") or None
        self.working_dir = resolve_working_dir(self.configured)
        self.durable_root = ""
        self.storage_options: dict[str, str] = {}
        self.settings: Any = None  # CheckpointSettings, from open()
        self.run = 0  # this run's number: how many times the job restarted
        self.state_jobs = 0  # Spark jobs besides the job's own run over its state (savepoints, reads)
        self._lock: JobLock | None = None

    def open(self, settings: Any, storage_options: dict[str, str]) -> None:
        """The job starts: its working directory (checked), its lock, its durable root."""
        self.settings = settings
        self.storage_options = storage_options
        self.working_dir = ensure_working_dir(self.configured)
        self._lock = JobLock(self.working_dir, self.job_id)
        self.durable_root = durable_root(self.config, settings, self.job_id, self.working_dir, _on_a_cluster(self.spark))
        _check_remote_dir(self.config, self.durable_root, storage_options)
        if self.durable_root == os.path.join(self.working_dir, "durable"):
            _warn_unshared(self.spark, self.durable_root)

    @property
    def options(self) -> tuple[tuple[str, str], ...]:
        return tuple(sorted(self.storage_options.items()))

    @property
    def run_key(self) -> str:
        """Names this run's working state (a restart begins a new run from a checkpoint)."""
        return f"{self.job_id}/run-{self.run}"

    def location(self) -> StateLocation:
        """Where this run's working state lives (shipped to every task)."""
        s = self.settings
        return StateLocation(
            self.run_key, self.working_dir if self.configured else "", self.durable_root, s.backend,
            self.options, bool(s.incremental), self._changelog(), float(s.changelog_max_ratio), int(s.changelog_max_parts),
            RocksDBMemory.from_config(self.config).fields() if s.backend == "rocksdb" else (),
            bool(s.enabled and s.storage == "filesystem" and s.backend == "rocksdb" and s.rocksdb_changelog), int(s.materialize_interval_ms),
        )

    def _changelog(self) -> bool:
        """Whether HashMap checkpoints may be changelogs (their tasks then track changed keys)."""
        s = self.settings
        return bool(s.enabled and s.storage == "filesystem" and s.backend == "hashmap" and s.changelog_max_ratio > 0)

    def next_run(self) -> None:
        """A restart: the failed run's working files go; the next run has its own."""
        durable.delete_tree(join(self.durable_root, self.run_key), self.options)
        remove_job_dir(self.working_dir, self.run_key)
        self.run += 1

    # -- removing ------------------------------------------------------------------------------

    def remove_local_state(self, job_id: str | None = None, executors: bool = True) -> None:
        """The job ended: its executor-local working files and cached state go, on every host
        (a task per executor core; durable files stay for get_keyed_state until exit); without
        ``executors`` (the continuous slots removed theirs) only the driver's host's files."""
        if executors:
            try:
                adapter_for(self.spark).remove_local_state(self.location(), job_id or self.job_id)
            except Exception:  # noqa: BLE001 - Spark may be stopping; local files are a cache
                log.debug("could not remove the local working state of job %s", job_id or self.job_id, exc_info=True)
        remove_job_dir(self.working_dir, job_id or self.job_id)

    def remove_leftovers_of(self, predecessor: str | None) -> bool:
        """After a run restored from another run's checkpoint (``--resume``, ``-s``): if that run
        was killed on this host (its lock file is there and no process holds it), its working
        files go too: local files on the driver and every executor, and its durable files.
        True when there were such files."""
        if not predecessor or not claim_leftovers(self.working_dir, predecessor):
            return False
        self.remove_local_state(predecessor)
        self.remove_durable_state(predecessor)
        return True

    def remove_durable_state(self, job_id: str | None = None) -> None:
        """The durable working files of this job (at exit), or of ``job_id``, and its lock file."""
        job_id = job_id or self.job_id
        options = self.options
        root = self.durable_root if job_id == self.job_id else durable_root(self.config, self.settings, job_id, self.working_dir, _on_a_cluster(self.spark))
        durable.delete_tree(join(root, job_id), options)
        if root.endswith(f"/{job_id}/taskowned"):  # inside the job's checkpoint directory
            durable.delete_tree(root, options)
            durable.remove_empty_dir(root.rsplit("/", 1)[0])
        remove_job_dir(self.working_dir, job_id)
        if job_id == self.job_id and self._lock is not None:
            self._lock.release(remove=True)
        else:
            with contextlib.suppress(OSError):
                os.remove(lock_path(self.working_dir, job_id))

    def release(self) -> None:
        """The job ended: release its lock (the lock file stays until the durable files go at exit)."""
        if self._lock is not None:
            self._lock.release()


def durable_root(config: Any, settings: Any, job_id: str, working_dir: str, cluster: bool = False) -> str:
    """Where committed working state is durable (see flowpoint/partition/durable.py):
    ``state.working.remote-dir``; else, under the checkpoint directory when it is remote or the
    job runs on a cluster (Flink's rule: every process sees the checkpoint directory, a
    ``file://`` one on a cluster being a shared mount); else the local working directory."""
    remote = config.get("state.working.remote-dir")
    if remote:
        return str(remote) if "://" in str(remote) else os.path.abspath(str(remote))
    chk = settings.checkpoints_dir if settings.storage == "filesystem" else None
    if chk and (cluster or not durable.is_local(str(chk))):
        chk = str(chk)
        if "://" not in chk:
            chk = os.path.abspath(chk)
        return join(chk, job_id, "taskowned")
    return os.path.join(working_dir, "durable")


def _on_a_cluster(spark: Any) -> bool:
    """Executors on other hosts: any master but ``local*`` (``local-cluster`` runs on this host)."""
    if spark is None:
        return False

    return adapter_for(spark).on_a_cluster()


def _check_remote_dir(config: Any, root: str, options: dict) -> None:
    """A local ``state.working.remote-dir`` must be safe from other users (who could delete or
    replace durable state): created 0700 if missing, else refused (InsecurePathError) when
    another user owns it or can write it, unless security.trust-shared-directories is true."""
    if config.get("state.working.remote-dir") and durable.is_local(root):
        CheckpointStorageAccess(root, options).check_trusted("remote working directory", "state.working.remote-dir", create=True)


def _warn_unshared(spark: Any, root: str) -> None:
    adapter = adapter_for(spark)
    master = adapter.describe()
    if durable.is_local(root) and adapter.on_a_cluster():
        log.warning(
            "working state is kept durable in the local directory %s while Spark runs on %s: this is only correct "
            "if every executor sees the same directory. On several hosts set state.checkpoints.dir to a directory "
            "every process sees (s3://, hdfs://, a shared file:// mount) or state.working.remote-dir (a task that "
            "cannot find its state fails the job)",
            root, master,
        )
