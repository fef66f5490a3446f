"""A test harness that runs one keyed operator without Spark (Flink's
``KeyedOneInputStreamOperatorTestHarness``).

Build it from the pipeline you would write, ending in the operator under test::

    h = KeyedOperatorHarness(
        lambda s: s.key_by(lambda x: x[0]).window(TumblingEventTimeWindows.of(Time.seconds(10))).reduce(f),
        backend="rocksdb",
    )
    h.process_element(("a", 1), timestamp=1_000)
    h.process_watermark(9_999)
    assert h.extract_output_values() == [("a", 1)]

You drive it with explicit records, watermarks and processing time; it keys records with the
pipeline's key selector, runs the operator on a real state backend (``"hashmap"`` or
``"rocksdb"`` in a temporary directory) and collects what it emits, with timestamps, in order.
:meth:`KeyedOperatorHarness.snapshot` commits the state and copies it as a checkpoint would;
:meth:`KeyedOperatorHarness.restore` opens a *new* operator on it, optionally on only a range of
key groups (rescaling), so tests can prove that windows and timers survive a restore.
"""

from __future__ import annotations

import pickle
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NamedTuple

import cloudpickle

from flowpoint.api.environment import StreamExecutionEnvironment
from flowpoint.api.watermarks import Watermark
from flowpoint.errors import ConfigurationError, FlowpointError, InvalidKeyError
from flowpoint.state.heap import HeapKeyedStateBackend
from flowpoint.state.key_identity import keyed_state_maps
from flowpoint.state.keygroups import assign_to_key_group, canonical_bytes
from flowpoint.state.rocksdb import RocksDBKeyedStateBackend
from flowpoint.tasks.context import TaskRuntimeContext
from flowpoint.tasks.keyed_process import KeyedProcessOp
from flowpoint.tasks.operators import KEYED_OPERATORS
from flowpoint.tasks.plan import OpSpec
from flowpoint.tasks.window_operator import WindowOperator


class Record(NamedTuple):
    """An emitted record: the value and its timestamp (None if it has none)."""

    value: Any
    timestamp: int | None


@dataclass(frozen=True)
class HarnessSnapshot:
    """The committed keyed state of one operator (``{state name: {key: value}}``), copied."""

    tables: dict[str, dict[Any, Any]]
    max_parallelism: int
    uid: str


def _operator_classes() -> dict[str, Any]:
    return {**KEYED_OPERATORS, "keyed_process": KeyedProcessOp, "window": WindowOperator}


class _Collector:
    """Receives what the operator emits on one output."""

    num_in = 0  # records received (the operator counts its outputs' input)

    def __init__(self) -> None:
        self.items: list[Record | Watermark] = []

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        if ts is None:
            self.items.extend(Record(v, None) for v in data)
        else:
            self.items.extend(Record(v, t) for v, t in zip(data, ts, strict=True))

    def process_watermark(self, origin: tuple, wm: int) -> None:
        self.items.append(Watermark(wm))

    def process_watermark_status(self, origin: tuple, idle: bool) -> None:
        pass


class _SideOutputs(dict):
    """``operator.side_outputs`` that accepts every tag id."""

    def get(self, tag_id: str, default: Any = None) -> list[_Collector]:  # type: ignore[override]
        return self.setdefault(tag_id, [_Collector()])


