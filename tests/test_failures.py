"""Errors keep their class across Spark, and a failure no restart can fix fails the job at once
(DESIGN sections 10 and 10a).

Unit tests read the driver-side error out of the texts Spark gives the driver (PySpark's
PythonException, the executor's log form, a py4j ``Py4JJavaError`` with the driver stack trace);
end-to-end tests run jobs with checkpointing and a restart strategy that would restart them
without end, and check which failures restart and which fail at once.
"""

from __future__ import annotations

import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import traceback

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state

import flowpoint.driver.restarts as restarts_module
import flowpoint.errors as errors_module
from flowpoint import (
    CheckpointedFunction,
    CollectSink,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapFunction,
    MapStateDescriptor,
    RestartStrategies,
    ValueStateDescriptor,
)
from flowpoint.errors import (
    FlowpointError,
    InvalidKeyError,
    JobExecutionError,
    SerializationError,
    StateAccessError,
    StateError,
    StateNotFoundError,
    UserFunctionError,
)
from flowpoint.spark.failures import is_recoverable, python_failure, task_error

ALL_ERRORS = sorted(
    (c for c in vars(errors_module).values() if isinstance(c, type) and issubclass(c, FlowpointError)),
    key=lambda c: c.__name__,
)

# -- the texts Spark hands the driver ------------------------------------------------------------

JVM_FRAMES = (
    "\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator$$anonfun$1.applyOrElse(PythonRunner.scala:1118)\n"
    "\tat org.apache.spark.scheduler.ResultTask.runTask(ResultTask.scala:93)\n"
    "\tat java.base/java.lang.Thread.run(Thread.java:840)\n"
)


def worker_traceback(error: BaseException) -> str:
    """The traceback a Python worker prints for ``error`` (raised, with its chain)."""
    return "".join(traceback.format_exception(error))


def raised(make):
    try:
        make()
    except BaseException as e:  # noqa: BLE001 - captured for its traceback
        return e
    msg = "nothing raised"
    raise AssertionError(msg)


def _run_stage_task(error):
    raise error


def in_task(error: BaseException) -> BaseException:
    return raised(lambda: _run_stage_task(error))


def pyspark_text(error: BaseException) -> str:
    """``str()`` of PySpark 4's PythonException (what the driver gets from an RDD action)."""
    return "An exception was thrown from the Python worker:\n" + worker_traceback(error).strip()


def executor_log_text(error: BaseException) -> str:
    """The JVM's PythonException message, as in the executor log and in Py4JJavaError texts."""
    return (
        "org.apache.spark.api.python.PythonException: [PYTHON_EXCEPTION] An exception was thrown "
        "from the Python worker: " + worker_traceback(error) + " SQLSTATE: 38000\n" + JVM_FRAMES
    )


def py4j_text(error: BaseException) -> str:
    """A Py4JJavaError's text: the stage failure with the most recent failure, the driver stack
    trace, and the same PythonException again as its cause."""
    return (
        "An error occurred while calling o231.count.\n"
        ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 1 in stage 7.0 "
        "failed 4 times, most recent failure: Lost task 1.3 in stage 7.0 (TID 31) (192.0.2.2 executor driver): "
        + executor_log_text(error)
        + "\nDriver stacktrace:\n"
        "\tat org.apache.spark.scheduler.DAGScheduler.failJobAndIndependentStages(DAGScheduler.scala:2935)\n"
        "\tat org.apache.spark.rdd.RDD.count(RDD.scala:1296)\n"
        "Caused by: " + executor_log_text(error) + "\t... 1 more\n"
    )


FORMS = {"pyspark": pyspark_text, "executor-log": executor_log_text, "py4j": py4j_text}

