"""The exceptions flowpoint raises. Every one derives from :class:`FlowpointError`.

Each class says whether a restart can get past it (``recoverable``). A job whose epoch fails
with a recoverable error goes to its restart strategy; one that fails with a non-recoverable
error (a wrong job, configuration, key, state use or value; a missing state file) fails at
once with the error's message, since every restart would fail the same way. Errors keep
their class when they cross Spark from a task to the driver (``flowpoint.spark.failures``).
``retryable`` is another name of ``recoverable``, on classes and instances alike.
"""

from __future__ import annotations

import contextlib
import errno
from typing import Any


class _Retryable:
    """``retryable``: reads and writes ``recoverable`` (of the class, or of one error)."""

    def __get__(self, error: Any, cls: type) -> bool:
        return bool((cls if error is None else error).recoverable)

    def __set__(self, error: Any, value: bool) -> None:
        error.recoverable = bool(value)


class FlowpointError(Exception):
    """Root of every error flowpoint raises on purpose."""

    #: True when a restart of the job (from its last checkpoint) may get past the error;
    #: False when the same job would fail the same way again. Subclasses set this one.
    recoverable: bool = True
    #: The same flag under the name docs/architecture.md, section 10a and issue 10 use.
    retryable = _Retryable()
    #: Set on the error that failed a job: the file holding the whole report (every traceback)
    #: (``flowpoint.driver.failure_report``); None when it could not be written.
    log_path: str | None = None


class ConfigurationError(FlowpointError):
    """A setting, option or argument has a value flowpoint cannot use."""

    recoverable = False


class UnsupportedApiError(FlowpointError, ImportError):
    """A PyFlink name flowpoint does not provide, met in ``from flowpoint.<pyflink module> import
    name`` (the module tree mirrors PyFlink's, ``flowpoint/refused.py``): a Java connector, a
    wrapper of a Java class, a legacy API. An ``ImportError``, so the import fails where PyFlink's
    would have worked; the message says why it cannot work on Spark and what to use instead."""

    recoverable = False


class InsecurePathError(ConfigurationError):
    """A local file or directory flowpoint would trust (the working directory, the control
    token, FLOWPOINT_HOME and the job registry, checkpoint, savepoint and remote working
    directories, a run directory ``--resume`` considers) is owned by another user, open to other
    users, or below a directory they can replace. The message names the path and says what to
    do (and the setting that accepts it, ``security.trust-shared-directories``, where there is one)."""

    recoverable = False


class JobScriptSyntaxError(FlowpointError):
    """The job's Python file (or a module it imports) does not compile. Its message is what a
    compiler says: ``job.py:LINE: SyntaxError: ...``, the offending line and a caret, no
    traceback through flowpoint's CLI and runpy."""

    recoverable = False


class JobGraphError(FlowpointError):
    """The job graph is invalid: rejected before anything runs."""

    recoverable = False


class SerializationError(JobGraphError):
    """A user function, or a value of the job (a record, a state value), cannot be serialized:
    to be sent to executors, to the next operator, or into state."""

    recoverable = False


class InvalidKeyError(FlowpointError):
    """A key selector returned a value that cannot be a key."""

    recoverable = False


class StateError(FlowpointError):
    """Keyed, operator or broadcast state cannot be used or found as the job asks."""

    recoverable = False


class StateAccessError(StateError):
    """State was used where it is not available (e.g. keyed state outside a keyed stream), or in
    a way it does not support (one name declared as two kinds of state, a None list element)."""

    recoverable = False


class StateMigrationError(StateAccessError):
    """Restored state does not fit the state the job declares (Flink's
    ``StateMigrationException``): a state whose kind changed (ValueState ``count`` restored into
    a MapState ``count``). Names the operator, the state and both kinds. No restart can fix it."""

    recoverable = False


class StateNotFoundError(StateError):
    """A task cannot find (or verify) its partition's committed state file; names the file.
    No restart can fix it: a partition never starts from empty state."""

    recoverable = False




class JobExecutionError(FlowpointError):
    """A job failed while running; ``__cause__`` or the message carries the reason."""

    recoverable = True


class UserFunctionError(JobExecutionError):
    """A user function raised; the message names the operator, the function (file:line), the
    exception and the record. Restartable, as in Flink: the restart strategy applies, whatever
    the user's exception's class. Spark does not retry the task (the task returns the error to
    the driver). The same error on the same record again after a restart is counted and named
    (``driver/failures.failure_identity``); whether it fails the job at once is the user's choice
    (``restart-strategy.repeated-failure.fail-fast``, docs/errors.md).

    Built in the task by ``flowpoint.tasks.user_errors``, it carries as data what the driver
    shows and logs: ``operator``, ``uid``, ``function`` (``name at file:line``), ``record``
    (a shortened repr), ``exception`` (``Type: message`` of the user's exception),
    ``exception_type`` (its qualified class name), ``frames`` (the user code's part of the
    traceback: ``(file, line, function, source line)``, innermost last) and ``trace`` (the
    whole traceback as the task saw it). Each is None or empty when the error was rebuilt from
    Spark's text."""

    recoverable = True

    def __init__(self, message: str, **details: Any):
        super().__init__(message)
        self.operator: str | None = details.get("operator")
        self.uid: str | None = details.get("uid")
        self.function: str | None = details.get("function")
        self.record: str | None = details.get("record")
        self.exception: str | None = details.get("exception")
        self.exception_type: str | None = details.get("exception_type")
        #: the user's exception is one of Python's data errors (KeyError, IndexError, TypeError,
        #: ValueError, AttributeError, ZeroDivisionError, UnicodeError or a subclass): what a
        #: record's content causes, as opposed to an outage of something the function calls
        self.data_error: bool = bool(details.get("data_error"))
        self.frames: tuple[tuple[str, int, str, str], ...] = tuple(details.get("frames") or ())
        self.trace: str | None = details.get("trace")


