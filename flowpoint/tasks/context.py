"""The ``RuntimeContext`` and process-function contexts handed to user functions in a task."""

from __future__ import annotations

from typing import Any

from flowpoint.api.functions import ProcessFunction, RuntimeContext, TimerService
from flowpoint.errors import StateAccessError
from flowpoint.state.kinds import keyed_state
from flowpoint.state.ttl import ttl_table


class TaskRuntimeContext(RuntimeContext):
    def __init__(self, task_name: str, index: int, parallelism: int, max_parallelism: int, job_parameters: dict, backend: Any = None):
        self.task_name = task_name
        self.index = index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.job_parameters = job_parameters
        self.backend = backend
        self.attempt = 0
        self.clock: Any = None  # the operator: its processing_time is the TTL states' time
        self.ttl_states: dict[str, Any] = {}  # state name -> its TtlTable (background cleanup per epoch)
        self.metric_group: Any = None  # the operator's MetricGroup (set by the chain runtime)

    def get_task_name(self) -> str:
        return self.task_name

    def get_metrics_group(self) -> Any:
        return self.metric_group if self.metric_group is not None else super().get_metrics_group()

    def get_number_of_parallel_subtasks(self) -> int:
        return self.parallelism

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self.max_parallelism

    def get_index_of_this_subtask(self) -> int:
        return self.index

    def get_attempt_number(self) -> int:
        return self.attempt

    def get_job_parameter(self, key: str, default_value: str | None = None) -> str | None:
        return self.job_parameters.get(key, default_value)

    def _keyed(self, descriptor: Any) -> Any:
        if self.backend is None:
            msg = (
                f"operator {self.task_name!r} asked for keyed state {descriptor.name!r}, but it does not "
                f"run on a keyed stream: call key_by(...) before it"
            )
            raise StateAccessError(msg)
        ttl = getattr(descriptor, "ttl_config", None)
        if ttl is not None and ttl.is_enabled():
            table = ttl_table(self.backend, descriptor, self.clock)
            self.ttl_states[descriptor.name] = table
            return keyed_state(self.backend, table, descriptor)
        return self.backend.get_partitioned_state(descriptor)

    def cleanup_expired_state(self) -> None:
        """After an epoch: the TTL states' background cleanup (flowpoint/state/ttl.py)."""
        for table in self.ttl_states.values():
            table.cleanup()

    get_state = _keyed
    get_list_state = _keyed
    get_map_state = _keyed
    get_reducing_state = _keyed
    get_aggregating_state = _keyed


class OperatorClocks(TimerService):
    """The clocks of an operator; timers need a keyed stream (Flink raises the same way)."""

    __slots__ = ("_op",)

    def __init__(self, op: Any):
        self._op = op

    def current_processing_time(self) -> int:
        return self._op.processing_time

    def current_watermark(self) -> int:
        return self._op.watermark

    def _no_timers(self, *_args: Any) -> None:
        msg = (
            f"operator {self._op.spec.name!r} registered a timer, but timers exist only on keyed streams: "
            f"call key_by(...) and use a KeyedProcessFunction"
        )
        raise StateAccessError(msg)

    register_event_time_timer = _no_timers
    register_processing_time_timer = _no_timers
    delete_event_time_timer = _no_timers
    delete_processing_time_timer = _no_timers


class ProcessContext(ProcessFunction.Context):
    """``ctx`` of a ProcessFunction: the record's timestamp, the clocks, side outputs."""

    __slots__ = ("_op", "_clocks", "current_timestamp", "origin")

    def __init__(self, op: Any):
        self._op = op
        self._clocks = OperatorClocks(op)
        self.current_timestamp: int | None = None
        self.origin: tuple = ()

    def timestamp(self) -> int | None:
        return self.current_timestamp

    def timer_service(self) -> TimerService:
        return self._clocks

    def output(self, output_tag: Any, value: Any) -> None:
        tag_id = getattr(output_tag, "tag_id", None)
        if tag_id is None:
            msg = f"ctx.output() needs an OutputTag as its first argument; got {output_tag!r:.80}"
            raise StateAccessError(msg)
        ts = None if self.current_timestamp is None else [self.current_timestamp]
        self._op.emit_side(tag_id, self.origin, [value], ts)