class KeyedOperatorHarness:
    """Runs the last operator of ``pipeline(stream)`` (a keyed operator after ``key_by``)."""

    def __init__(
        self,
        pipeline: Callable[[Any], Any],
        backend: str = "hashmap",
        max_parallelism: int = 128,
        key_groups: range | None = None,
        snapshot: HarnessSnapshot | None = None,
    ):
        if backend not in ("hashmap", "rocksdb"):
            msg = f"backend must be 'hashmap' or 'rocksdb'; got {backend!r}"
            raise ConfigurationError(msg)
        self.spec, self.key_selector = _build(pipeline, max_parallelism)
        self.max_parallelism = max_parallelism
        self.key_groups = key_groups
        self.backend_kind = backend
        self._dir: str | None = None
        self.backend = self._create_backend(snapshot)
        self.operator = _operator_classes()[self.spec.kind](self.spec, self.backend)
        self.output = _Collector()
        self.operator.outputs.append(self.output)
        self.operator.side_outputs = _SideOutputs()
        ctx = self.ctx = TaskRuntimeContext(self.spec.name, 0, 1, max_parallelism, {}, self.backend)
        ctx.clock = self.operator  # the TTL states' time is the operator's processing time
        self.operator.open(ctx)
        self._origin = 0

    @classmethod
    def restore(
        cls,
        snapshot: HarnessSnapshot,
        pipeline: Callable[[Any], Any],
        backend: str = "hashmap",
        key_groups: range | None = None,
    ) -> KeyedOperatorHarness:
        """A new operator on ``snapshot``'s state; with ``key_groups`` only that range's keys
        (one parallel instance after rescaling)."""
        return cls(pipeline, backend, snapshot.max_parallelism, key_groups, snapshot)

    def _create_backend(self, snapshot: HarnessSnapshot | None) -> Any:
        tables = None
        if snapshot is not None:  # a copy: the snapshot may be restored again
            tables = pickle.loads(cloudpickle.dumps({
                name: {k: v for k, v in table.items() if self._owns(k)}
                for name, table in snapshot.tables.items()
            }))
        if self.backend_kind == "rocksdb":
            self._dir = tempfile.mkdtemp(prefix="flowpoint-harness-")
            b = RocksDBKeyedStateBackend(self.spec.name, f"{self._dir}/db", self.max_parallelism)
            b.open()
            if tables:
                b.restore(tables)
            return b

        b = HeapKeyedStateBackend(self.spec.name)
        if tables:
            b.restore(tables)
            b.commit()
        return b

    def _owns(self, key: Any) -> bool:
        return self.key_groups is None or assign_to_key_group(key, self.max_parallelism) in self.key_groups

    # -- input ---------------------------------------------------------------------------------

    def _next_origin(self) -> tuple:
        self._origin += 1
        return (self._origin,)

    def _key(self, value: Any) -> Any:
        key = self.key_selector.get_key(value)
        try:
            canonical_bytes(key)
        except InvalidKeyError as e:
            msg = f"the key selector returned an invalid key for {value!r:.100}: {e}"
            raise InvalidKeyError(msg) from None
        if key is None:
            msg = f"the key selector returned None for {value!r:.100}"
            raise InvalidKeyError(msg)
        if not self._owns(key):
            group = assign_to_key_group(key, self.max_parallelism)
            msg = f"key {key!r} is in key group {group}, outside this harness' key groups {self.key_groups}"
            raise FlowpointError(msg)
        return key

    def process_element(self, value: Any, timestamp: int | None = None) -> None:
        self.operator.process(self._next_origin(), [(self._key(value), value)], None if timestamp is None else [timestamp])

    def process_elements(self, values: list, timestamps: list[int] | None = None) -> None:
        """One batch of records (with one timestamp per record, or none)."""
        if timestamps is not None and len(timestamps) != len(values):
            msg = f"process_elements() got {len(values)} values but {len(timestamps)} timestamps"
            raise ConfigurationError(msg)
        pairs = [(self._key(v), v) for v in values]
        self.operator.process(self._next_origin(), pairs, None if timestamps is None else list(timestamps))

    def process_watermark(self, watermark: int | Watermark) -> None:
        wm = watermark.timestamp if isinstance(watermark, Watermark) else watermark
        self.operator.process_watermark(self._next_origin(), wm)

    def set_processing_time(self, time_ms: int) -> None:
        """Advance the operator's processing time (processing-time timers <= it fire)."""
        self.operator.advance_processing_time(time_ms)

    # -- output ----------------------------------------------------------------------------------

    def get_output(self) -> list[Record | Watermark]:
        """Everything emitted on the main output, in order: records and watermarks."""
        return list(self.output.items)

    def extract_output_records(self) -> list[Record]:
        return [r for r in self.output.items if isinstance(r, Record)]

    def extract_output_values(self) -> list[Any]:
        return [r.value for r in self.output.items if isinstance(r, Record)]

    def get_side_output(self, tag: Any) -> list[Record]:
        tag_id = getattr(tag, "tag_id", tag)
        targets = dict.get(self.operator.side_outputs, tag_id)
        return [r for r in targets[0].items if isinstance(r, Record)] if targets else []

    def clear_output(self) -> None:
        self.output.items.clear()
        for targets in self.operator.side_outputs.values():
            targets[0].items.clear()

    def get_metric(self, name: str) -> int:
        return self.operator.metrics.get(name, 0)

    def num_state_entries(self) -> int:
        """Number of (state, key) pairs holding state (0 once everything is cleaned up)."""
        return self.backend.num_keys()

    def state_entries(self) -> dict[str, dict[Any, Any]]:
        """All keyed state, read as data: ``{state name: {key: value}}``."""
        return keyed_state_maps(self.backend.snapshot())

    def num_event_time_timers(self) -> int:
        return self.operator.timers.num_event_time_timers()

    def num_processing_time_timers(self) -> int:
        return self.operator.timers.num_processing_time_timers()

    # -- checkpoints -------------------------------------------------------------------------------

    def snapshot(self) -> HarnessSnapshot:
        """Commit the state (as at an epoch boundary: the TTL states' background cleanup runs
        first) and copy it (as a checkpoint does)."""
        self.ctx.cleanup_expired_state()
        b = self.backend
        if self.backend_kind == "rocksdb":
            b.apply(b.delta())
        b.commit()
        tables = pickle.loads(cloudpickle.dumps(b.snapshot()))
        return HarnessSnapshot(tables, self.max_parallelism, self.spec.uid)

    def close(self) -> None:
        self.operator.close()
        if self.backend_kind == "rocksdb":
            self.backend.close()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self) -> KeyedOperatorHarness:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def _build(pipeline: Callable[[Any], Any], max_parallelism: int) -> tuple[OpSpec, Any]:
    """The operator spec of the pipeline's last operator, shipped (pickled) as to an executor,
    and the key selector of the key_by feeding it."""
    env = StreamExecutionEnvironment({"parallelism.default": 1})
    stream = pipeline(env.from_collection([]))
    t = getattr(stream, "_t", None)
    if t is None:
        msg = f"the harness pipeline must return a DataStream (the operator under test); got {stream!r:.80}"
        raise ConfigurationError(msg)
    upstream = t.inputs[0] if t.inputs else None
    if upstream is None or upstream.kind != "key_by":
        msg = f"the harness runs a keyed operator: call key_by(...) right before {t.name!r}"
        raise ConfigurationError(msg)
    if t.kind not in _operator_classes():
        msg = f"operator {t.name!r} of kind {t.kind!r} is not a keyed operator the harness can run"
        raise ConfigurationError(msg)
    spec = OpSpec(
        id=t.id, kind=t.kind, name=t.name, uid=t.uid or f"{t.kind}-harness", function=t.function,
        options=dict(t.options), input_type=upstream.output_type, output_type=t.output_type, sink=None,
        parallelism=1, max_parallelism=max_parallelism, chained=[], out_edges=[], keyed=True,
    )
    spec, selector = pickle.loads(cloudpickle.dumps((spec, upstream.key_selector)))
    return spec, selector
