"""Restart strategies: PyFlink's ``RestartStrategies`` and the decisions the coordinator takes.

Users choose a strategy in code (``env.set_restart_strategy(RestartStrategies.fixed_delay_restart(3,
10000))``) or with ``restart-strategy.type`` and its keys (``-D``, ``flowpoint.yaml``); code wins.
With neither, a job with checkpointing restarts with exponential delay (Flink 1.19+'s default)
and a job without checkpointing does not restart.

The coordinator builds one :class:`RestartBackoff` per job run with ``resolve_restart_backoff``
and asks it, failure by failure, how long to wait before restarting, or whether to give up.
Times are milliseconds; ``now_ms`` is passed in, so decisions are deterministic in tests.
"""

from __future__ import annotations

import datetime
import random
from collections import deque
from dataclasses import dataclass
from typing import Any, Protocol

from flowpoint.api.config import Configuration, format_duration, parse_option
from flowpoint.errors import ConfigurationError

_FIXED = "restart-strategy.fixed-delay."
_RATE = "restart-strategy.failure-rate."
_EXP = "restart-strategy.exponential-delay."


def _checked(key: str, value: Any, param: str, optional: bool = False) -> Any:
    """``value`` validated as config ``key`` would be; the message names the parameter too."""
    if value is None and not optional:
        msg = f"{param} ({key}) must be set"
        raise ConfigurationError(msg)
    try:
        return parse_option(key, value)
    except ConfigurationError as e:
        msg = f"{param}: {e}"
        raise ConfigurationError(msg) from None


def _timedelta(ms: int) -> datetime.timedelta:
    return datetime.timedelta(milliseconds=ms)


# -- the decision objects the coordinator uses ----------------------------------------------------


class RestartBackoff:
    """Whether and when a failed job restarts; one object per job run, fed every failure."""

    def on_failure(self, now_ms: int) -> int | None:
        """The job failed at ``now_ms``: ms to wait before restarting, or None to fail the job."""
        raise NotImplementedError

    def on_success(self, now_ms: int) -> None:
        """The job made progress at ``now_ms`` (e.g. a checkpoint completed).

        None of Flink's strategies changes its decisions on this: exponential delay measures a
        healthy run as the time since the last restart, which ``on_failure`` sees anyway.
        """

    def describe(self) -> str:
        raise NotImplementedError


class NoRestartBackoff(RestartBackoff):
    def on_failure(self, now_ms: int) -> int | None:
        return None

    def describe(self) -> str:
        return "none (no restarts)"


class FixedDelayBackoff(RestartBackoff):
    """Restart ``attempts`` times, ``delay_ms`` after each failure; the next failure fails the job."""

    def __init__(self, attempts: int, delay_ms: int):
        self.attempts = attempts
        self.delay_ms = delay_ms
        self.failures = 0

    def on_failure(self, now_ms: int) -> int | None:
        self.failures += 1
        return self.delay_ms if self.failures <= self.attempts else None

    def describe(self) -> str:
        attempts = "1 attempt" if self.attempts == 1 else f"{self.attempts} attempts"
        return f"fixed-delay ({attempts}, {format_duration(self.delay_ms)})"


class FailureRateBackoff(RestartBackoff):
    """Restart ``delay_ms`` after a failure, unless more than ``max_failures`` failures fall within
    ``interval_ms`` (the oldest and newest of ``max_failures + 1`` failures at most that far apart)."""

    def __init__(self, max_failures: int, interval_ms: int, delay_ms: int):
        self.max_failures = max_failures
        self.interval_ms = interval_ms
        self.delay_ms = delay_ms
        self._failures: deque[int] = deque(maxlen=max_failures + 1)

    def on_failure(self, now_ms: int) -> int | None:
        self._failures.append(now_ms)
        if len(self._failures) > self.max_failures and now_ms - self._failures[0] <= self.interval_ms:
            return None
        return self.delay_ms

    def describe(self) -> str:
        return f"failure-rate (at most {self.max_failures} failures per {format_duration(self.interval_ms)}, {format_duration(self.delay_ms)} delay)"


