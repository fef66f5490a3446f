"""Errors of the Delta Lake sink. Each names the table path (and the column, where one is at
fault) and says what to do; ``recoverable`` says whether a restart can get past it
(flowpoint/errors.py)."""

from __future__ import annotations

from flowpoint.errors import ConfigurationError, FlowpointError


class DeltaSinkError(FlowpointError):
    """Root of the Delta sink's errors: writing a data file or committing a checkpoint's
    transaction failed (storage unreachable, a conflicting writer). Recoverable: the job restarts
    from its last checkpoint, whose transaction is committed then (once: its ``txn`` action
    shows whether it already was)."""

    recoverable = True


class DeltaConfigurationError(DeltaSinkError, ConfigurationError):
    """The sink cannot write this stream to this table: a bad builder setting, a stream without
    a declared type, or a schema or partitioning that differs from the existing table's. Not
    recoverable: the same job would fail the same way again."""

    recoverable = False


class DeltaSourceError(FlowpointError):
    """``DeltaSource`` cannot go on reading its table: a version that deletes or rewrites rows
    while the source follows the table, a log entry or data file that is gone (log retention,
    vacuum), a table feature it cannot read. Each names the table, the version or file, and
    what to do. Not recoverable: a restart reads the same log and fails the same way."""

    recoverable = False


class DeltaSourceUnavailableError(DeltaSourceError):
    """The table's storage could not be reached or read (a network or object store error):
    recoverable, a restart from the last checkpoint reads the same versions again."""

    recoverable = True


class DeltaSourceConfigurationError(DeltaSourceError, ConfigurationError):
    """A bad ``DeltaSource`` setting: no table path, a table that does not exist, a starting
    version the table does not have, a column it does not have or cannot type."""

    recoverable = False
