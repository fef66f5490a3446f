"""Operators of two connected streams (``stream1.connect(stream2)``).

The stage's input edges come from either stream; ``options["input_sides"][edge_index]`` says
which (0: the first stream, 1: the second), so a union feeding one side works too. The watermark
is the lower of both inputs' (the exchange's input watermarks), as in Flink.
"""

from __future__ import annotations

from typing import Any

from flowpoint.tasks.batches import as_rows
from flowpoint.tasks.keyed_process import KeyedProcessOp
from flowpoint.tasks.operators import (
    Operator,
    ProcessOp,
    flat_map_records,
    map_records,
    run_per_record,
)


class _TwoInputs:
    spec: Any

    def side(self, edge_index: int) -> int:
        return self.spec.options["input_sides"][edge_index]

    def rows(self, side: int, data: Any) -> list:
        return as_rows(data, self.spec.options["input_types"][side])


class CoMapOp(_TwoInputs, Operator):
    def process_input(self, edge_index: int, origin: tuple, data: Any, ts: list | None) -> None:
        side = self.side(edge_index)
        rows = self.rows(side, data)
        self.records_in += len(rows)
        f = self.spec.function.map2 if side else self.spec.function.map1
        self.emit(origin, map_records(self.spec, f, rows), ts)


class CoFlatMapOp(_TwoInputs, Operator):
    def process_input(self, edge_index: int, origin: tuple, data: Any, ts: list | None) -> None:
        side = self.side(edge_index)
        rows = self.rows(side, data)
        self.records_in += len(rows)
        f = self.spec.function.flat_map2 if side else self.spec.function.flat_map1
        out, out_ts = flat_map_records(self.spec, f, rows, ts)
        self.emit(origin, out, out_ts)


class CoProcessOp(_TwoInputs, ProcessOp):
    """A CoProcessFunction: per record with its timestamp, the clocks and side outputs."""

    def process_input(self, edge_index: int, origin: tuple, data: Any, ts: list | None) -> None:
        side = self.side(edge_index)
        rows = self.rows(side, data)
        self.records_in += len(rows)
        self.ctx.origin = origin
        f = self.spec.function.process_element2 if side else self.spec.function.process_element1
        out, out_ts = run_per_record(self.spec, f, rows, ts, self.ctx)
        self.emit_routed(origin, out, out_ts)


class KeyedCoProcessOp(_TwoInputs, KeyedProcessOp):
    """A KeyedCoProcessFunction: both inputs of a key share its state and timers."""

    def process_input(self, edge_index: int, origin: tuple, data: Any, ts: list | None) -> None:
        f = self.spec.function.process_element2 if self.side(edge_index) else self.spec.function.process_element1
        self._process_with(f, origin, data, ts)
