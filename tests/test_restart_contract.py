"""The restart strategy is Flink's contract (docs/errors.md, "Restarts"): every recoverable
failure restarts the job as the strategy allows, whatever the exception's class; a failure that
recurs on the same record is named with its count; failing fast on such a repeat is the user's
choice (``restart-strategy.repeated-failure.fail-fast``), by default (no strategy set) only for
Python's data errors. And a user function runs once per record per attempt: finding the record
that failed never calls anything again, so side effects (an HTTP call, a payment) happen once."""

from __future__ import annotations

import os

import pytest

from flowpoint import (
    CollectSink,
    DataGeneratorSource,
    MapFunction,
    RestartStrategies,
    StreamExecutionEnvironment,
)
from flowpoint.api.restart import resolve_repeated_failure
from flowpoint.driver.restarts import RepeatedFailures
from flowpoint.errors import ConfigurationError, UserFunctionError
from flowpoint.tasks.user_errors import user_function_error

TARGET = 250  # the record the service fails on (in the middle of its batch of 100)
COUNT = 300


class ServiceUnavailable(Exception):  # noqa: N818 - what a client library of a service raises
    pass


def _calls(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


class FlakyService(MapFunction):
    """Calls a service for each record: the service is down for the first ``down_for`` calls on
    record ``TARGET`` (raising ``error``). A call on a record this attempt already called is a
    repeated side effect: it is written to ``dups``."""

    def __init__(self, down_for: int, failures: str, dups: str, error: type):
        self.down_for, self.failures, self.dups, self.error = down_for, failures, dups, error

    def open(self, runtime_context):
        self.called: set[int] = set()  # this attempt's calls (open() runs at every (re)start)

    def map(self, value):
        if value in self.called:
            with open(self.dups, "a") as f:
                f.write(f"{value}\n")
        self.called.add(value)
        if value == TARGET and _calls(self.failures) < self.down_for:
            with open(self.failures, "a") as f:
                f.write("x")
            msg = f"service down while handling {value}"
            raise self.error(msg)
        return value * 10


def _job(make_env, tmp_path, runtime: str, error: type, down_for: int, strategy=None, **config):
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"), execution_runtime=runtime)
    env.enable_checkpointing(50)
    if strategy is not None:
        env.set_restart_strategy(strategy)
    for key, value in config.items():
        env.get_configuration().set(key, value)
    sink = CollectSink()
    failures, dups = str(tmp_path / "failures"), str(tmp_path / "dups")
    env.from_source(DataGeneratorSource(lambda i: i, count=COUNT), source_name="numbers").uid("numbers") \
        .map(FlakyService(down_for, failures, dups, error)).name("enrich").uid("enrich").set_parallelism(1) \
        .sink_to(sink)
    return env, sink, failures, dups


# -- every failure restarts as the strategy allows, whatever its class ---------------------------


@pytest.mark.slow
@pytest.mark.parametrize(("runtime", "error"), [
    ("continuous", RuntimeError), ("continuous", ConnectionError), ("continuous", ServiceUnavailable), ("epoch", RuntimeError),
])
def test_a_service_down_for_four_calls_rides_out_on_fixed_delay(make_env, tmp_path, runtime, error, capsys):
    env, sink, failures, dups = _job(make_env, tmp_path, runtime, error, 4, RestartStrategies.fixed_delay_restart(10, 100))
    env.get_configuration().set("execution.progress.interval", 0)  # the restart lines are printed
    client = env.execute_async("flaky service")
    client.wait(300)
    out = capsys.readouterr()
    said = out.out + out.err
    assert "failed: operator 'enrich'" in said and "failed again on the same record (4th time in a row)" in said, said[-3000:]
    assert _calls(failures) == 4 and client.progress().restarts == 4
    assert sorted(sink.results) == [v * 10 for v in range(COUNT)]  # exact after four restarts
    assert not os.path.exists(dups), f"records called twice in one attempt: {open(dups).read().split()[:10]}"
    history = client.get_exception_history()
    assert [h.repeat for h in history] == [1, 2, 3, 4] and all(h.restarted for h in history)
    assert history[-1].operator == "enrich" and history[-1].uid == "enrich"


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["continuous", "epoch"])
def test_a_service_down_for_twelve_calls_rides_out_on_the_default_strategy(make_env, tmp_path, runtime):
    """No strategy set, checkpointing on: exponential delay without a limit (its delays shortened
    by its own keys, which leave the strategy unset), and a custom exception is no data error."""
    fast = {"restart-strategy.exponential-delay.initial-backoff": "20 ms", "restart-strategy.exponential-delay.max-backoff": "50 ms"}
    env, sink, failures, dups = _job(make_env, tmp_path, runtime, ServiceUnavailable, 12, **fast)
    client = env.execute_async("flaky service, default strategy")
    client.wait(300)
    assert _calls(failures) == 12 and client.progress().restarts == 12
    assert sorted(sink.results) == [v * 10 for v in range(COUNT)]
    assert not os.path.exists(dups)
    assert [h.repeat for h in client.get_exception_history()][-3:] == [10, 11, 12]


