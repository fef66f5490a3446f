"""``ConnectedStreams``: two streams of possibly different types processed by one operator.

``stream1.connect(stream2)`` gives it; ``map``/``flat_map``/``process`` take the two-input
functions of :mod:`flowpoint.api.co_functions`. ``key_by(key1, key2)`` (or connecting two keyed
streams) partitions both inputs by key, so the function's keyed state and timers are shared by
the records of a key from either stream. The operator's watermark is the lower of its inputs'.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from flowpoint.api.co_functions import (
    CoFlatMapFunction,
    CoMapFunction,
    CoProcessFunction,
    KeyedCoProcessFunction,
    _KeyedCoFlatMap,
    _KeyedCoMap,
)
from flowpoint.api.datastream import DataStream, KeyedStream
from flowpoint.api.types import TypeInformation
from flowpoint.errors import JobGraphError
from flowpoint.graph.transformation import Transformation

if TYPE_CHECKING:
    from flowpoint.api.datastream import DataStream


class ConnectedStreams:
    def __init__(self, stream1: DataStream, stream2: DataStream):
        self.stream1 = stream1
        self.stream2 = stream2

    @property
    def _keyed(self) -> bool:
        keyed = [isinstance(s, KeyedStream) for s in (self.stream1, self.stream2)]
        if keyed[0] != keyed[1]:
            msg = "connect(): both streams must be keyed or neither; use connect(...).key_by(key_selector1, key_selector2)"
            raise JobGraphError(msg)
        return keyed[0]

    def key_by(self, key_selector1: Any, key_selector2: Any, key_type: TypeInformation | None = None) -> ConnectedStreams:
        """Partition both inputs by key: records of a key from either stream meet in one instance."""
        return ConnectedStreams(self.stream1.key_by(key_selector1, key_type), self.stream2.key_by(key_selector2, key_type))

    def map(self, func: CoMapFunction, output_type: TypeInformation | None = None) -> DataStream:
        _check(func, CoMapFunction, "map")
        if self._keyed:
            return self._add("keyed_co_process", "Co-Map", _KeyedCoMap(func), output_type)
        return self._add("co_map", "Co-Map", func, output_type)

    def flat_map(self, func: CoFlatMapFunction, output_type: TypeInformation | None = None) -> DataStream:
        _check(func, CoFlatMapFunction, "flat_map")
        if self._keyed:
            return self._add("keyed_co_process", "Co-Flat Map", _KeyedCoFlatMap(func), output_type)
        return self._add("co_flat_map", "Co-Flat Map", func, output_type)

    def process(self, func: CoProcessFunction | KeyedCoProcessFunction, output_type: TypeInformation | None = None) -> DataStream:
        keyed = self._keyed
        if keyed and not isinstance(func, KeyedCoProcessFunction):
            msg = f"process() on keyed connected streams needs a KeyedCoProcessFunction; got {type(func).__name__}"
            raise JobGraphError(msg)
        if not keyed and not isinstance(func, CoProcessFunction):
            hint = " (it needs keyed streams: connect(...).key_by(key_selector1, key_selector2))" if isinstance(func, KeyedCoProcessFunction) else ""
            msg = f"process() on connected streams needs a CoProcessFunction; got {type(func).__name__}{hint}"
            raise JobGraphError(msg)
        if keyed:
            return self._add("keyed_co_process", "Keyed Co-Process", func, output_type)
        return self._add("co_process", "Co-Process", func, output_type)

    def _add(self, kind: str, name: str, function: Any, output_type: TypeInformation | None) -> DataStream:
        env = self.stream1._env
        t = Transformation(kind=kind, name=name, inputs=[self.stream1._t, self.stream2._t], function=function, output_type=output_type)
        t.options["input_types"] = [self.stream1._t.output_type, self.stream2._t.output_type]
        env._add_transformation(t)
        return DataStream(env, t)


def _check(func: Any, cls: type, method: str) -> None:
    if not isinstance(func, cls):
        msg = f"ConnectedStreams.{method}() needs a {cls.__name__}; got {type(func).__name__}"
        raise JobGraphError(msg)