class ExponentialDelayBackoff(RestartBackoff):
    """Flink's exponential delay: the k-th restart since the last reset waits
    ``initial * multiplier**k`` ms, plus or minus ``jitter`` of it, capped at ``max_backoff_ms``
    and never below ``initial_backoff_ms``. A failure more than ``reset_threshold_ms`` after the
    last restart starts again from k = 0. With ``attempts`` set, the restart after the
    ``attempts``-th since the last reset fails the job. Failures while a restart is pending count
    as one (they wait for the same restart).
    """

    def __init__(
        self,
        initial_backoff_ms: int,
        max_backoff_ms: int,
        multiplier: float,
        reset_threshold_ms: int,
        jitter: float,
        attempts: int | None = None,
        rng: random.Random | None = None,
    ):
        self.initial_backoff_ms = initial_backoff_ms
        self.max_backoff_ms = max_backoff_ms
        self.multiplier = multiplier
        self.reset_threshold_ms = reset_threshold_ms
        self.jitter = jitter
        self.attempts = attempts
        self.rng = rng or random.Random()
        self.attempt = 0  # restarts since the last reset
        self.next_restart_ms: int | None = None

    def _can_restart(self) -> bool:
        return self.attempts is None or self.attempt <= self.attempts

    def _backoff_ms(self) -> int:
        try:
            current = self.initial_backoff_ms * self.multiplier**self.attempt
        except OverflowError:
            current = float("inf")
        current = int(min(current, 2**62))
        offset = int(current * self.jitter)
        jitter = self.rng.randint(-offset, offset) if offset else 0
        return max(self.initial_backoff_ms, min(current + jitter, self.max_backoff_ms))

    def on_failure(self, now_ms: int) -> int | None:
        if self.next_restart_ms is not None and now_ms <= self.next_restart_ms:
            return self.next_restart_ms - now_ms if self._can_restart() else None
        if self.next_restart_ms is None or now_ms - self.next_restart_ms >= self.reset_threshold_ms:
            self.attempt = 0
        delay = self._backoff_ms()
        self.next_restart_ms = now_ms + delay
        self.attempt += 1
        return delay if self._can_restart() else None

    def describe(self) -> str:
        attempts = "unlimited attempts" if self.attempts is None else f"{self.attempts} attempts before reset"
        return (
            f"exponential-delay ({format_duration(self.initial_backoff_ms)} x{self.multiplier:g} per restart "
            f"up to {format_duration(self.max_backoff_ms)}, jitter {self.jitter:g}, reset after "
            f"{format_duration(self.reset_threshold_ms)}, {attempts})"
        )


# -- what users set (PyFlink's RestartStrategies) ----------------------------------------------------


class RestartStrategyConfiguration:
    """A restart strategy chosen in code; ``RestartStrategies`` makes them."""

    def get_description(self) -> str:
        return self.create_backoff().describe()

    def create_backoff(self, rng: random.Random | None = None) -> RestartBackoff:
        raise NotImplementedError


@dataclass(frozen=True)
class NoRestartStrategyConfiguration(RestartStrategyConfiguration):
    def create_backoff(self, rng: random.Random | None = None) -> RestartBackoff:
        return NoRestartBackoff()


@dataclass(frozen=True)
class FallbackRestartStrategyConfiguration(RestartStrategyConfiguration):
    """Use the configuration's strategy (``restart-strategy.type``), else the default."""

    def get_description(self) -> str:
        return "the configured strategy (restart-strategy.type), else exponential-delay with checkpointing and none without"

    def create_backoff(self, rng: random.Random | None = None) -> RestartBackoff:
        msg = "the fallback restart strategy stands for the configured one; resolve it with resolve_restart_backoff(env, ...)"
        raise ConfigurationError(msg)


@dataclass(frozen=True)
class FixedDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    restart_attempts: int = 1
    delay_between_attempts_interval: Any = 1000  # ms, a duration string or a timedelta

    def __post_init__(self) -> None:
        object.__setattr__(self, "restart_attempts", _checked(_FIXED + "attempts", self.restart_attempts, "restart_attempts"))
        object.__setattr__(self, "delay_between_attempts_interval", _checked(_FIXED + "delay", self.delay_between_attempts_interval, "delay_between_attempts"))

    def get_restart_attempts(self) -> int:
        return self.restart_attempts

    def get_delay_between_attempts_interval(self) -> datetime.timedelta:
        return _timedelta(self.delay_between_attempts_interval)

    def create_backoff(self, rng: random.Random | None = None) -> RestartBackoff:
        return FixedDelayBackoff(self.restart_attempts, self.delay_between_attempts_interval)


