"""Async I/O: ``AsyncDataStream.unordered_wait/ordered_wait(stream, AsyncFunction, timeout, capacity)``.

An :class:`AsyncFunction` has ``async def async_invoke(self, value) -> list`` (a coroutine, as in
PyFlink 2): a lookup in a database or a call to a service. Each task runs the calls of a batch of
records concurrently on an asyncio event loop, at most ``capacity`` at a time, each bounded by
``timeout`` (all attempts together); a call that times out gives ``timeout(value)``'s records
(by default it fails the job with ``TimeoutError``). ``ordered_wait`` emits results in input
order, ``unordered_wait`` as calls complete; either way results never move across a watermark,
and each keeps its input record's timestamp. With a retry strategy
(``AsyncRetryStrategy.fixed_delay(...)`` / ``exponential_backoff(...)``) a call whose result or
exception matches the strategy's predicate is made again after the backoff.

Exactly once: the calls of an epoch's records complete before the epoch ends, so no call is in
flight at a checkpoint; after a failure the epochs since the last checkpoint run again and
their calls are made again (as Flink re-issues in-flight requests on restore).
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from flowpoint.api.datastream import DataStream
from flowpoint.api.functions import Function, RuntimeContextAware
from flowpoint.api.time import Duration, to_millis
from flowpoint.errors import ConfigurationError, JobGraphError

if TYPE_CHECKING:
    from flowpoint.api.datastream import DataStream
    from flowpoint.api.types import TypeInformation

IN = TypeVar("IN")
OUT = TypeVar("OUT")


class AsyncFunction(Function, RuntimeContextAware, Generic[IN, OUT]):
    @abstractmethod
    async def async_invoke(self, value: IN) -> list[OUT]:
        """The records for ``value`` (raise to fail the task)."""

    def timeout(self, value: IN) -> list[OUT]:
        """The call for ``value`` did not complete in time; by default the job fails."""
        msg = f"Async function call has timed out for input: {value}"
        raise TimeoutError(msg)


class AsyncRetryPredicate(Generic[OUT]):
    @abstractmethod
    def result_predicate(self) -> Callable[[list[OUT]], bool] | None: ...

    @abstractmethod
    def exception_predicate(self) -> Callable[[Exception], bool] | None: ...


class RetryPredicate(AsyncRetryPredicate):
    def __init__(self, result_predicate: Callable | None, exception_predicate: Callable | None):
        self._result_predicate = result_predicate
        self._exception_predicate = exception_predicate

    def result_predicate(self) -> Callable | None:
        return self._result_predicate

    def exception_predicate(self) -> Callable | None:
        return self._exception_predicate


# PyFlink's ``pyflink.datastream.async_retry_predicates``: predicates for a RetryPredicate


def empty_result_predicate(result: list | None) -> bool:
    """Retry when the call returned nothing."""
    return result is None or len(result) == 0


def has_exception_predicate(error: BaseException | None) -> bool:
    """Retry when the call raised."""
    return error is not None


def exception_type_predicate(error: BaseException | None, expected_error_type: type) -> bool:
    """Retry when the call raised ``expected_error_type``."""
    return isinstance(error, expected_error_type)


class AsyncRetryStrategy(Generic[OUT]):
    @abstractmethod
    def can_retry(self, current_attempts: int) -> bool: ...

    @abstractmethod
    def get_backoff_time_millis(self, current_attempts: int) -> int: ...

    @abstractmethod
    def get_retry_predicate(self) -> AsyncRetryPredicate[OUT]: ...

    @staticmethod
    def no_restart() -> AsyncRetryStrategy:
        return NO_RETRY_STRATEGY

    @staticmethod
    def fixed_delay(max_attempts: int, backoff_time_millis: int, result_predicate: Callable | None,
                    exception_predicate: Callable | None) -> AsyncRetryStrategy:
        return FixedDelayRetryStrategy(max_attempts, backoff_time_millis, result_predicate, exception_predicate)

    @staticmethod
    def exponential_backoff(max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                            result_predicate: Callable | None, exception_predicate: Callable | None) -> AsyncRetryStrategy:
        return ExponentialBackoffDelayRetryStrategy(max_attempts, initial_delay, max_retry_delay, multiplier,
                                                    result_predicate, exception_predicate)


def _positive(value: Any, what: str) -> None:
    if not isinstance(value, (int, float)) or isinstance(value, bool) or value <= 0:
        msg = f"async retry strategy: {what} must be greater than zero; got {value!r}"
        raise ConfigurationError(msg)


class NoRetryStrategy(AsyncRetryStrategy):
    def can_retry(self, current_attempts: int) -> bool:
        return False

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return -1

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return RetryPredicate(None, None)


class FixedDelayRetryStrategy(AsyncRetryStrategy):
    def __init__(self, max_attempts: int, backoff_time_millis: int, result_predicate: Callable | None, exception_predicate: Callable | None):
        _positive(max_attempts, "max_attempts")
        _positive(backoff_time_millis, "backoff_time_millis")
        self._max_attempts = max_attempts
        self._backoff = backoff_time_millis
        self._predicate = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        return self._backoff

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


class ExponentialBackoffDelayRetryStrategy(AsyncRetryStrategy):
    def __init__(self, max_attempts: int, initial_delay: int, max_retry_delay: int, multiplier: float,
                 result_predicate: Callable | None, exception_predicate: Callable | None):
        for what, value in (("max_attempts", max_attempts), ("initial_delay", initial_delay),
                            ("max_retry_delay", max_retry_delay), ("multiplier", multiplier)):
            _positive(value, what)
        self._max_attempts = max_attempts
        self._initial = initial_delay
        self._max_delay = max_retry_delay
        self._multiplier = multiplier
        self._predicate = RetryPredicate(result_predicate, exception_predicate)

    def can_retry(self, current_attempts: int) -> bool:
        return current_attempts <= self._max_attempts

    def get_backoff_time_millis(self, current_attempts: int) -> int:
        """``initial_delay * multiplier^(attempts - 1)``, at most ``max_retry_delay`` (computed
        from the attempt number, so concurrent calls do not share a delay)."""
        return int(min(self._initial * self._multiplier ** max(0, current_attempts - 1), self._max_delay))

    def get_retry_predicate(self) -> AsyncRetryPredicate:
        return self._predicate


NO_RETRY_STRATEGY: AsyncRetryStrategy = NoRetryStrategy()


class AsyncDataStream:
    """Static methods putting an :class:`AsyncFunction` on a stream."""

    @staticmethod
    def unordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration | int,
                       capacity: int = 100, output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._add(data_stream, async_function, timeout, NO_RETRY_STRATEGY, capacity, output_type, ordered=False)

    @staticmethod
    def unordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration | int,
                                  async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                  output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._add(data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, ordered=False)

    @staticmethod
    def ordered_wait(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration | int,
                     capacity: int = 100, output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._add(data_stream, async_function, timeout, NO_RETRY_STRATEGY, capacity, output_type, ordered=True)

    @staticmethod
    def ordered_wait_with_retry(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration | int,
                                async_retry_strategy: AsyncRetryStrategy, capacity: int = 100,
                                output_type: TypeInformation | None = None) -> DataStream:
        return AsyncDataStream._add(data_stream, async_function, timeout, async_retry_strategy, capacity, output_type, ordered=True)

    @staticmethod
    def _add(data_stream: DataStream, async_function: AsyncFunction, timeout: Duration | int, strategy: AsyncRetryStrategy,
             capacity: int, output_type: TypeInformation | None, ordered: bool) -> DataStream:
        if not isinstance(async_function, AsyncFunction):
            msg = f"AsyncDataStream needs an AsyncFunction (with async def async_invoke(self, value)); got {type(async_function).__name__}"
            raise JobGraphError(msg)
        timeout_ms = to_millis(timeout, "the async timeout")
        if timeout_ms <= 0:
            msg = f"the async timeout must be positive; got {timeout_ms} ms"
            raise ConfigurationError(msg)
        if not isinstance(capacity, int) or isinstance(capacity, bool) or capacity < 1:
            msg = f"the async capacity must be a positive int; got {capacity!r}"
            raise ConfigurationError(msg)
        if not isinstance(strategy, AsyncRetryStrategy):
            msg = f"the async retry strategy must come from AsyncRetryStrategy (no_restart(), fixed_delay(...), exponential_backoff(...)); got {strategy!r:.80}"
            raise ConfigurationError(msg)
        t = data_stream._add("async_wait", "Async Wait" + (" (ordered)" if ordered else ""), async_function, output_type)
        t.options.update(timeout_ms=timeout_ms, capacity=capacity, ordered=ordered, retry=strategy)
        return DataStream(data_stream._env, t)
