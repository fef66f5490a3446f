"""Broadcast state as a broadcast process function sees it: read-only in ``process_element``,
read-write in ``process_broadcast_element`` (the task side holds the maps:
flowpoint/tasks/broadcast_process.py)."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from flowpoint.errors import StateAccessError

K = TypeVar("K")
V = TypeVar("V")


class ReadOnlyBroadcastState(Generic[K, V]):
    """A broadcast map as ``process_element`` sees it."""

    def __init__(self, name: str, data: dict):
        self.name = name
        self._data = data

    def get(self, key: Any) -> Any:
        return self._data.get(key)

    def contains(self, key: Any) -> bool:
        return key in self._data

    def items(self) -> list:
        return list(self._data.items())

    def keys(self) -> list:
        return list(self._data.keys())

    def values(self) -> list:
        return list(self._data.values())

    def is_empty(self) -> bool:
        return not self._data

    def _read_only(self, *_args: Any) -> None:
        msg = (
            f"broadcast state {self.name!r} is read-only in process_element: change it in "
            f"process_broadcast_element, which every parallel instance runs with the same records"
        )
        raise StateAccessError(msg)

    put = put_all = remove = clear = _read_only


class BroadcastState(ReadOnlyBroadcastState):
    """A broadcast map as ``process_broadcast_element`` sees it (read-write)."""

    def put(self, key: Any, value: Any) -> None:  # type: ignore[override]
        self._data[key] = value

    def put_all(self, values: dict) -> None:  # type: ignore[override]
        self._data.update(values)

    def remove(self, key: Any) -> None:  # type: ignore[override]
        self._data.pop(key, None)

    def clear(self) -> None:  # type: ignore[override]
        self._data.clear()
