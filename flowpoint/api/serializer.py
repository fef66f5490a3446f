"""PyFlink's ``TypeSerializer`` (``pyflink.common.serializer``): a type's own way to write its
values to bytes and read them back.

flowpoint pickles values it has no type for, so most programs need none. A program with a
window type of its own gives its ``WindowAssigner`` a ``get_window_serializer()``: flowpoint then
keeps that assigner's windows in state and timers as the serializer's bytes, as Flink does
(``flowpoint.api.windows.WindowAssigner.namespace_of``), so the window type needs no pickling
support and no ``to_namespace``.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from io import BytesIO
from typing import Any, Generic, TypeVar

T = TypeVar("T")


class TypeSerializer(ABC, Generic[T]):
    """Writes a value to a stream and reads it back (PyFlink's interface, unchanged)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, self.__class__) and self.__dict__ == other.__dict__

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __hash__(self) -> int:
        return hash(str(self))

    @abstractmethod
    def serialize(self, element: T, stream: BytesIO) -> None:
        """Serializes an element to the output stream."""

    @abstractmethod
    def deserialize(self, stream: BytesIO) -> T:
        """Returns a deserialized element from the input stream."""

    def _get_coder(self) -> Any:
        """PyFlink's adapter to its coders (``get_impl().encode_nested`` / ``decode_nested``)."""
        serializer = self

        class CoderImpl:
            def encode_nested(self, element: Any) -> bytes:
                return serialized(serializer, element)

            def decode_nested(self, data: bytes) -> Any:
                return deserialized(serializer, data)

        class Coder:
            def get_impl(self) -> CoderImpl:
                return CoderImpl()

        return Coder()


def serialized(serializer: Any, element: Any) -> bytes:
    """``element`` written by ``serializer`` (anything with PyFlink's ``serialize(element, stream)``)."""
    out = BytesIO()
    serializer.serialize(element, out)
    return out.getvalue()


def deserialized(serializer: Any, data: bytes) -> Any:
    """The value ``serializer`` reads back from ``data``."""
    return serializer.deserialize(BytesIO(data))


VOID = b""


class VoidNamespaceSerializer(TypeSerializer[bytes]):
    def serialize(self, element: bytes, stream: BytesIO) -> None:
        pass

    def deserialize(self, stream: BytesIO) -> bytes:
        return VOID


__all__ = ["TypeSerializer", "VoidNamespaceSerializer"]