@dataclass(frozen=True)
class FailureRateRestartStrategyConfiguration(RestartStrategyConfiguration):
    max_failure_rate: int = 1
    failure_interval: Any = 60_000
    delay_between_attempts_interval: Any = 1000

    def __post_init__(self) -> None:
        object.__setattr__(self, "max_failure_rate", _checked(_RATE + "max-failures-per-interval", self.max_failure_rate, "failure_rate"))
        object.__setattr__(self, "failure_interval", _checked(_RATE + "failure-rate-interval", self.failure_interval, "failure_interval"))
        object.__setattr__(self, "delay_between_attempts_interval", _checked(_RATE + "delay", self.delay_between_attempts_interval, "delay_interval"))

    def get_max_failure_rate(self) -> int:
        return self.max_failure_rate

    def get_failure_interval(self) -> datetime.timedelta:
        return _timedelta(self.failure_interval)

    def get_delay_between_attempts_interval(self) -> datetime.timedelta:
        return _timedelta(self.delay_between_attempts_interval)

    def create_backoff(self, rng: random.Random | None = None) -> RestartBackoff:
        return FailureRateBackoff(self.max_failure_rate, self.failure_interval, self.delay_between_attempts_interval)


@dataclass(frozen=True)
class ExponentialDelayRestartStrategyConfiguration(RestartStrategyConfiguration):
    initial_backoff: Any = 1000
    max_backoff: Any = 60_000
    backoff_multiplier: float = 1.5
    reset_backoff_threshold: Any = 3_600_000
    jitter_factor: float = 0.1
    attempts_before_reset_backoff: int | None = None  # None: unlimited

    def __post_init__(self) -> None:
        for name, key in (
            ("initial_backoff", "initial-backoff"),
            ("max_backoff", "max-backoff"),
            ("backoff_multiplier", "backoff-multiplier"),
            ("reset_backoff_threshold", "reset-backoff-threshold"),
            ("jitter_factor", "jitter-factor"),
            ("attempts_before_reset_backoff", "attempts-before-reset-backoff"),
        ):
            optional = name == "attempts_before_reset_backoff"
            object.__setattr__(self, name, _checked(_EXP + key, getattr(self, name), name, optional))
        if self.initial_backoff > self.max_backoff:
            msg = (
                f"exponential-delay restart: initial backoff ({format_duration(self.initial_backoff)}, {_EXP}initial-backoff) "
                f"cannot be larger than max backoff ({format_duration(self.max_backoff)}, {_EXP}max-backoff)"
            )
            raise ConfigurationError(msg)

    def get_initial_backoff(self) -> datetime.timedelta:
        return _timedelta(self.initial_backoff)

    def get_max_backoff(self) -> datetime.timedelta:
        return _timedelta(self.max_backoff)

    def get_backoff_multiplier(self) -> float:
        return self.backoff_multiplier

    def get_reset_backoff_threshold(self) -> datetime.timedelta:
        return _timedelta(self.reset_backoff_threshold)

    def get_jitter_factor(self) -> float:
        return self.jitter_factor

    def get_attempts_before_reset_backoff(self) -> int | None:
        return self.attempts_before_reset_backoff

    def create_backoff(self, rng: random.Random | None = None) -> RestartBackoff:
        return ExponentialDelayBackoff(
            self.initial_backoff,
            self.max_backoff,
            self.backoff_multiplier,
            self.reset_backoff_threshold,
            self.jitter_factor,
            self.attempts_before_reset_backoff,
            rng,
        )


