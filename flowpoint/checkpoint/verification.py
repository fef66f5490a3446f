"""The driver's check of a checkpoint or savepoint before a restore reads it: every file its
``_metadata`` names exists with its recorded size and SHA-256 (checkpoint/integrity.py has the
scheme and the per-file checks)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING

from flowpoint.checkpoint.integrity import corrupt, is_sha256
from flowpoint.checkpoint.metadata import CheckpointMetadata, StateFile

if TYPE_CHECKING:
    from flowpoint.checkpoint.filesystem import CheckpointStorageAccess

PARALLEL_READS = 8


def file_problem(data_size: int, data_sha256: str | None, f: StateFile) -> str | None:
    """Why a file of ``data_size`` bytes with checksum ``data_sha256`` is not ``f``; None if it is."""
    if data_size != f.size:
        return f"has {data_size} bytes, _metadata records {f.size}"
    if data_sha256 is not None and data_sha256 != f.sha256:
        return "does not match the SHA-256 recorded in _metadata"
    return None


def _owners(metadata: CheckpointMetadata) -> dict[str, tuple[StateFile, str]]:
    """Every distinct file the metadata names, with the uid of (one) operator using it."""
    out: dict[str, tuple[StateFile, str]] = {}
    for op in metadata.operators:
        for sub in op.subtasks:
            for f in sub.files:
                out.setdefault(f.path, (f, op.uid))
    for f in metadata.channel_state:
        out.setdefault(f.path, (f, f.writer))
    return out


def verify_sizes(access: CheckpointStorageAccess, metadata: CheckpointMetadata) -> None:
    """Every file exists with its recorded size (one listing per directory, no reads)."""
    what = f"{metadata.kind} file"
    listings: dict[str, dict[str, int] | None] = {}
    for path, (f, uid) in sorted(_owners(metadata).items()):
        parent, _, name = path.rpartition("/")
        if parent not in listings:
            listings[parent] = {n: s for n, d, s in access.list_dir(parent) if not d} if access.exists(parent) else None
        entries = listings[parent]
        if entries is None or name not in entries:
            raise corrupt(access.uri(path), "is missing", uid, what)
        if entries[name] != f.size:
            raise corrupt(access.uri(path), f"has {entries[name]} bytes, _metadata records {f.size}", uid, what)


def verify_state_files(access: CheckpointStorageAccess, metadata: CheckpointMetadata, parallel: int = PARALLEL_READS) -> None:
    """Driver side, before any task starts: every file of ``metadata`` (paths relative to
    ``access``) exists with its recorded size and SHA-256. Streams each file once (constant
    memory), ``parallel`` at a time; raises CorruptStateError naming the first bad file."""
    verify_sizes(access, metadata)
    what = f"{metadata.kind} file"
    owners = sorted(_owners(metadata).items())
    for path, (f, uid) in owners:
        if not is_sha256(f.sha256):
            raise corrupt(access.uri(path), "has no checksum in _metadata", uid, what)

    def check(item: tuple[str, tuple[StateFile, str]]) -> None:
        path, (f, uid) = item
        size, digest = access.sha256(path)
        problem = file_problem(size, digest, f)
        if problem:
            raise corrupt(access.uri(path), problem, uid, what)

    if len(owners) <= 1 or parallel <= 1:
        for item in owners:
            check(item)
        return
    with ThreadPoolExecutor(min(parallel, len(owners)), thread_name_prefix="flowpoint-verify") as pool:
        futures = [pool.submit(check, item) for item in owners]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise
