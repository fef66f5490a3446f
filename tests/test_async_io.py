"""Async I/O: order, capacity, timeouts, retries and errors, and exactly once through a failure."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from flowpoint import (
    AsyncDataStream,
    AsyncFunction,
    AsyncRetryStrategy,
    CollectSink,
    DataGeneratorSource,
    RestartStrategies,
    Time,
    Types,
)
from flowpoint.errors import ConfigurationError, JobExecutionError, JobGraphError, UserFunctionError


class Echo(AsyncFunction):
    """Answers later for smaller values; records how many calls ran at once."""

    def __init__(self, log_dir=None):
        self.log_dir = log_dir

    def open(self, runtime_context):
        self.running = 0
        self.most = 0

    async def async_invoke(self, value):
        self.running += 1
        self.most = max(self.most, self.running)
        await asyncio.sleep(0.002 * (10 - value % 10))
        self.running -= 1
        if self.log_dir:
            with open(os.path.join(self.log_dir, f"most-{os.getpid()}-{id(self)}"), "w") as f:
                f.write(str(self.most))
        return [value]


def run(make_env, stream_fn, values, **env_options):
    env = make_env(parallelism=1, **env_options)
    sink = CollectSink()
    stream_fn(env.from_collection(values, type_info=Types.INT())).sink_to(sink)
    env.execute()
    return sink.results


def test_ordered_wait_keeps_input_order_and_unordered_does_not(make_env):
    values = list(range(20))
    ordered = run(make_env, lambda ds: AsyncDataStream.ordered_wait(ds, Echo(), Time.seconds(5), 20), values)
    assert ordered == values
    unordered = run(make_env, lambda ds: AsyncDataStream.unordered_wait(ds, Echo(), Time.seconds(5), 20), values)
    assert sorted(unordered) == values and unordered != values  # completion order


def test_capacity_bounds_the_calls_in_flight(make_env, tmp_path):
    logs = tmp_path / "calls"
    logs.mkdir()
    run(make_env, lambda ds: AsyncDataStream.unordered_wait(ds, Echo(str(logs)), Time.seconds(5), 3), list(range(30)))
    most = max(int((logs / n).read_text()) for n in os.listdir(logs))
    assert most == 3


class Hang(AsyncFunction):
    async def async_invoke(self, value):
        await asyncio.sleep(30 if value == 2 else 0)
        return [value]


def test_a_timeout_fails_the_job_naming_the_operator_and_record_unless_timeout_answers(make_env):
    t0 = time.monotonic()
    with pytest.raises((UserFunctionError, JobExecutionError), match=r"(?s)Async Wait.*TimeoutError.*timed out for input: 2"):
        run(make_env, lambda ds: AsyncDataStream.unordered_wait(ds, Hang(), Time.milliseconds(200)), [1, 2, 3])
    assert time.monotonic() - t0 < 25  # the timeout, not the 30 s call

    class Answer(Hang):
        def timeout(self, value):
            return [-value]

    assert sorted(run(make_env, lambda ds: AsyncDataStream.unordered_wait(ds, Answer(), Time.milliseconds(200)), [1, 2, 3])) == [-2, 1, 3]


class Unreliable(AsyncFunction):
    """Fails its first two calls for each value with ConnectionError."""

    def open(self, runtime_context):
        self.calls = {}

    async def async_invoke(self, value):
        self.calls[value] = self.calls.get(value, 0) + 1
        if self.calls[value] <= 2:
            raise ConnectionError(f"try again ({self.calls[value]})")
        return [(value, self.calls[value])]


def test_retries_on_exceptions_with_exponential_backoff(make_env):
    retry = AsyncRetryStrategy.exponential_backoff(3, 5, 50, 2.0, None, lambda e: isinstance(e, ConnectionError))
    got = run(make_env, lambda ds: AsyncDataStream.ordered_wait_with_retry(ds, Unreliable(), Time.seconds(5), retry), [1, 2])
    assert got == [(1, 3), (2, 3)]
    too_few = AsyncRetryStrategy.fixed_delay(2, 5, None, lambda e: isinstance(e, ConnectionError))
    with pytest.raises((UserFunctionError, JobExecutionError), match="ConnectionError.*try again"):
        run(make_env, lambda ds: AsyncDataStream.unordered_wait_with_retry(ds, Unreliable(), Time.seconds(5), too_few), [1])


def test_bad_arguments_are_refused(make_env):
    env = make_env()
    ds = env.from_collection([1])
    with pytest.raises(JobGraphError, match="AsyncFunction"):
        AsyncDataStream.unordered_wait(ds, lambda x: [x], Time.seconds(1))
    with pytest.raises(ConfigurationError, match="capacity"):
        AsyncDataStream.unordered_wait(ds, Echo(), Time.seconds(1), 0)
    with pytest.raises(ConfigurationError, match="timeout"):
        AsyncDataStream.unordered_wait(ds, Echo(), 0)
    with pytest.raises(ConfigurationError, match="max_attempts"):
        AsyncRetryStrategy.fixed_delay(0, 10, None, None)


class FailOnceAfter(AsyncFunction):
    def __init__(self, flag, at):
        self.flag, self.at = flag, at

    async def async_invoke(self, value):
        if value == self.at and not os.path.exists(self.flag):
            open(self.flag, "w").close()
            raise RuntimeError("injected")
        return [value]


@pytest.mark.slow
def test_exactly_once_through_a_failure(make_env, tmp_path):
    """The job fails mid-way and restarts from its last checkpoint: the replayed epochs' calls
    are made again and every result reaches the exactly-once sink once."""
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    sink = CollectSink()
    flag = str(tmp_path / "failed")
    src = env.from_source(DataGeneratorSource(lambda i: i, count=600), source_name="n").uid("n")
    AsyncDataStream.unordered_wait(src, FailOnceAfter(flag, 450), Time.seconds(5)).uid("async").sink_to(sink).uid("out")
    env.execute()
    assert os.path.exists(flag)
    assert sorted(sink.results) == list(range(600))