class JobCancelledError(JobExecutionError):
    """The job was cancelled before it finished."""

    recoverable = False


class CheckpointError(FlowpointError):
    """Checkpoint storage or a checkpoint/savepoint cannot be read or written; names the URI.
    Recoverable: storage may come back (more failed checkpoints than tolerated fail the job
    over to its restart strategy, as in Flink)."""

    recoverable = True


class CorruptStateError(StateError, CheckpointError):
    """A checkpoint's or savepoint's file (its ``_metadata`` included) does not match the size or
    checksum recorded for it, is missing, or cannot be decoded; names the file (``path``).
    Raised on the driver before any task starts, and by a task that reads such a file. No
    restart can fix it: restore from another (e.g. the previous retained) checkpoint. Also a
    :class:`CheckpointError` (a checkpoint that cannot be read), but not recoverable."""

    recoverable = False

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path

    def __reduce__(self):  # keeps ``path`` when a task returns it to the driver
        return (type(self), (str(self), self.path))


class StateDecodeError(CorruptStateError):
    """A state file that matches its recorded size and checksum cannot be decoded (unpickled):
    a checkpoint or savepoint part, a durable delta or base, a pickled value in ``_metadata``.
    It was damaged before its checksum was computed or rewritten together with it, or the job
    no longer defines a class its state uses. Names the file (``path``) and the operator when
    known; no restart can fix it."""

    recoverable = False


class UntrustedStateError(CorruptStateError):
    """A checkpoint's or savepoint's ``_metadata`` is not signed with this installation's key
    (``$FLOWPOINT_HOME/checkpoint-key``) nor a trusted one: signed by another installation,
    changed after it was signed (a state file replaced and ``_metadata`` resealed), or unsigned
    (written before checkpoints were signed, or the signature removed). Restoring it would
    unpickle what its writer chose, so it is refused before anything is decoded, naming the file
    (``path``); ``flowpoint run --trust-savepoint-from-others`` (``execution.savepoint.trust-from-others``)
    or ``security.checkpoint-signing.trusted-key-files`` accepts it. No restart can fix it."""

    recoverable = False


class CorruptSinkFileError(CorruptStateError):
    """A sink's file written before a checkpoint (a FileSink in-progress piece) no longer has
    the size or SHA-256 recorded when it was written: changed, appended to, replaced or removed
    before it was committed. Names the file (``path``); nothing is committed from it.

    Found when the checkpoint pre-commits the piece (before any checkpoint records it), the
    error is recoverable (``recoverable=True`` on that instance): the job restarts from its last
    completed checkpoint, as its restart strategy allows, and writes the piece's records again.
    Found when a completed checkpoint's part file is committed, no restart from that checkpoint
    can fix it (the class's default): the job fails and keeps its checkpoints."""

    recoverable = False

    def __init__(self, message: str, path: str | None = None, recoverable: bool | None = None):
        super().__init__(message, path)
        if recoverable is not None:
            self.recoverable = bool(recoverable)

    def __reduce__(self):  # keeps ``path`` and a recoverable instance's flag
        return (type(self), (str(self), self.path, self.__dict__.get("recoverable")))


class StateIOError(CheckpointError):
    """An I/O error (disk full, permission denied, ...) while writing or reading a state, delta
    or checkpoint file; names the path and the operation. Recoverable: space may be freed and
    storage may come back (the restart strategy's limits apply)."""

    recoverable = True

    def __init__(self, message: str, path: str | None = None):
        super().__init__(message)
        self.path = path

    def __reduce__(self):  # keeps ``path`` when a task returns it to the driver
        return (type(self), (str(self), self.path))

    @classmethod
    def of(cls, operation: str, path: str, error: OSError) -> StateIOError:
        """``error`` (an OSError while doing ``operation`` on ``path``) as a StateIOError."""
        reason = error.strerror or str(error) or type(error).__name__
        code = f"[Errno {error.errno}] " if error.errno else ""
        hint = " (the filesystem is full: free space there; a restart can then go on)" if error.errno == errno.ENOSPC else ""
        return cls(f"cannot {operation} {path}: {type(error).__name__}: {code}{reason}{hint}", path=path)


@contextlib.contextmanager
def io_errors(operation: str, path: str) -> Any:
    """An OSError (a full disk, a permission) while doing ``operation`` on ``path`` becomes a
    StateIOError naming both (recoverable: space may be freed)."""
    try:
        yield
    except OSError as e:
        raise StateIOError.of(operation, path, e) from e
