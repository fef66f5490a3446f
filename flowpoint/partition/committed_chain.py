"""What the driver committed of one partition's working state, and what a task reports of the
files it wrote: the committed chain (a base, deltas, or a restored checkpoint's files) that the
task brings its working state to (partition/working.py, partition/backend.py)."""

from __future__ import annotations

from dataclasses import dataclass

from flowpoint.checkpoint.parts import RestoredFile


@dataclass(frozen=True)
class CommittedFile:
    """A durable working-state file (see durable.py): a delta or a base of one partition."""

    epoch: int
    token: str
    path: str | None  # its URI; None: the epoch changed nothing
    size: int = 0
    sha256: str | None = None  # SHA-256 (hex) of the file, checked on every read
    files: tuple[tuple[str, str, int, str], ...] = ()  # RocksDB base: (uri, name in the DB directory, size, SHA-256)

    def uris(self) -> list[str]:
        return [u for u, *_ in self.files] if self.files else ([self.path] if self.path else [])


@dataclass(frozen=True)
class TaskStateAck:
    """A task's report of the durable state files it wrote for an epoch."""

    epoch: int
    token: str
    delta: CommittedFile | None
    base: CommittedFile | None
    changed_keys: int
    total_keys: int


@dataclass(frozen=True)
class CommittedChain:
    """What the coordinator committed for one (stage, partition): the last committed task
    attempt, and for stateful stages the durable base snapshot and the deltas after it. After a
    restore, ``restored`` holds the checkpoint's snapshot files the deltas build on, until the
    partition writes a base of its own. ``obsolete`` lists files the last commit superseded: the
    partition's next task deletes them."""

    base: CommittedFile | None = None
    deltas: tuple[CommittedFile, ...] = ()
    last_epoch: int = 0
    last_token: str | None = None
    restored: tuple[RestoredFile, ...] = ()
    obsolete: tuple[str, ...] = ()

    @property
    def version(self) -> int:
        return self.last_epoch

    @property
    def base_epoch(self) -> int:
        """The epoch the chain's starting point holds (0: empty state at the job's start)."""
        if self.base is not None:
            return self.base.epoch
        return max((f.epoch for f in self.restored), default=0)

    def is_committed(self, epoch: int, token: str) -> bool:
        if epoch == self.last_epoch:
            return token == self.last_token
        return any(f.epoch == epoch and f.token == token for f in self.deltas)

    def delta_bytes(self) -> int:
        return sum(f.size for f in self.deltas)

    def wants_base(self, min_bytes: int = 1 << 20, max_deltas: int = 200) -> bool:
        if self.restored:
            return True  # the checkpoint's files may be deleted by retention: own a base at once
        base_size = self.base.size if self.base else 0
        return self.delta_bytes() > max(base_size, min_bytes) or len(self.deltas) >= max_deltas

    def committed(self, epoch: int, token: str, state: TaskStateAck | None) -> CommittedChain:
        if state is None:
            return CommittedChain(self.base, self.deltas, epoch, token, self.restored)
        base, deltas, restored, obsolete = self.base, self.deltas, self.restored, ()
        if state.base is not None:
            gone = [f for f in [base, *deltas] if f is not None and f.epoch <= state.base.epoch]
            obsolete = tuple(u for f in gone for u in f.uris())
            base, restored = state.base, ()
            deltas = tuple(f for f in deltas if f.epoch > base.epoch)
        if state.delta is not None:
            deltas = (*deltas, state.delta)
        return CommittedChain(base, deltas, epoch, token, restored, obsolete)