@pytest.mark.slow
def test_the_strategys_limit_ends_the_job_not_the_repeat(make_env, tmp_path):
    """fixed_delay_restart(10, ...) and a service down for longer: ten restarts, then the error."""
    env, _, failures, dups = _job(make_env, tmp_path, "continuous", RuntimeError, 100, RestartStrategies.fixed_delay_restart(10, 50))
    client = env.execute_async("service down for good")
    with pytest.raises(UserFunctionError) as info:
        client.wait(300)
    assert _calls(failures) == 11 and client.progress().restarts == 10
    assert "service down while handling 250" in str(info.value) and "operator 'enrich'" in str(info.value)
    assert client.get_exception_history()[-1].repeat == 11 and not client.get_exception_history()[-1].restarted
    assert not os.path.exists(dups)


# -- failing fast on a repeat is the user's choice ------------------------------------------------


@pytest.mark.slow
def test_without_a_strategy_a_repeated_data_error_fails_fast_and_says_how_to_change_it(make_env, tmp_path, capsys):
    env, _, failures, _ = _job(make_env, tmp_path, "continuous", ValueError, 100)
    env.get_configuration().set("execution.progress.interval", 0)  # the progress lines are printed
    with pytest.raises(UserFunctionError, match="ValueError: service down while handling 250"):
        env.execute("a data error")
    assert _calls(failures) == 2
    out = capsys.readouterr()
    said = out.out + out.err
    assert "failed again on the same record the same way (2nd time in a row)" in said, said[-2000:]
    assert "restart-strategy.repeated-failure.fail-fast is data-errors (the default when no restart strategy is set)" in said
    assert "-Drestart-strategy.repeated-failure.fail-fast=none" in said


@pytest.mark.slow
def test_a_repeated_data_error_restarts_when_the_user_says_none(make_env, tmp_path):
    env, sink, failures, _ = _job(make_env, tmp_path, "epoch", ValueError, 3, **{
        "restart-strategy.repeated-failure.fail-fast": "none",
        "restart-strategy.exponential-delay.initial-backoff": "20 ms",
    })
    env.execute("a data error that passes")
    assert _calls(failures) == 3
    assert sorted(sink.results) == [v * 10 for v in range(COUNT)]


@pytest.mark.slow
def test_fail_fast_all_fails_on_a_repeated_connection_error_despite_the_strategy(make_env, tmp_path):
    env, _, failures, _ = _job(make_env, tmp_path, "continuous", ConnectionError, 100, RestartStrategies.fixed_delay_restart(10, 50),
                               **{"restart-strategy.repeated-failure.fail-fast": "all"})
    with pytest.raises(UserFunctionError, match="ConnectionError"):
        env.execute("fail fast")
    assert _calls(failures) == 2


# -- the policy, without Spark ------------------------------------------------------------------


def _failure(exc: BaseException, record: object = 250) -> UserFunctionError:
    return user_function_error("op failed", exc, operator="enrich", uid="enrich", function="f at job.py:3", record=record)


@pytest.mark.parametrize(("exc", "data"), [
    (KeyError("k"), True), (IndexError("i"), True), (TypeError("t"), True), (ValueError("v"), True),
    (AttributeError("a"), True), (ZeroDivisionError("z"), True), (UnicodeDecodeError("utf-8", b"\xff", 0, 1, "bad"), True),
    (RuntimeError("r"), False), (ConnectionError("c"), False), (ServiceUnavailable("s"), False), (TimeoutError("t"), False),
])
def test_which_exceptions_are_data_errors(exc, data):
    assert _failure(exc).data_error is data


def test_repeats_are_counted_per_record_and_error():
    repeats = RepeatedFailures("data-errors")
    assert [repeats.count(_failure(ValueError("bad"))) for _ in range(3)] == [1, 2, 3]
    assert repeats.count(_failure(ValueError("bad"), record=251)) == 1  # another record: a new failure
    assert repeats.count(_failure(ValueError("other"), record=251)) == 1  # another message
    assert repeats.count(RuntimeError("not a user function's")) == 1
    assert repeats.count(RuntimeError("not a user function's")) == 1  # no identity: never a repeat


@pytest.mark.parametrize(("policy", "exc", "fails"), [
    ("none", ValueError("v"), False), ("none", RuntimeError("r"), False),
    ("data-errors", ValueError("v"), True), ("data-errors", RuntimeError("r"), False), ("data-errors", ConnectionError("c"), False),
    ("all", RuntimeError("r"), True), ("all", ConnectionError("c"), True),
])
def test_fail_fast_policy(policy, exc, fails):
    repeats = RepeatedFailures(policy, chosen=True)
    error = _failure(exc)
    assert not repeats.fails_fast(error, repeats.count(error))  # the first failure always restarts
    assert repeats.fails_fast(error, repeats.count(error)) is fails


