"""Operator state: Flink's ``CheckpointedFunction`` with list and union list state (seed 001).

Operator state belongs to a parallel instance of an operator, not to a key. A function that
implements :class:`CheckpointedFunction` declares it in ``initialize_state(context)`` through
``context.get_operator_state_store()`` and copies what it holds into it in
``snapshot_state(context)``. flowpoint calls ``snapshot_state`` at the end of every epoch (every
epoch boundary may become a checkpoint) and keeps the result with the job's committed state, so
checkpoints, savepoints and restarts restore it. On a restore with another parallelism, list
state is split evenly over the new instances and union list state is given whole to every one.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from flowpoint.api.state import ListState, ListStateDescriptor
from flowpoint.errors import StateAccessError

SPLIT = "split"  # get_list_state: even-split redistribution
UNION = "union"  # get_union_list_state: every instance gets everything
BROADCAST = "broadcast"  # broadcast state: identical on every instance; the first instance's is kept


class CheckpointedFunction(ABC):
    """Mix into a user function to keep operator state (Flink's ``CheckpointedFunction``)."""

    @abstractmethod
    def snapshot_state(self, context: FunctionSnapshotContext) -> None:
        """Write the instance's in-memory state into its operator state."""

    @abstractmethod
    def initialize_state(self, context: FunctionInitializationContext) -> None:
        """Declare operator state; read it back when ``context.is_restored()``."""


class FunctionSnapshotContext:
    def __init__(self, checkpoint_id: int, timestamp: int):
        self._id = checkpoint_id
        self._timestamp = timestamp

    def get_checkpoint_id(self) -> int:
        """The epoch whose end this snapshot belongs to (a checkpoint is taken at such a boundary)."""
        return self._id

    def get_checkpoint_timestamp(self) -> int:
        return self._timestamp


class OperatorListState(ListState):
    """A list held by one parallel instance."""

    def __init__(self, name: str, items: list | None = None):
        self.name = name
        self.items: list = list(items or [])

    def get(self) -> list:
        return list(self.items)

    def add(self, value: Any) -> None:
        if value is None:
            msg = f"operator list state {self.name!r}: cannot add None"
            raise StateAccessError(msg)
        self.items.append(value)

    def add_all(self, values: list[Any]) -> None:
        for v in values:
            self.add(v)

    def update(self, values: list[Any]) -> None:
        self.items = []
        self.add_all(values)

    def clear(self) -> None:
        self.items = []


class OperatorStateStore:
    """``context.get_operator_state_store()``: the instance's list and union list states."""

    def __init__(self, operator_name: str, restored: dict[str, tuple[str, list]] | None = None):
        self.operator_name = operator_name
        self.restored = dict(restored or {})
        self.states: dict[str, tuple[str, OperatorListState]] = {}

    def _get(self, descriptor: ListStateDescriptor, mode: str) -> OperatorListState:
        if not isinstance(descriptor, ListStateDescriptor):
            msg = f"operator {self.operator_name!r}: operator state is declared with a ListStateDescriptor; got {type(descriptor).__name__}"
            raise StateAccessError(msg)
        name = descriptor.name
        known = self.states.get(name)
        if known is not None:
            if known[0] != mode:
                msg = f"operator {self.operator_name!r} declares operator state {name!r} as {mode} list state, but it was declared as {known[0]} before"
                raise StateAccessError(msg)
            return known[1]
        saved = self.restored.get(name)
        if saved is not None and saved[0] != mode:
            msg = (
                f"operator {self.operator_name!r}: operator state {name!r} was saved as {saved[0]} list state and is now "
                f"declared as {mode}; keep the declaration, or give the new state another name"
            )
            raise StateAccessError(msg)
        state = OperatorListState(name, saved[1] if saved else None)
        self.states[name] = (mode, state)
        return state

    def get_list_state(self, state_descriptor: ListStateDescriptor) -> OperatorListState:
        """Split evenly over the instances when the parallelism changes."""
        return self._get(state_descriptor, SPLIT)

    def get_union_list_state(self, state_descriptor: ListStateDescriptor) -> OperatorListState:
        """Every instance gets all of it when the job restores."""
        return self._get(state_descriptor, UNION)

    def snapshot(self) -> dict[str, tuple[str, list]]:
        out = {name: (mode, list(state.items)) for name, (mode, state) in self.states.items()}
        for name, saved in self.restored.items():  # declared later, or not in this epoch: keep it
            out.setdefault(name, saved)
        return out


class FunctionInitializationContext:
    def __init__(self, store: OperatorStateStore, restored: bool, keyed_state_store: Any = None):
        self._store = store
        self._restored = restored
        self._keyed = keyed_state_store

    def is_restored(self) -> bool:
        """True when the instance starts from saved state (a restart, checkpoint or savepoint)."""
        return self._restored

    def get_operator_state_store(self) -> OperatorStateStore:
        return self._store

    def get_keyed_state_store(self) -> Any:
        if self._keyed is None:
            msg = f"operator {self._store.operator_name!r} has no keyed state: it does not run on a keyed stream"
            raise StateAccessError(msg)
        return self._keyed


def redistribute(saved: dict[int, dict[str, tuple[str, list]]], parallelism: int) -> dict[int, dict[str, tuple[str, list]]]:
    """Operator state of the old instances (``{index: {name: (mode, items)}}``) for ``parallelism``
    new ones, as Flink does: list state is concatenated in instance order and split into
    contiguous, nearly equal parts; union list state is given whole to every instance."""
    names: dict[str, str] = {}
    for states in saved.values():
        for name, (mode, _) in states.items():
            names.setdefault(name, mode)
    out: dict[int, dict[str, tuple[str, list]]] = {i: {} for i in range(parallelism)}
    for name, mode in names.items():
        if mode == BROADCAST:
            first = next((saved[i][name][1] for i in sorted(saved) if name in saved[i]), [])
            for i in range(parallelism):
                out[i][name] = (mode, list(first))
            continue
        items = [x for i in sorted(saved) for x in saved[i].get(name, (mode, []))[1]]
        if mode == UNION:
            for i in range(parallelism):
                out[i][name] = (mode, list(items))
            continue
        n = len(items)
        for i in range(parallelism):
            out[i][name] = (mode, items[n * i // parallelism : n * (i + 1) // parallelism])
    return out