# a real PythonException text from a job whose map function divided by zero (PySpark 4.x)
REAL_USER_FAILURE = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/work/main/flowpoint/tasks/operators.py", line 156, in process
    out = [f(x) for x in rows]
          ^^^^^^^^^^^^^^^^^^^^
  File "/work/main/flowpoint/api/functions.py", line 300, in map
    return self.func(value)
           ^^^^^^^^^^^^^^^^
  File "/tmp/job.py", line 38, in <lambda>
    src.map(lambda x: 1 // (x - 7)).sink_to(CollectSink())
                      ~~^^~~~~~~~~
ZeroDivisionError: integer division or modulo by zero

The above exception was the direct cause of the following exception:

Traceback (most recent call last):
  File "/usr/lib/python3.11/site-packages/pyspark/python/lib/pyspark.zip/pyspark/worker.py", line 4327, in invoke_udf
    run_process()
  File "/work/main/flowpoint/spark/epoch_launcher.py", line 66, in task
    outputs, ack = run_stage_task(plan, spec, task_slice, attempt, token, inputs)
                   ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/work/main/flowpoint/tasks/operators.py", line 158, in process
    raise _first_failure(self.spec, e, rows, f) from e
flowpoint.errors.UserFunctionError: operator 'Map' (uid 'map-06fb0fb73dc26fd0', function case.<locals>.<lambda> at /tmp/job.py:38) raised ZeroDivisionError: integer division or modulo by zero while processing 7"""

# a real text of a record that cannot be pickled on its way to the next operator
REAL_PICKLING_FAILURE = """An exception was thrown from the Python worker:
Traceback (most recent call last):
  File "/work/main/flowpoint/tasks/batches.py", line 78, in dumps
    return pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
TypeError: cannot pickle '_thread.lock' object

During handling of the above exception, another exception occurred:

Traceback (most recent call last):
  File "/work/main/flowpoint/tasks/operators.py", line 608, in _send_bucket
    blob = ("pickle", dumps(bucket))
                      ^^^^^^^^^^^^^
  File "/work/main/flowpoint/tasks/batches.py", line 82, in dumps
    return cloudpickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "/usr/lib/python3.11/site-packages/cloudpickle/cloudpickle.py", line 1313, in dump
    return super().dump(obj)
           ^^^^^^^^^^^^^^^^^
TypeError: cannot pickle '_thread.lock' object"""

REAL_WORKER_CRASH = (
    "An error occurred while calling z:org.apache.spark.api.python.PythonRDD.collectAndServe.\n"
    ": org.apache.spark.SparkException: Job aborted due to stage failure: Task 0 in stage 37.0 failed 4 times, "
    "most recent failure: Lost task 0.3 in stage 37.0 (TID 132) (192.0.2.2 executor driver): "
    "org.apache.spark.SparkException: Python worker exited unexpectedly (crashed). Consider setting "
    "'spark.python.worker.faulthandler.enabled' configuration to 'true' for the better Python traceback.\n"
    + JVM_FRAMES
    + "Caused by: java.io.EOFException\n\tat java.base/java.io.DataInputStream.readInt(DataInputStream.java:386)\n"
    "\t... 23 more\n\nDriver stacktrace:\n" + JVM_FRAMES
)


# -- unit: the mapping ---------------------------------------------------------------------------


@pytest.mark.parametrize("form", FORMS)
@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_every_flowpoint_error_keeps_its_class_and_message(cls, form):
    message = f"{cls.__name__} in operator 'op' (uid 'u1'): it went wrong: {{'a': [1, 2]}} at /tmp/x.py:12"
    error = task_error(FORMS[form](in_task(cls(message))), epoch=4)
    assert type(error) is cls
    assert str(error) == message


@pytest.mark.parametrize("form", FORMS)
def test_a_multi_line_message_comes_back_whole(form):
    message = (
        "the committed state file of stage 2 partition 1 is missing:\n"
        "  s3://bucket/ck/job/run-0/2-1/epoch-7.delta\n"
        "\n"
        "a partition never starts from empty state; restore from a checkpoint\n"
        "Caused by nothing: at the end"
    )
    error = task_error(FORMS[form](in_task(StateNotFoundError(message))), epoch=7)
    assert type(error) is StateNotFoundError
    assert str(error) == message


@pytest.mark.parametrize("form", FORMS)
def test_a_user_exception_keeps_the_function_file_and_line(form):
    def user_function(x):
        msg = f"cannot handle {x}"
        raise ValueError(msg)

    def operator():
        try:
            user_function(3)
        except ValueError as e:
            msg = f"operator 'Map' (uid 'm', function user_function at {__file__}:170) raised ValueError: {e} while processing 3"
            raise UserFunctionError(msg) from e

    error = task_error(FORMS[form](raised(operator)), epoch=2)
    assert type(error) is UserFunctionError and isinstance(error, JobExecutionError)
    assert str(error).startswith("operator 'Map' (uid 'm', function user_function at ")
    assert f"{__file__}:170) raised ValueError: cannot handle 3 while processing 3" in str(error)


def test_a_real_pyspark_text_of_a_user_failure():
    error = task_error(REAL_USER_FAILURE, epoch=1)
    assert type(error) is UserFunctionError
    assert str(error) == (
        "operator 'Map' (uid 'map-06fb0fb73dc26fd0', function case.<locals>.<lambda> at /tmp/job.py:38) "
        "raised ZeroDivisionError: integer division or modulo by zero while processing 7"
    )
    failure = python_failure(REAL_USER_FAILURE)
    assert failure is not None and failure.frames[-1][2] == "process"


def test_the_outermost_exception_wins():
    # a flowpoint error that is only the cause of another exception is not what the task raised
    def outer():
        try:
            msg = "inner"
            raise StateAccessError(msg)
        except StateAccessError as e:
            msg = "outer failure"
            raise RuntimeError(msg) from e

    for make in FORMS.values():
        error = task_error(make(raised(outer)), epoch=3)
        assert type(error) is JobExecutionError
        assert str(error) == "epoch 3 failed: RuntimeError: outer failure"


def test_a_python_error_that_is_not_flowpoint_s_names_class_and_message():
    error = task_error(pyspark_text(in_task(KeyError("missing"))), epoch=5)
    assert type(error) is JobExecutionError and str(error) == "epoch 5 failed: KeyError: 'missing'"
    error = task_error(py4j_text(in_task(MemoryError())), epoch=5)
    assert type(error) is JobExecutionError and str(error) == "epoch 5 failed: MemoryError"


def test_an_unknown_flowpoint_error_name_falls_back_to_job_execution_error():
    text = pyspark_text(in_task(ValueError("x"))).replace("ValueError: x", "flowpoint.errors.NoSuchError: x")
    error = task_error(text, epoch=1)
    assert type(error) is JobExecutionError and "NoSuchError: x" in str(error)


def test_a_flowpoint_error_without_a_traceback():
    text = "SparkException: task failed: flowpoint.errors.InvalidKeyError: got a list: [1]\n\tat org.apache.X"
    error = task_error(text, epoch=1)
    assert type(error) is InvalidKeyError and str(error) == "got a list: [1]"


@pytest.mark.parametrize("form", FORMS)
def test_a_value_that_cannot_be_pickled_is_a_serialization_error(form):
    def send():
        import pickle

        pickle.dumps(threading.Lock())

    error = task_error(FORMS[form](raised(send)), epoch=2)
    assert type(error) is SerializationError
    assert "cannot pickle '_thread.lock' object" in str(error) and "open()" in str(error)


def test_a_real_pickling_failure_names_where_it_happened():
    error = task_error(REAL_PICKLING_FAILURE, epoch=1)
    assert type(error) is SerializationError
    assert "(in _send_bucket at flowpoint/tasks/operators.py:608)" in str(error)
    assert "TypeError: cannot pickle '_thread.lock' object" in str(error)


def test_a_crashed_worker_is_a_recoverable_job_execution_error():
    error = task_error(REAL_WORKER_CRASH, epoch=9)
    assert type(error) is JobExecutionError and is_recoverable(error)
    assert str(error).startswith("epoch 9 failed: Job aborted due to stage failure: Task 0 in stage 37.0 failed 4 times")
    assert "Python worker exited unexpectedly" in str(error) and "executor's stderr" in str(error)


def test_spark_failure_uses_the_mapping():
    from flowpoint.spark.epoch_launcher import spark_failure

    error = spark_failure(RuntimeError(py4j_text(in_task(InvalidKeyError("bad key [1]")))), 3)
    assert type(error) is InvalidKeyError and str(error) == "bad key [1]"


# -- unit: which errors a restart can fix ------------------------------------------------------------

RECOVERABLE = {  # by class name: every error class must be here (its flag decided)
    "FlowpointError": True,
    "ConfigurationError": False,
    "InsecurePathError": False,
    "JobGraphError": False,
    "SerializationError": False,
    "InvalidKeyError": False,
    "StateError": False,
    "StateAccessError": False,
    "StateMigrationError": False,
    "StateNotFoundError": False,
    "CorruptStateError": False,
    "JobExecutionError": True,
    "UserFunctionError": True,
    "JobCancelledError": False,
    "CheckpointError": True,
    "StateDecodeError": False,
    "CorruptSinkFileError": False,
    "UntrustedStateError": False,  # a _metadata not signed by this installation: no restart changes who wrote it
    "JobScriptSyntaxError": False,
    "StateIOError": True,
    "UnsupportedApiError": False,
}


def test_every_error_class_says_whether_a_restart_can_fix_it():
    undecided = {c.__name__ for c in ALL_ERRORS} - set(RECOVERABLE)
    assert not undecided, f"a new error class needs its recoverable flag decided: {undecided}"
    for cls in ALL_ERRORS:
        recoverable = RECOVERABLE[cls.__name__]
        assert cls.recoverable is recoverable, cls
        assert is_recoverable(cls("x")) is recoverable, cls
        assert restarts_module.restartable(cls("x")) is recoverable, cls


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_retryable_is_another_name_of_recoverable(cls):
    """DESIGN 10a and issue 10 call the flag ``retryable``: the same flag, class and instance."""
    assert cls.retryable is RECOVERABLE[cls.__name__]
    error = cls("x")
    assert error.retryable is error.recoverable is RECOVERABLE[cls.__name__]
    error.retryable = not error.retryable  # one error may say otherwise than its class
    assert error.recoverable is (not RECOVERABLE[cls.__name__]) and is_recoverable(error) is error.retryable
    assert cls.retryable is RECOVERABLE[cls.__name__]  # the class is unchanged


def test_state_not_found_is_a_state_error_naming_the_file():
    error = StateNotFoundError("the committed state file s3://b/ck/2-1/epoch-7.delta of stage 2 partition 1 is missing")
    assert isinstance(error, StateError) and isinstance(error, FlowpointError) and not is_recoverable(error)
    assert issubclass(StateAccessError, StateError)


def test_restartable_for_other_exceptions():
    assert is_recoverable(RuntimeError("spark lost an executor"))
    assert is_recoverable(OSError("connection reset"))
    assert not is_recoverable(KeyboardInterrupt())
    assert not is_recoverable(SystemExit(1))
    # a non-recoverable error that is the explicit cause of another is not restarted either
    wrapped = JobExecutionError("epoch 3 failed")
    wrapped.__cause__ = StateNotFoundError("missing file")
    assert not is_recoverable(wrapped)
    context_only = JobExecutionError("epoch 3 failed")
    context_only.__context__ = InvalidKeyError("bad")
    assert is_recoverable(context_only)


@pytest.mark.parametrize("cls", ALL_ERRORS, ids=lambda c: c.__name__)
def test_errors_keep_class_and_message_through_pickle(cls):
    """Task acknowledgements carry errors to the driver pickled (the accumulator path)."""
    back = pickle.loads(pickle.dumps(cls("the message\nline 2")))
    assert type(back) is cls and str(back) == "the message\nline 2" and back.recoverable is cls.recoverable


# -- end to end ----------------------------------------------------------------------------------


@pytest.fixture
def verdicts(monkeypatch):
    """Every ``restartable`` decision of the coordinator: ``[(error, restartable)]``."""
    seen: list[tuple[BaseException, bool]] = []
    original = restarts_module.restartable

    def recording(error):
        verdict = original(error)
        seen.append((error, verdict))
        return verdict

    monkeypatch.setattr(restarts_module, "restartable", recording)
    return seen


def restarting_env(make_env, tmp_path, parallelism=2, max_records=None):
    """Checkpointing on, and a restart strategy that would restart (almost) without end."""
    env = make_env(parallelism=parallelism, max_records=max_records, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(500)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1_000_000, 100))
    return env


def count_call(path: str) -> None:
    with open(path, "a") as f:  # one character per call
        f.write("x")


def calls(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


class Opaque:
    """A value without canonical bytes: not a key (lists, dicts and sets are keys, as in PyFlink)."""

    def __init__(self, v):
        self.v = v


def test_an_invalid_key_fails_at_once_with_checkpointing_and_restarts(make_env, tmp_path, verdicts):
    selector_calls = str(tmp_path / "selector-calls")

    def list_key(x):
        count_call(selector_calls)
        return Opaque(x % 2)  # no canonical bytes: no restart makes it a key

    env = restarting_env(make_env, tmp_path)
    env.from_collection([1, 2, 3]).key_by(list_key).map(lambda x: x).name("after-list-key").sink_to(CollectSink())
    started = time.monotonic()
    with pytest.raises(InvalidKeyError) as info:
        env.execute("invalid key, restarts on")
    assert time.monotonic() - started < 120
    assert "list_key" in str(info.value) and "after-list-key" in str(info.value) and "Opaque" in str(info.value)
    assert [(type(e), v) for e, v in verdicts] == [(InvalidKeyError, False)]
    assert calls(selector_calls) == 3  # one run, one attempt: neither Spark nor the job retried


LIST_KEY_JOB = """
import sys
from flowpoint import CollectSink, KeyedProcessFunction, StreamExecutionEnvironment, ValueStateDescriptor

class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n"))

    def process_element(self, value, ctx):
        self.n.update((self.n.value() or 0) + 1)
        yield value

CALLS = sys.argv[1]

class Opaque:  # no canonical bytes (a list is a key, as in PyFlink; this is not)
    def __init__(self, v):
        self.v = v

def list_key(x):
    with open(CALLS, "a") as f:
        f.write("x")
    return Opaque(x % 3)

env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.enable_checkpointing(100)
env.from_collection(list(range(6))).key_by(list_key).process(Count()).name("counting").uid("counting").sink_to(CollectSink())
env.execute("list key")
"""


@pytest.mark.slow
@pytest.mark.parametrize("strategy", [
    [],  # the default with checkpointing: exponential delay, unlimited attempts
    ["-D", "restart-strategy.type=fixed-delay", "-D", "restart-strategy.fixed-delay.attempts=7", "-D", "restart-strategy.fixed-delay.delay=1 s"],
], ids=["default-exponential-delay", "fixed-delay-7"])
def test_the_issue_s_list_key_job_fails_once_quickly_on_local_2(tmp_path, strategy):
    """Issue 10, case 8, as reported: `flowpoint run` on local[2], checkpointing on, a key selector
    returning a list, a restart strategy with several attempts. It fails once, at once, with
    InvalidKeyError's message naming the operator and the selector; nothing restarts."""
    job = tmp_path / "list_key_job.py"
    job.write_text(textwrap.dedent(LIST_KEY_JOB))
    selector_calls = tmp_path / "selector-calls"
    cli = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[2]", "-D", f"state.checkpoints.dir={tmp_path / 'ck'}",
           "-D", f"state.working.dir={tmp_path / 'w'}", *strategy, str(job), str(selector_calls)]
    started = time.monotonic()
    proc = subprocess.run(cli, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    elapsed = time.monotonic() - started
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("flowpoint: error:")]
    assert len(errors) == 1, proc.stderr[-3000:]
    assert "key selector (list_key at " in errors[0] and "operator 'counting'" in errors[0] and "got a Opaque" in errors[0]
    assert "Restarting" not in proc.stderr and "FAILED" in proc.stderr
    assert calls(str(selector_calls)) == 6  # each record once: one run, one attempt (local[2]: no task retries)
    assert elapsed < 90