class RestartStrategies:
    """Factories for restart strategies, as PyFlink's (times in ms or ``datetime.timedelta``)."""

    NoRestartStrategyConfiguration = NoRestartStrategyConfiguration
    FallbackRestartStrategyConfiguration = FallbackRestartStrategyConfiguration
    FixedDelayRestartStrategyConfiguration = FixedDelayRestartStrategyConfiguration
    FailureRateRestartStrategyConfiguration = FailureRateRestartStrategyConfiguration
    ExponentialDelayRestartStrategyConfiguration = ExponentialDelayRestartStrategyConfiguration

    @staticmethod
    def no_restart() -> NoRestartStrategyConfiguration:
        """A failure fails the job."""
        return NoRestartStrategyConfiguration()

    @staticmethod
    def fall_back_restart() -> FallbackRestartStrategyConfiguration:
        """Use the configured strategy (``restart-strategy.type`` from -D or flowpoint.yaml), else the default."""
        return FallbackRestartStrategyConfiguration()

    @staticmethod
    def fixed_delay_restart(restart_attempts: int, delay_between_attempts: Any) -> FixedDelayRestartStrategyConfiguration:
        """Restart up to ``restart_attempts`` times, ``delay_between_attempts`` ms after each failure."""
        return FixedDelayRestartStrategyConfiguration(restart_attempts, delay_between_attempts)

    @staticmethod
    def failure_rate_restart(failure_rate: int, failure_interval: Any, delay_interval: Any) -> FailureRateRestartStrategyConfiguration:
        """Restart ``delay_interval`` ms after a failure; fail the job when more than
        ``failure_rate`` failures happen within ``failure_interval`` ms."""
        return FailureRateRestartStrategyConfiguration(failure_rate, failure_interval, delay_interval)

    @staticmethod
    def exponential_delay_restart(
        initial_backoff: Any,
        max_backoff: Any,
        backoff_multiplier: float,
        reset_backoff_threshold: Any,
        jitter_factor: float,
        attempts_before_reset_backoff: int | None = None,
    ) -> ExponentialDelayRestartStrategyConfiguration:
        """Restart after ``initial_backoff`` ms, multiplying the delay by ``backoff_multiplier`` per
        restart up to ``max_backoff`` ms, +- ``jitter_factor`` of it; back to the initial delay
        after running ``reset_backoff_threshold`` ms without failing. Unlimited restarts unless
        ``attempts_before_reset_backoff`` is given."""
        return ExponentialDelayRestartStrategyConfiguration(
            initial_backoff, max_backoff, backoff_multiplier, reset_backoff_threshold, jitter_factor, attempts_before_reset_backoff
        )


def restart_strategy_from_config(config: Configuration) -> RestartStrategyConfiguration | None:
    """The strategy ``restart-strategy.type`` and its keys describe, or None when it is unset."""
    kind = config.get("restart-strategy.type")
    if kind is None:
        return None
    if kind == "none":
        return NoRestartStrategyConfiguration()
    if kind == "fixed-delay":
        return FixedDelayRestartStrategyConfiguration(config.get(_FIXED + "attempts"), config.get(_FIXED + "delay"))
    if kind == "failure-rate":
        return FailureRateRestartStrategyConfiguration(
            config.get(_RATE + "max-failures-per-interval"), config.get(_RATE + "failure-rate-interval"), config.get(_RATE + "delay")
        )
    return _exponential_from_config(config)


def _exponential_from_config(config: Configuration) -> ExponentialDelayRestartStrategyConfiguration:
    return ExponentialDelayRestartStrategyConfiguration(
        config.get(_EXP + "initial-backoff"),
        config.get(_EXP + "max-backoff"),
        config.get(_EXP + "backoff-multiplier"),
        config.get(_EXP + "reset-backoff-threshold"),
        config.get(_EXP + "jitter-factor"),
        config.get(_EXP + "attempts-before-reset-backoff"),
    )


class RestartSettingsSource(Protocol):
    """What the restart decisions are resolved from (a StreamExecutionEnvironment, which is not
    imported here: it builds the job description from this module's results)."""

    def get_configuration(self) -> Configuration: ...

    def get_restart_strategy(self) -> RestartStrategyConfiguration: ...


def resolve_restart_backoff(env: RestartSettingsSource, checkpointing_enabled: bool, rng: random.Random | None = None) -> RestartBackoff:
    """The restart decisions for one run of a job built on ``env``: the strategy set in code,
    else the configured one, else exponential delay (Flink's defaults) when checkpointing is
    enabled (with the ``restart-strategy.exponential-delay.*`` keys, as Flink's default does) and
    no restart when it is not. ``rng`` draws the exponential strategy's jitter."""
    strategy = env.get_restart_strategy()
    if isinstance(strategy, FallbackRestartStrategyConfiguration):
        strategy = _exponential_from_config(env.get_configuration()) if checkpointing_enabled else NoRestartStrategyConfiguration()
    return strategy.create_backoff(rng)


def resolve_repeated_failure(env: RestartSettingsSource) -> tuple[str, bool]:
    """``(policy, chosen)``: what a user function failing again on the same record the same way
    does (``restart-strategy.repeated-failure.fail-fast``: "none" restarts as the strategy
    allows, "data-errors" fails the job at once when the exception is one of Python's data
    errors, "all" fails it at once for any exception) and whether the user chose it. Unset, it
    is "data-errors" when no restart strategy is set and "none" when one is: a strategy the
    user set is honoured whatever the exception."""
    policy = env.get_configuration().get("restart-strategy.repeated-failure.fail-fast")
    if policy is not None:
        return policy, True
    chosen_strategy = not isinstance(env.get_restart_strategy(), FallbackRestartStrategyConfiguration)
    return ("none" if chosen_strategy else "data-errors"), False
