"""Errors of the Iceberg sink. Each names the table (and the column, where one is at fault) and
says what to do; ``recoverable`` says whether a restart can get past it (flowpoint/errors.py)."""

from __future__ import annotations

from flowpoint.errors import ConfigurationError, FlowpointError


class IcebergSinkError(FlowpointError):
    """Root of the Iceberg sink's errors: the catalog or the table's storage could not be
    reached, writing a data file or committing a checkpoint's snapshot failed (another writer
    committed first, storage errors). Recoverable: the job restarts from its last checkpoint,
    whose snapshot is committed then (once: the snapshots' summaries show whether it already
    was)."""

    recoverable = True


class IcebergConfigurationError(IcebergSinkError, ConfigurationError):
    """The sink cannot write this stream to this table: a bad builder setting, a stream without
    a declared type, or columns or partitioning that differ from the existing table's. Not
    recoverable: the same job would fail the same way again."""

    recoverable = False