class TwoKindsOfOneState(KeyedProcessFunction):
    """Declares one state name as value state and as list state: a state type error."""

    def __init__(self, opens: str):
        self.opens = opens

    def open(self, ctx):
        count_call(self.opens)
        self.value = ctx.get_state(ValueStateDescriptor("seen"))
        self.values = ctx.get_list_state(ListStateDescriptor("seen"))

    def process_element(self, value, ctx):
        yield value


def test_a_state_type_error_fails_at_once_with_checkpointing_and_restarts(make_env, tmp_path, verdicts):
    opens = str(tmp_path / "opens")
    env = restarting_env(make_env, tmp_path, parallelism=1)
    env.from_collection(list(range(10))).key_by(lambda x: x % 3).process(TwoKindsOfOneState(opens)).uid("two-kinds").sink_to(CollectSink())
    started = time.monotonic()
    with pytest.raises(StateAccessError) as info:
        env.execute("state type error, restarts on")
    assert time.monotonic() - started < 120
    assert "'seen'" in str(info.value) and "list state" in str(info.value) and "value state" in str(info.value)
    assert [(type(e), v) for e, v in verdicts] == [(StateAccessError, False)]
    assert calls(opens) == 1


def test_a_record_that_cannot_be_pickled_fails_at_once(make_env, tmp_path, verdicts):
    """The error crosses Spark as text (Spark retried the task): it still fails the job at once."""
    maps = str(tmp_path / "maps")

    def with_lock(x):
        count_call(maps)
        return (x % 2, threading.Lock())

    env = restarting_env(make_env, tmp_path, parallelism=1)
    env.from_collection([1, 2, 3]).map(with_lock).key_by(lambda t: t[0]).map(lambda t: t[0]).sink_to(CollectSink())
    with pytest.raises(SerializationError) as info:
        env.execute("unpicklable record, restarts on")
    assert "cannot pickle '_thread.lock' object" in str(info.value)
    assert [(type(e), v) for e, v in verdicts] == [(SerializationError, False)]
    assert 3 <= calls(maps) <= 3 * 4  # Spark's attempts of one run, no restart of the job


