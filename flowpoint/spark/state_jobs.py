"""Spark jobs over a job's committed state, between epochs or after the job: each task takes one
stateful partition, finds (or rebuilds) its committed state on its executor and acts on it
there. The driver receives handles or the answer to a query, never the whole state.

- :func:`write_savepoint_parts`: every partition writes its canonical Parquet part into the
  savepoint directory and returns the part's entry for ``_metadata``;
- :func:`read_keyed_state`: one operator's committed state (``get_keyed_state``);
- :func:`remove_local_state`: the job's executor-local working files and cached state go.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from typing import Any

from flowpoint.checkpoint.savepoint import write_parts
from flowpoint.partition.backend import state_schemas
from flowpoint.partition.committed_chain import CommittedChain
from flowpoint.partition.factory import partition_backend
from flowpoint.partition.protocol import StateLocation
from flowpoint.partition.working import resolve_working_dir, task_states


@dataclass(frozen=True)
class StatePartition:
    stage_id: int
    partition: int
    chain: CommittedChain
    uids: tuple[str, ...]
    max_parallelism: int
    key_group_start: int = 0
    key_group_end: int = 0


def _run(sc: Any, items: list[StatePartition], task: Any, description: str) -> list:
    if not items:
        return []
    sc.setJobDescription(description)
    rdd = sc.parallelize(items, len(items))
    return rdd.mapPartitions(task).collect()


def _with_state(location: StateLocation, action: Any):
    def task(iterator: Any):
        out = []
        for item in iterator:
            backend = partition_backend(location, item.max_parallelism)
            ts, _fresh = backend.acquire(item.stage_id, item.partition, item.chain, list(item.uids))
            try:
                tables, kinds = backend.committed_tables(ts, list(item.uids))
                schemas = {uid: state_schemas(ts.backends[uid]) for uid in item.uids if uid in ts.backends}
                out.extend(action(item, tables, kinds, schemas))
            finally:
                backend.release(ts)
        return iter(out)

    return task


def savepoint_task(location: StateLocation, savepoint_uri: str):
    """The task of :func:`write_savepoint_parts` (either adapter runs it)."""
    options = location.options

    def action(item: StatePartition, tables: dict, kinds: dict, schemas: dict) -> list:
        return write_parts(savepoint_uri, options, list(item.uids), item.partition, item.key_group_start, item.key_group_end, tables, kinds,
                           schemas, item.max_parallelism)

    return _with_state(location, action)


def write_savepoint_parts(sc: Any, location: StateLocation, items: list[StatePartition], savepoint_uri: str) -> list[tuple[str, Any, dict]]:
    """``[(uid, SubtaskState, state counts)]`` of every part written below ``savepoint_uri``."""
    return _run(sc, items, savepoint_task(location, savepoint_uri), f"flowpoint savepoint parts to {savepoint_uri}")


def read_state_task(location: StateLocation, uid: str):
    """The task of :func:`read_keyed_state`: each partition's ``{state name: {key: value}}``."""

    def action(item: StatePartition, tables: dict, kinds: dict, schemas: dict) -> list:
        return [tables.get(uid, {})]

    return _with_state(location, action)


def merge_tables(answers: list[dict]) -> dict[str, dict]:
    merged: dict[str, dict] = {}
    for tables in answers:
        for name, table in tables.items():
            merged.setdefault(name, {}).update(table)
    return merged


def read_keyed_state(sc: Any, location: StateLocation, items: list[StatePartition], uid: str) -> dict[str, dict]:
    """``{state name: {key: value}}`` of operator ``uid``, read where its partitions are."""
    return merge_tables(_run(sc, items, read_state_task(location, uid), f"flowpoint read keyed state of {uid}"))


def remove_task(location: StateLocation, job_id: str):
    """The task of :func:`remove_local_state`: 1 when it removed something where it ran."""
    local_dir = location.local_dir

    def task(iterator: Any):
        list(iterator)
        task_states().drop(job_id)
        path = os.path.join(resolve_working_dir(local_dir or None), job_id)  # "": this host's default
        existed = os.path.isdir(path)
        shutil.rmtree(path, ignore_errors=True)
        return iter([1 if existed else 0])

    return task


def remove_local_state(sc: Any, location: StateLocation, job_id: str, tasks: int) -> int:
    """Remove the job's local working files and cached state wherever these tasks run (one per
    executor core is asked for; Spark places them). Returns how many tasks removed something."""
    sc.setJobDescription(f"flowpoint remove working state of job {job_id}")
    return sum(sc.parallelize(range(tasks), tasks).mapPartitions(remove_task(location, job_id)).collect())
