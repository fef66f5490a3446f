"""The exceptions flowpoint raises. Every one derives from :class:`FlowpointError`."""

from __future__ import annotations


class FlowpointError(Exception):
    """Root of every error flowpoint raises on purpose."""


class ConfigurationError(FlowpointError):
    """A setting, option or argument has a value flowpoint cannot use."""


class JobGraphError(FlowpointError):
    """The job graph is invalid: rejected before anything runs."""


class SerializationError(JobGraphError):
    """A user function or value cannot be serialized to be sent to executors."""


class InvalidKeyError(FlowpointError):
    """A key selector returned a value that cannot be a key."""


class StateAccessError(FlowpointError):
    """State was used where it is not available (e.g. keyed state outside a keyed stream)."""


class UserFunctionError(FlowpointError):
    """A user function raised; the message names the operator and the function."""


class JobExecutionError(FlowpointError):
    """A job failed while running; ``__cause__`` or the message carries the reason."""


class JobCancelledError(JobExecutionError):
    """The job was cancelled before it finished."""


class CheckpointError(FlowpointError):
    """Checkpoint storage or a checkpoint/savepoint cannot be read or written; names the URI."""


class StateNotFoundError(FlowpointError):
    """A task cannot find (or verify) its partition's committed state file; names the file.
    No restart can fix it: a partition never starts from empty state."""
