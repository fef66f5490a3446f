"""A keyed reduce's output has the stream's type, as in PyFlink: a function that builds a new
unnamed ``Row(a, b)`` on a ``Types.ROW([...])`` stream gives ``Row(f0=..., f1=...)``, and the next
call gets that typed value (PyFlink keeps the reduction in state with the stream's type)."""

from __future__ import annotations

import pytest

from flowpoint import Row, Types
from flowpoint.connectors.sinks import CollectSink
from flowpoint.errors import FlowpointError


@pytest.mark.parametrize("batch", [False, True])
def test_a_reduce_building_an_unnamed_row_gives_the_streams_row_type(make_env, batch):
    from flowpoint import RuntimeExecutionMode

    env = make_env(parallelism=1)
    if batch:
        env.set_runtime_mode(RuntimeExecutionMode.BATCH)
    def concat(a, b):
        assert isinstance(a, Row) and a.as_dict() == {"f0": a[0], "f1": a[1]}  # the typed reduction
        return Row(a[0] + b[0], a[1] + b[1])

    sink = CollectSink()
    ds = env.from_collection([("a", 0), ("b", 0), ("c", 1)], type_info=Types.ROW([Types.STRING(), Types.INT()]))
    ds.key_by(lambda r: r[1], key_type=Types.INT()).reduce(concat).sink_to(sink)
    env.execute("reduce typing")
    rows = sorted(sink.results, key=repr)
    assert all(isinstance(r, Row) and r.as_dict() is not None for r in rows)
    printed = sorted(repr(r) for r in rows)
    if batch:
        assert printed == ["Row(f0='ab', f1=0)", "Row(f0='c', f1=1)"]
    else:
        assert printed == ["Row(f0='a', f1=0)", "Row(f0='ab', f1=0)", "Row(f0='c', f1=1)"]


def test_a_reduce_returning_what_the_type_cannot_hold_fails_naming_it(make_env):
    env = make_env(parallelism=1)
    ds = env.from_collection([("a", 0), ("b", 0)], type_info=Types.ROW([Types.STRING(), Types.INT()]))
    ds.key_by(lambda r: r[1], key_type=Types.INT()).reduce(lambda a, b: (a[0], a[1], "extra")).uid("concat").sink_to(CollectSink())
    with pytest.raises(FlowpointError, match="reduce .*uid 'concat'.* cannot hold"):
        env.execute("reduce typing error")
