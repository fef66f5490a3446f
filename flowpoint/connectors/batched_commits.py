"""The driver side the lakehouse sinks share (connectors/delta, connectors/iceberg): the data
files of committed epochs become numbered batches in each checkpoint, committed to the table
when that checkpoint completes (or the bounded job finishes), under the sink's identity.

A restore brings the checkpoint's batches back and commits those the table does not show
committed under the checkpoint's identity; then the sink takes a new identity for what it
commits from then on. Kept, two runs restored from one checkpoint or savepoint (or a restore
of an older one, ``--as-of``) would take each other's batches for their own and skip them: a
silent loss. A sink says how it names an identity, how it reads the table's last committed
batch of one, how it commits, and under which keys its checkpoint state holds them."""

from __future__ import annotations

import logging
from typing import Any

from flowpoint.connectors.sinks import Sink

log = logging.getLogger("flowpoint")


class BatchedCommitSink(Sink):
    #: the checkpoint state's key of the identity, and of the identity it was forked from (None:
    #: not kept in the state)
    IDENTITY_KEY = "identity"
    LINEAGE_KEY: str | None = None

    def _driver_reset(self) -> None:
        self._driver_pending: list = []  # data files of committed epochs since the last checkpoint
        self._driver_batches: list = []  # [[batch number, files]] in checkpoints, not yet in the table
        self._driver_next = 1
        self._driver_identity: str | None = None
        self._driver_restored_from: str | None = None  # the identity of the checkpoint this run restored
        self._driver_checkpoint: int | None = None

    # -- what each sink says -------------------------------------------------------------------

    def _new_identity(self) -> str:
        raise NotImplementedError

    def _committed_batch(self) -> int | None:
        """The last batch number the table shows committed under the current identity, or None."""
        raise NotImplementedError

    def _commit(self) -> None:
        """Commit ``_driver_batches`` not yet in the table, in one transaction; then clear them."""
        raise NotImplementedError

    @staticmethod
    def _file_entry(f: Any) -> Any:
        """A copy of one data file's description, as the checkpoint state keeps it."""
        return list(f)

    # -- the shared bookkeeping ----------------------------------------------------------------

    def on_job_start(self, checkpoint_interval_ms: int | None) -> None:
        self.restore_driver_state(None)  # a fresh start; a restore, which comes after this, replaces it
        if checkpoint_interval_ms is None:
            log.info("%s: checkpointing is off, so nothing is committed until the bounded job finishes", self.where)

    def restore_driver_state(self, state: Any) -> None:
        self._driver_reset()
        if state is None:
            self._driver_identity = self._new_identity()
            return
        self._driver_identity = state[self.IDENTITY_KEY]
        if self.LINEAGE_KEY is not None:
            self._driver_restored_from = state.get(self.LINEAGE_KEY)
        self._driver_next = int(state["next"])
        self._driver_batches = [[int(n), [self._file_entry(f) for f in files]] for n, files in state["batches"]]
        done = self._committed_batch()
        if done is not None and done >= self._driver_next:
            # an older checkpoint than the one the table's commits reached: what came after it is
            # replayed and committed again (never lost; repeated)
            log.warning("%s: the table already holds this sink's commits up to batch %d, made after the restored "
                        "checkpoint (batches below %d); the records after that checkpoint are written again",
                        self.where, done, self._driver_next)
        if self._driver_batches:
            # the checkpoint we restored completed: its batches belong in the table now; those
            # the table shows committed before the crash are not committed again
            self._commit()
        # Fork (see the module's doc): from now on, an identity of this run's own
        self._driver_restored_from = self._driver_identity
        self._driver_identity = self._new_identity()

    def on_epoch_committed(self, epoch: int, payloads: list[tuple[int, Any]], parallelism: int) -> None:
        for _, files in payloads:
            self._driver_pending.extend(files or ())

    def snapshot_driver_state(self) -> Any:
        if self._driver_pending:
            self._driver_batches.append([self._driver_next, self._driver_pending])
            self._driver_next += 1
            self._driver_pending = []
        state: dict[str, Any] = {self.IDENTITY_KEY: self._driver_identity}
        if self.LINEAGE_KEY is not None:
            state[self.LINEAGE_KEY] = self._driver_restored_from
        state["next"] = self._driver_next
        state["batches"] = [[n, [self._file_entry(f) for f in files]] for n, files in self._driver_batches]
        return state

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        self._driver_checkpoint = checkpoint_id
        if self._driver_batches:
            self._commit()

    def on_job_end(self, status: str) -> None:
        if status == "FINISHED":
            # every epoch committed and none will be replayed: what is left is final
            self.snapshot_driver_state()
            if self._driver_batches:
                self._commit()