class KeepsALock(KeyedProcessFunction):
    """Puts a threading.Lock into keyed state (value state, or a map state entry): it cannot be
    pickled, so the epoch's state cannot be written."""

    def __init__(self, kind: str, calls_path: str):
        self.kind = kind
        self.calls_path = calls_path

    def open(self, ctx):
        count_call(self.calls_path)
        if self.kind == "value":
            self.guard = ctx.get_state(ValueStateDescriptor("guard"))
        else:
            self.guards = ctx.get_map_state(MapStateDescriptor("guards"))

    def process_element(self, value, ctx):
        if self.kind == "value":
            self.guard.update(threading.Lock() if value == 7 else value)
        else:
            self.guards.put(f"entry-{value}", threading.Lock() if value == 7 else value)
        yield value


@pytest.mark.parametrize(("backend", "kind"), [("hashmap", "value"), ("rocksdb", "value"), ("rocksdb", "map"), ("hashmap", "map")])
def test_a_state_value_that_cannot_be_pickled_names_operator_uid_state_key_and_function(make_env, tmp_path, verdicts, backend, kind):
    """Issue 10, case 9: a lock in keyed state fails the job at once with a SerializationError
    naming the operator, its uid, the user function, the state name and the key (and the map
    entry's user key), on both backends, with checkpointing and restarts on."""
    opens = str(tmp_path / "opens")
    env = restarting_env(make_env, tmp_path, parallelism=1)
    env.get_configuration().set("state.backend.type", backend)
    (env.from_collection(list(range(10))).key_by(lambda x: f"key-{x % 3}")
        .process(KeepsALock(kind, opens)).name("locking").uid("locking-uid").sink_to(CollectSink()))
    with pytest.raises(SerializationError) as info:
        env.execute(f"unpicklable state value ({backend}, {kind})")
    msg = str(info.value)
    assert "operator 'locking'" in msg and "uid 'locking-uid'" in msg, msg
    assert f"KeepsALock at {__file__}:" in msg, msg
    state = "'guard'" if kind == "value" else "'guards'"
    assert f"state {state} for key 'key-1'" in msg, msg  # 7 % 3 == 1
    if kind == "map":
        assert "user key 'entry-7'" in msg, msg
    assert "cannot pickle '_thread.lock' object" in msg and "open()" in msg, msg
    assert [(type(e), v) for e, v in verdicts] == [(SerializationError, False)]
    assert calls(opens) == 1  # one run, one attempt: not restarted


