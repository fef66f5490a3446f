"""The ``RuntimeContext`` and process-function contexts handed to user functions in a task."""

from __future__ import annotations

from typing import Any

from flowpoint.api.functions import KeyedProcessFunction, ProcessFunction, RuntimeContext
from flowpoint.errors import StateAccessError


class TaskRuntimeContext(RuntimeContext):
    def __init__(self, task_name: str, index: int, parallelism: int, max_parallelism: int, job_parameters: dict, backend: Any = None):
        self.task_name = task_name
        self.index = index
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.job_parameters = job_parameters
        self.backend = backend
        self.attempt = 0

    def get_task_name(self) -> str:
        return self.task_name

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
        return self.backend.get_partitioned_state(descriptor)

    get_state = _keyed
    get_list_state = _keyed
    get_map_state = _keyed
    get_reducing_state = _keyed
    get_aggregating_state = _keyed


class ProcessContext(ProcessFunction.Context):
    __slots__ = ()

    def timestamp(self) -> int | None:
        return None


class KeyedProcessContext(KeyedProcessFunction.Context):
    __slots__ = ("_backend",)

    def __init__(self, backend: Any):
        self._backend = backend

    def timestamp(self) -> int | None:
        return None

    def get_current_key(self) -> Any:
        return self._backend.current_key
