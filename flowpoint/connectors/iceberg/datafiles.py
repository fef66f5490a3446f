"""A data file as the sink's tasks describe it to the driver, and the pyiceberg ``DataFile`` the
driver commits from that description.

A task acknowledges each Parquet file it wrote with a small description, plain data that goes
into the checkpoint's ``_metadata`` as the other sinks' pending state does (never a pickle):

    {"path": "file:///lake/db/clicks/data/day=2026-11-27/00001-7-<uuid>.parquet",
     "size": 2170, "records": 2, "spec_id": 0, "partition": [20419],
     "column_sizes": {"1": 92, ...}, "value_counts": {...}, "null_value_counts": {...},
     "nan_value_counts": {...}, "lower_bounds": {"1": "<hex>"}, "upper_bounds": {...},
     "split_offsets": [4]}

The statistics are Iceberg's (pyiceberg computes them from the file's Parquet footer, as its own
writer does), so readers prune files by them; the partition values are in Iceberg's
representation (``schema.partition_value``)."""

from __future__ import annotations

from typing import Any

_COUNTS = ("column_sizes", "value_counts", "null_value_counts", "nan_value_counts")
_BOUNDS = ("lower_bounds", "upper_bounds")


def describe(path: str, size: int, spec_id: int, partition: list, statistics: dict[str, Any]) -> dict[str, Any]:
    """The description of a written file; ``statistics``: pyiceberg's serialized statistics
    (``DataFileStatistics.to_serialized_dict()``)."""
    out: dict[str, Any] = {"path": path, "size": int(size), "records": int(statistics["record_count"]),
                           "spec_id": int(spec_id), "partition": list(partition)}
    for key in _COUNTS:
        out[key] = {str(k): int(v) for k, v in (statistics.get(key) or {}).items()}
    for key in _BOUNDS:
        out[key] = {str(k): bytes(v).hex() for k, v in (statistics.get(key) or {}).items()}
    out["split_offsets"] = [int(o) for o in statistics.get("split_offsets") or []]
    return out


def data_file(d: dict[str, Any]) -> Any:
    """The pyiceberg ``DataFile`` of a description, to add to a snapshot."""
    from pyiceberg.manifest import DataFile, DataFileContent, FileFormat
    from pyiceberg.typedef import Record

    counts = {key: {int(k): int(v) for k, v in d[key].items()} for key in _COUNTS}
    bounds = {key: {int(k): bytes.fromhex(v) for k, v in d[key].items()} for key in _BOUNDS}
    make = getattr(DataFile, "from_args", DataFile)  # pyiceberg 0.10 added from_args; 0.9 takes the fields as such
    return make(
        content=DataFileContent.DATA,
        file_path=d["path"],
        file_format=FileFormat.PARQUET,
        partition=Record(*d["partition"]),
        record_count=int(d["records"]),
        file_size_in_bytes=int(d["size"]),
        sort_order_id=None,
        spec_id=int(d["spec_id"]),
        equality_ids=None,
        key_metadata=None,
        split_offsets=list(d["split_offsets"]) or None,
        **counts,
        **bounds,
    )


def partition_key(d: dict[str, Any]) -> tuple:
    """The partition a described file belongs to (its spec and values), comparable with
    :func:`committed_partition_key` of a file the table holds."""
    return (int(d["spec_id"]), tuple(d["partition"]))


def committed_partition_key(f: Any) -> tuple:
    return (int(f.spec_id), tuple(f.partition[i] for i in range(len(f.partition))))