class BuffersALock(MapFunction, CheckpointedFunction):
    """Puts a threading.Lock into its operator list state at every snapshot."""

    def __init__(self, calls_path: str):
        self.calls_path = calls_path

    def initialize_state(self, context):
        count_call(self.calls_path)
        self.buffered = context.get_operator_state_store().get_list_state(ListStateDescriptor("buffered"))

    def snapshot_state(self, context):
        self.buffered.update([1, threading.Lock()])

    def map(self, value):
        return value


def test_an_operator_state_value_that_cannot_be_pickled_fails_at_once_naming_it(make_env, tmp_path, verdicts):
    """Operator state goes back to the driver with the task's acknowledgement: unpicklable, it
    crashed the Python worker (a "lost worker", restarted without end). It is now a
    SerializationError naming the operator, uid, function and state, and not restarted."""
    inits = str(tmp_path / "inits")
    env = restarting_env(make_env, tmp_path, parallelism=1)
    env.from_collection(list(range(10))).map(BuffersALock(inits)).name("buffering").uid("buffering-uid").sink_to(CollectSink())
    started = time.monotonic()
    with pytest.raises(SerializationError) as info:
        env.execute("unpicklable operator state")
    msg = str(info.value)
    assert "operator 'buffering'" in msg and "uid 'buffering-uid'" in msg and f"BuffersALock at {__file__}:" in msg, msg
    assert "operator state 'buffered' (element 1)" in msg and "cannot pickle '_thread.lock' object" in msg, msg
    assert [(type(e), v) for e, v in verdicts] == [(SerializationError, False)]
    assert calls(inits) == 1 and time.monotonic() - started < 120


