"""A ``DeltaSource`` split is a *lane*: one of ``lanes`` sequences that share the table's data
files between them. A data file belongs to lane ``crc32(path) % lanes``; a lane reads its files
version by version (the snapshot's files at the snapshot's version, then the files each later
version appends), each version's files in path order.

A lane's position is ``[version, file, records]``: every file of the lane in versions before
``version`` is read, and in ``version`` the files before index ``file`` and ``records`` records
of file ``file``. ``[v, n, 0]`` with ``n`` the lane's file count in ``v`` means ``v`` is read
whole. The position is data, stored in checkpoints as a Kafka offset is: the version read up to
and the records read of the file being read.

Pure functions over ``files_of(version) -> the lane's files of that version`` (each a dict with
``records``), so reading the same range of positions always reads the same records.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

FilesOf = Callable[[int], list[dict]]


def lane_of(path: str, lanes: int) -> int:
    return zlib.crc32(path.encode("utf-8")) % max(1, lanes)


def position(value: object) -> tuple[int, int, int]:
    """A position as restored from checkpoint data (a list) or as planned (a list or tuple)."""
    v, k, r = value  # type: ignore[misc]
    return int(v), int(k), int(r)


def advance(files_of: FilesOf, start: object, budget: int, last_version: int) -> tuple[list[int], int, bool]:
    """``(end, records, done)``: the position ``budget`` records after ``start`` (or as far as
    versions up to ``last_version`` go), the records in between, and whether every file of
    ``last_version`` and before is read."""
    v, k, r = position(start)
    remaining, records = max(0, budget), 0
    while True:
        files = files_of(v)
        while k < len(files) and remaining > 0:
            take = min(int(files[k]["records"]) - r, remaining)
            r += take
            remaining -= take
            records += take
            if r >= int(files[k]["records"]):
                k, r = k + 1, 0
        while k < len(files) and int(files[k]["records"]) == 0:  # empty files: passed at once
            k, r = k + 1, 0
        if k < len(files) or v >= last_version:
            return [v, k, r], records, k >= len(files)
        v, k, r = v + 1, 0, 0


def pieces(files_of: FilesOf, start: object, end: object) -> list[list]:
    """``[[file, from record, to record], ...]``: what a read from ``start`` to ``end`` reads."""
    v, k, r = position(start)
    ev, ek, er = position(end)
    out: list[list] = []
    while (v, k) < (ev, ek) or ((v, k) == (ev, ek) and r < er):
        files = files_of(v)
        if k >= len(files):
            v, k, r = v + 1, 0, 0
            continue
        f = files[k]
        stop = er if (v, k) == (ev, ek) else int(f["records"])
        if stop > r:
            out.append([f, r, stop])
        if (v, k) == (ev, ek):
            break
        k, r = k + 1, 0
    return out
