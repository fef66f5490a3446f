"""The driver's side of the table: which of a sink identity's batches the table holds, and one
snapshot that adds a commit's data files (and, in ``overwrite_partitions`` mode, removes the
files the table held in the partitions the commit writes).

Each snapshot the sink commits carries, in its summary, as Flink's Iceberg sink carries
``flink.job-id`` and ``flink.max-committed-checkpoint-id``:

* ``flowpoint.sink-id``: the identity the batches were staged under;
* ``flowpoint.batch``: the highest batch number in the snapshot (``flowpoint.batches``: all);
* ``flowpoint.checkpoint-id``: the checkpoint whose completion committed it, when known;
* ``flowpoint.restored-from``: the identity of the checkpoint the run was restored from.

Batch numbers only grow under one identity, so the newest snapshot of an identity in the
current snapshot's ancestry holds its highest committed batch (``committed_batch``). A commit
is one pyiceberg transaction whose requirement is the current snapshot it was built on: a
concurrent commit makes it fail (``CommitFailedException``), never land twice."""

from __future__ import annotations

from typing import Any

from flowpoint.connectors.iceberg.datafiles import committed_partition_key, data_file, partition_key

SINK_ID = "flowpoint.sink-id"
BATCH = "flowpoint.batch"
BATCHES = "flowpoint.batches"
CHECKPOINT_ID = "flowpoint.checkpoint-id"
RESTORED_FROM = "flowpoint.restored-from"


def committed_batch(table: Any, sink_id: str) -> int | None:
    """The highest batch of ``sink_id`` in the table's current snapshot and its ancestors, or
    None: the newest of its snapshots says it."""
    from pyiceberg.table.snapshots import ancestors_of

    for snapshot in ancestors_of(table.current_snapshot(), table.metadata):
        summary = snapshot.summary
        if summary is not None and summary.get(SINK_ID) == sink_id and summary.get(BATCH) is not None:
            return int(summary.get(BATCH))
    return None


def summary(sink_id: str, batches: list[int], checkpoint_id: int | None, restored_from: str | None) -> dict[str, str]:
    """The properties a commit of ``batches`` adds to its snapshot's summary (strings only)."""
    out = {SINK_ID: sink_id, BATCH: str(max(batches)), BATCHES: ",".join(str(n) for n in batches)}
    if checkpoint_id is not None:
        out[CHECKPOINT_ID] = str(checkpoint_id)
    if restored_from:
        out[RESTORED_FROM] = restored_from
    return out


def _files_in(table: Any, partitions: set[tuple]) -> list[Any]:
    """The data files of the current snapshot in ``partitions`` (spec id, values)."""
    from pyiceberg.manifest import ManifestContent

    snapshot = table.current_snapshot()
    if snapshot is None:
        return []
    out = []
    for manifest in snapshot.manifests(table.io):
        if manifest.content != ManifestContent.DATA:
            continue
        for entry in manifest.fetch_manifest_entry(table.io, discard_deleted=True):
            if committed_partition_key(entry.data_file) in partitions:
                out.append(entry.data_file)
    return out


def commit(table: Any, files: list[dict[str, Any]], properties: dict[str, str], overwrite_partitions: bool) -> int:
    """One snapshot adding ``files`` (descriptions, datafiles.py) with ``properties`` in its
    summary; ``overwrite_partitions``: the files the table held in the partitions of ``files``
    are removed in the same snapshot. Returns the number of files removed."""
    transaction = table.transaction()
    update = transaction.update_snapshot(snapshot_properties=properties)
    removed = []
    if overwrite_partitions:
        removed = _files_in(table, {partition_key(f) for f in files})
        with update.overwrite() as producer:
            for f in removed:
                producer.delete_data_file(f)
            for f in files:
                producer.append_data_file(data_file(f))
    else:
        with update.fast_append() as producer:
            for f in files:
                producer.append_data_file(data_file(f))
    transaction.commit_transaction()
    return len(removed)