def test_the_default_policy_depends_on_whether_a_strategy_is_set():
    env = StreamExecutionEnvironment.get_execution_environment()
    assert resolve_repeated_failure(env) == ("data-errors", False)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(10, 100))
    assert resolve_repeated_failure(env) == ("none", False)
    env = StreamExecutionEnvironment.get_execution_environment({"restart-strategy.type": "exponential-delay"})
    assert resolve_repeated_failure(env) == ("none", False)
    env = StreamExecutionEnvironment.get_execution_environment({"restart-strategy.repeated-failure.fail-fast": "ALL"})
    assert resolve_repeated_failure(env) == ("all", True)
    with pytest.raises(ConfigurationError, match="restart-strategy.repeated-failure.fail-fast"):
        StreamExecutionEnvironment.get_execution_environment({"restart-strategy.repeated-failure.fail-fast": "sometimes"})


# -- once per record per attempt ------------------------------------------------------------------


class _Spec:
    name, uid, kind, input_type = "enrich", "enrich", "map", None

    def __init__(self, function):
        self.function = function


def _counting(fail_at: int):
    calls: list[int] = []

    def f(x, *rest):
        calls.append(x)
        if x == fail_at:
            msg = f"down at {x}"
            raise RuntimeError(msg)
        return x

    return f, calls


def test_map_calls_the_function_once_per_record_when_one_fails():
    from flowpoint.tasks.operators import map_records

    f, calls = _counting(fail_at=5)
    with pytest.raises(UserFunctionError) as info:
        map_records(_Spec(f), f, list(range(10)))
    assert calls == [0, 1, 2, 3, 4, 5] and info.value.record == "5"


def test_a_key_selector_is_called_once_per_record_when_one_fails():
    from types import SimpleNamespace

    from flowpoint.tasks.operators import KeyedWriter

    f, calls = _counting(fail_at=3)
    writer = KeyedWriter.__new__(KeyedWriter)
    writer.edge = SimpleNamespace(parallelism=2, input_type=None, key_selector=f, target_name="sum", target_uid="sum", max_parallelism=128)
    writer.selector = SimpleNamespace(get_key=f)
    writer.columns = None
    with pytest.raises(UserFunctionError) as info:
        writer.process((0, 0, 0), list(range(10)), None)
    assert calls == [0, 1, 2, 3] and info.value.record == "3"


def test_a_timestamp_assigner_is_called_once_per_record_when_one_fails():
    from types import SimpleNamespace

    from flowpoint.tasks.event_time import TimestampsOp

    f, calls = _counting(fail_at=4)
    op = TimestampsOp.__new__(TimestampsOp)
    op.spec = SimpleNamespace(name="stamps", uid="stamps", kind="timestamps", function=f, input_type=None)
    op.assigner = SimpleNamespace(extract_timestamp=f)
    with pytest.raises(UserFunctionError) as info:
        op._timestamps(list(range(10)), None)
    assert calls == [0, 1, 2, 3, 4] and info.value.record == "4"



# -- a failure that reaches Spark only after the job finished -------------------------------------


@pytest.mark.slow
def test_a_spark_failure_noticed_after_the_final_commit_neither_restarts_nor_undoes_it(make_env, tmp_path, monkeypatch):
    """A lost executor's failure may reach Spark's scheduler only after the final barrier
    committed the job's output and state. Restarting then restored the last checkpoint and, the
    loop still marked finished, ended at once: the last segment's output and state were undone
    (and get_keyed_state read files the finished job's retention had deleted)."""
    from flowpoint.spark import continuous_launcher

    real = continuous_launcher.SparkContinuousLauncher._run
    runs = []

    def fails_after_the_end(self, slots, payload):
        real(self, slots, payload)
        runs.append(self.error)
        if len(runs) == 1 and self.error is None:
            self.error = RuntimeError("Job aborted due to stage failure: executor 1 lost (noticed after the job's end)")

    monkeypatch.setattr(continuous_launcher.SparkContinuousLauncher, "_run", fails_after_the_end)
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"), execution_runtime="continuous")
    env.enable_checkpointing(50)
    sink = CollectSink()
    env.from_source(DataGeneratorSource(lambda i: (i % 7, i), count=COUNT), source_name="numbers").uid("numbers") \
        .key_by(lambda t: t[0]).reduce(lambda a, b: (a[0], a[1] + b[1])).uid("sums").sink_to(sink)
    client = env.execute_async("failure after the end")
    result = client.wait(300)
    assert client.progress().restarts == 0 and len(runs) == 1
    assert len(sink.results) == COUNT  # one running sum per record, none undone
    finals: dict = {}
    for k, total in sink.results:
        finals[k] = max(finals.get(k, total), total)  # running sums only grow
    assert finals == {k: sum(range(k, COUNT, 7)) for k in range(7)}
    assert result.get_keyed_state("sums")  # the final state, readable after the end