EVENTS = 600
FAIL_VALUE = 450 * 7919 % 100_003  # the record at index 450


def test_a_transient_user_failure_is_restarted_and_results_are_exact(make_env, tmp_path, monkeypatch):
    """A user function fails on every Spark attempt until the job restarted (the driver's
    restart decision removes the cause): the job restarts from its last checkpoint and its
    state and outputs are exactly those of a run without failure."""
    flag = str(tmp_path / "fixed")
    decisions: list[tuple[BaseException, bool]] = []
    original = restarts_module.restartable

    def restart_fixes_it(error):
        verdict = original(error)
        decisions.append((error, verdict))
        if verdict:
            open(flag, "w").close()  # what a restart on healthy resources would do
        return verdict

    monkeypatch.setattr(restarts_module, "restartable", restart_fixes_it)
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1_000_000, 100))
    sink = build(env, EVENTS, function=Counting(fail_value=FAIL_VALUE, flag=flag, fail_times=10**9))
    result = env.execute("transient failure")
    assert [(type(e), v) for e, v in decisions] == [(UserFunctionError, True)]
    error = decisions[0][0]
    assert f"injected failure at record {FAIL_VALUE}" in str(error) and "Counting at " in str(error)
    assert calls(flag + ".failures") >= 1
    state = result.get_keyed_state("counting")
    assert {"count": state.get("count", {}), "by_digit": state.get("by_digit", {})} == expected_state(EVENTS)
    assert sorted(sink.results) == expected_outputs(EVENTS)
