"""The keyed window operator: Flink's ``WindowOperator`` and ``EvictingWindowOperator``.

For every element the assigner names its windows. A window is *late* (event time only) when
``max_timestamp + allowed_lateness <= watermark``: the element skips it; an element that skips
all its windows and is itself late goes to the late-data side output, or is dropped and counted
in ``numLateRecordsDropped``. Otherwise the element is added to the window's contents and the
trigger decides: FIRE runs the window function over the contents (outputs carry
``window.max_timestamp()``), PURGE drops the contents. A cleanup timer at ``max_timestamp +
allowed_lateness`` (event time) or ``max_timestamp`` (processing time) removes the window's
contents, trigger state and merging-set entry and calls ``ProcessWindowFunction.clear``; until
then a late element fires the window again with the updated contents. The GlobalWindow is never
cleaned up.

State (all keyed, per key; see :mod:`flowpoint.tasks.namespaced`): the window contents with the
window as namespace — ONE accumulator per window for reduce/aggregate, the elements for
process/apply, the elements with their timestamps when an evictor is set (reduce/aggregate then
run over the evicted contents when the window fires; on columnar input, process/apply contents
are Arrow slices until the window fires, see ``window_buffer.py``); trigger state (``_trigger:<name>``) and
per-window state (``_window-state:<name>``) with the window as namespace; for merging assigners
(sessions) the key's in-flight windows and the window holding each one's state; the timers.
Count windows (``count_window``, PyFlink's count assigners) run on the GlobalWindow with a count
trigger; their window functions see ``CountWindow(id=n)``, the key's n-th firing (from 0), as
PyFlink's assigners number them (``_count-window-id``, keyed).
"""

from __future__ import annotations

import inspect
from functools import reduce as fold
from typing import Any

from flowpoint.api.collecting import call_collecting, takes_collector
from flowpoint.api.functions import ProcessWindowFunction, unwrap
from flowpoint.api.state import (
    AggregatingStateDescriptor,
    ListStateDescriptor,
    ReducingStateDescriptor,
    ValueStateDescriptor,
)
from flowpoint.api.time import MAX_WATERMARK
from flowpoint.api.windows import (
    CountWindow,
    TimestampedValue,
    Trigger,
    TriggerResult,
    WindowAssigner,
)
from flowpoint.errors import FlowpointError, StateAccessError, UserFunctionError
from flowpoint.graph.transformation import describe_function
from flowpoint.state.chunked_list import ChunkedList
from flowpoint.tasks.batches import KeyedBatch
from flowpoint.tasks.columnar_window import process_columnar, supports_columnar
from flowpoint.tasks.keyed_process import OutputBuffer, TimerOp
from flowpoint.tasks.namespaced import NamespacedStateStore, namespaced_state
from flowpoint.tasks.timers import InternalTimerService
from flowpoint.tasks.user_errors import user_function_error
from flowpoint.tasks.window_buffer import (
    NamespacedBufferState,
    after_group,
    buffered_input,
    process_buffered,
    rows_converter,
    supports_buffered,
)

CONTENTS_STATE = "_window-contents"
MERGING_SET_STATE = "_window-merging-set"
COUNT_WINDOW_ID_STATE = "_count-window-id"
TRIGGER_STATE_PREFIX = "_trigger:"
WINDOW_STATE_PREFIX = "_window-state:"
LATE_DROPPED = "numLateRecordsDropped"
CONTINUE = TriggerResult.CONTINUE


class MergingWindowSet:
    """Flink's ``MergingWindowSet`` for the current key: its in-flight windows, each mapped to
    the *state window*, the namespace holding its contents. When windows merge, the result takes
    the state window of one of them and only the others' contents move."""

    def __init__(self, assigner: Any, state: Any):
        self.assigner = assigner
        self.state = state
        self.stored = state.value() or ()
        ns = assigner.window_from_namespace
        self.mapping: dict[Any, Any] = {ns(w): ns(s) for w, s in self.stored}

    def state_window(self, window: Any) -> Any:
        return self.mapping.get(window)

    def retire_window(self, window: Any) -> None:
        if self.mapping.pop(window, None) is None:
            msg = f"window {window!r} is not in the in-flight window set"
            raise StateAccessError(msg)

    def persist(self) -> None:
        ns = self.assigner.namespace_of
        current = tuple(sorted((ns(w), ns(s)) for w, s in self.mapping.items()))
        if current != self.stored:
            self.state.update(current or None)
            self.stored = current

    def add_window(self, new_window: Any, merge: Any) -> Any:
        """Add a window, merging it with the in-flight ones; returns the window it ended up in.
        ``merge(result, merged_windows, state_window, merged_state_windows)`` moves state."""
        groups: list[tuple[Any, list[Any]]] = []

        def collect(to_merge: list[Any], result: Any) -> None:
            members = list(dict.fromkeys(to_merge))  # a window equal to an in-flight one is that one
            if len(members) > 1:
                groups.append((result, members))

        self.assigner.merge_windows([*self.mapping, new_window], collect)
        result_window, merged_new = new_window, False
        for merge_result, merged in groups:
            if new_window in merged:
                merged.remove(new_window)
                merged_new = True
                result_window = merge_result
            target = self.mapping[merged[0]]
            state_windows = [self.mapping.pop(m) for m in merged if m in self.mapping]
            self.mapping[merge_result] = target
            state_windows.remove(target)
            if not (len(merged) == 1 and merged[0] == merge_result):
                merge(merge_result, merged, target, state_windows)
        if not groups or (result_window == new_window and not merged_new):
            self.mapping.setdefault(result_window, result_window)
        return result_window


class WindowTriggerContext(Trigger.OnMergeContext, WindowAssigner.WindowAssignerContext):
    """The ``ctx`` of triggers (and of assigners and evictors): the clocks, timers and state of
    one key and window. In ``on_merge``, ``merged`` holds the windows being merged."""

    __slots__ = ("_op", "key", "window", "ns", "merged")

    def __init__(self, op: WindowOperator):
        self._op = op
        self.key: Any = None
        self.window: Any = None
        self.ns: Any = None
        self.merged: list[Any] | None = None

    def at(self, key: Any, window: Any) -> WindowTriggerContext:
        self.key, self.window, self.ns = key, window, self._op.assigner.namespace_of(window)
        return self

    def get_current_processing_time(self) -> int:
        return self._op.processing_time

    def get_current_watermark(self) -> int:
        return self._op.watermark

    def register_event_time_timer(self, time: int) -> None:
        self._op.timers.register_event_time_timer(self.ns, time)

    def register_processing_time_timer(self, time: int) -> None:
        self._op.timers.register_processing_time_timer(self.ns, time)

    def delete_event_time_timer(self, time: int) -> None:
        self._op.timers.delete_event_time_timer(self.ns, time)

    def delete_processing_time_timer(self, time: int) -> None:
        self._op.timers.delete_processing_time_timer(self.ns, time)

    def get_partitioned_state(self, descriptor: Any) -> Any:
        store = self._op.trigger_store
        store.namespace = self.ns
        return store.state(descriptor)

    def merge_partitioned_state(self, descriptor: Any) -> None:
        if self.merged:
            store = self._op.trigger_store
            store.namespace = self.ns
            store.merge(descriptor, self.ns, [self._op.assigner.namespace_of(w) for w in self.merged])


class GlobalStateStore:
    """``context.global_state()``: the key's ordinary keyed state, across all its windows."""

    __slots__ = ("_backend",)

    def __init__(self, backend: Any):
        self._backend = backend

    def get_state(self, descriptor: Any) -> Any:
        return self._backend.get_partitioned_state(descriptor)

    get_list_state = get_map_state = get_reducing_state = get_aggregating_state = get_state


class WindowContext(ProcessWindowFunction.Context):
    """The ``context`` of ``ProcessWindowFunction.process`` and ``clear``."""

    __slots__ = ("_op", "_window", "_state_window")

    def __init__(self, op: WindowOperator):
        self._op = op
        self._window: Any = None  # what the function sees (a count window's CountWindow)
        self._state_window: Any = None  # the operator's window, the namespace of its state

    def window(self) -> Any:
        return self._window

    def current_processing_time(self) -> int:
        return self._op.processing_time

    def current_watermark(self) -> int:
        return self._op.watermark

    def window_state(self) -> Any:
        if self._op.merging:
            msg = f"operator {self._op.spec.name!r}: per-window state is not available with merging (session) windows, as in Flink"
            raise StateAccessError(msg)
        store = self._op.window_store
        store.namespace = self._op.assigner.namespace_of(self._state_window)
        return store

    def global_state(self) -> Any:
        return self._op.global_store

    def output(self, output_tag: Any, value: Any) -> None:
        self._op.buffer.add_side(output_tag, value, self._window.max_timestamp())


class WindowFunctionRunner:
    """Runs the window function of a fired window over its inputs (the contents, or the
    incremental result); without a window function the inputs are the output."""

    def __init__(self, function: Any, kind: str | None):
        self.function = function
        self.kind = kind
        self.collector = False
        if function is not None:
            method = function.process if kind == "process" else function.apply
            self.collector = takes_collector(method, 3)

    def __call__(self, key: Any, window: Any, context: WindowContext, inputs: list) -> list:
        fn = self.function
        if fn is None:
            return inputs
        if self.kind == "process":
            return call_collecting(fn.process, (key, context, inputs), self.collector)
        return call_collecting(fn.apply, (key, window, inputs), self.collector)

    def clear(self, context: WindowContext) -> None:
        if self.kind == "process":
            self.function.clear(context)


def evicted_inputs(kind: str | None, fn: Any, values: list) -> list:
    """What the window function gets of the values an evictor left: the values, their
    reduction (``reduce``) or their aggregate's result (``aggregate``)."""
    if kind == "reduce":
        return [fold(fn.reduce, values)] if values else []
    if kind == "aggregate":
        acc = fn.create_accumulator()
        for v in values:
            acc = fn.add(v, acc)
        return [fn.get_result(acc)]
    return values


class WindowOperator(TimerOp):
    """Keyed windows (see the module docstring). ``spec.options``: ``assigner``, ``trigger``,
    ``evictor``, ``allowed_lateness_ms``, ``late_tag_id``, ``incremental_kind`` (``"reduce"``,
    ``"aggregate"`` or None) with ``incremental_function``, ``window_function_kind``
    (``"process"``, ``"apply"`` or None) with ``window_function``."""

    def __init__(self, spec: Any, backend: Any):
        super().__init__(spec, backend)
        o = spec.options
        self.assigner = o["assigner"]
        self.trigger = o["trigger"]
        self.evictor = o.get("evictor")
        self.lateness = o.get("allowed_lateness_ms", 0)
        self.late_tag_id = o.get("late_tag_id")
        self.incremental_kind = o.get("incremental_kind")
        self.incremental = o.get("incremental_function")
        self.event_time = self.assigner.is_event_time()
        self.merging = self.assigner.is_merging()
        self.run_window_function = WindowFunctionRunner(o.get("window_function"), o.get("window_function_kind"))
        self.count_window_ids = bool(o.get("count_window_ids"))
        # built-in aggregations take whole batches; so do process/apply functions, whose
        # contents are buffered as Arrow slices (window_buffer.py), in arrival order
        self.buffered = supports_buffered(self)
        self.order_free_columnar = supports_columnar(self)  # BATCH: need not see input in time order
        self.columnar_input = self.order_free_columnar or self.buffered

    # -- lifecycle -----------------------------------------------------------------------------

    def _user_functions(self) -> list[Any]:
        fns = [self.incremental, self.run_window_function.function]
        return [f for i, f in enumerate(fns) if f is not None and all(f is not g for g in fns[:i])]

    def open(self, ctx: Any) -> None:
        backend = self.backend
        self.timers = InternalTimerService(backend, self, self._on_event_time, self._on_processing_time)
        self.timers.open()
        if self.buffered:
            self.contents = NamespacedBufferState(backend, ListStateDescriptor(CONTENTS_STATE), CONTENTS_STATE)
            self.convert_rows = rows_converter(self.spec.input_type)
        else:
            self.contents = namespaced_state(backend, self._contents_descriptor())
        self.trigger_store = NamespacedStateStore(backend, TRIGGER_STATE_PREFIX)
        self.window_store = NamespacedStateStore(backend, WINDOW_STATE_PREFIX)
        self.global_store = GlobalStateStore(backend)
        self.merging_state = backend.get_partitioned_state(ValueStateDescriptor(MERGING_SET_STATE)) if self.merging else None
        self.count_window_id = backend.get_partitioned_state(ValueStateDescriptor(COUNT_WINDOW_ID_STATE)) if self.count_window_ids else None
        self.tctx = WindowTriggerContext(self)
        self.wctx = WindowContext(self)
        self.buffer = OutputBuffer()
        for fn in self._user_functions():
            if hasattr(fn, "open"):
                fn.open(ctx)

    def close(self) -> None:
        for fn in self._user_functions():
            if hasattr(fn, "close"):
                fn.close()

    def _contents_descriptor(self) -> Any:
        if self.evictor is not None or self.incremental_kind is None:
            return ListStateDescriptor(CONTENTS_STATE)
        if self.incremental_kind == "reduce":
            return ReducingStateDescriptor(CONTENTS_STATE, self.incremental)
        return AggregatingStateDescriptor(CONTENTS_STATE, self.incremental)

    # -- input -----------------------------------------------------------------------------------

    def process(self, origin: tuple, data: Any, ts: list | None = None) -> None:
        self.records_in += len(data)
        backend = self.backend
        if isinstance(data, KeyedBatch) and self.buffered and not buffered_input(data):
            data = data.pairs(self.spec.input_type)  # bare values go one by one
        if isinstance(data, KeyedBatch):
            try:
                if self.buffered:
                    process_buffered(self, data, ts)
                else:
                    process_columnar(self, data, ts)
            except FlowpointError:
                raise
            except Exception as e:
                raise window_error(self, e, f"aggregating a batch of {len(data)} records", backend.current_key) from e
            finally:
                backend.current_key = None
            self.buffer.flush(self, origin)
            return
        element = self._element
        key = value = None
        try:
            if ts is None:
                for key, value in data:
                    backend.current_key = key
                    element(key, value, None)
            else:
                for (key, value), t in zip(data, ts, strict=True):
                    backend.current_key = key
                    element(key, value, t)
        except Exception as e:
            raise window_error(self, e, f"processing {value!r:.200}", key) from e
        finally:
            backend.current_key = None
        self.buffer.flush(self, origin)

    def _element(self, key: Any, value: Any, t: int | None) -> None:
        windows = self.assigner.assign_windows(value, t, self.tctx)
        skipped = True
        if self.merging:
            mws = MergingWindowSet(self.assigner, self.merging_state)
            for w in windows:
                actual = mws.add_window(w, lambda *a: self._merge(key, *a))
                if self._is_window_late(actual):
                    mws.retire_window(actual)
                    continue
                skipped = False
                self._add(key, actual, self.assigner.namespace_of(mws.state_window(actual)), value, t)
            mws.persist()
        else:
            late_before = self.watermark if self.event_time else None
            for w in windows:
                if late_before is not None and self._cleanup_time(w) <= late_before:
                    continue
                skipped = False
                self._add(key, w, None, value, t)
        if skipped and self.event_time and t + self.lateness <= self.watermark:  # type: ignore[operator]
            if self.late_tag_id is not None:
                self.buffer.add_side_id(self.late_tag_id, value, t)
            else:
                self.count(LATE_DROPPED)

    def _add(self, key: Any, window: Any, state_ns: Any, value: Any, t: int | None) -> None:
        """Add an element to a window (its contents live in namespace ``state_ns``, the
        window's own unless merged) and ask the trigger."""
        tctx = self.tctx.at(key, window)
        contents = self.contents
        contents.namespace = tctx.ns if state_ns is None else state_ns
        contents.add(value if self.evictor is None else (value, t))
        result = self.trigger.on_element(value, t, window, tctx)
        if result is not CONTINUE:
            if result.is_fire():
                self._fire(key, window)
            if result.is_purge():
                contents.clear()
        self._register_cleanup_timer(window, tctx.ns)

    def _add_accumulator(self, key: Any, window: Any, partial: Any, t: int) -> None:
        """The columnar path's ``_add``: merge a group's partial accumulator into the window's
        (``t``: the group's latest timestamp, for the trigger)."""
        tctx = self.tctx.at(key, window)
        contents = self.contents
        contents.namespace = tctx.ns
        contents.merge_accumulator(partial)
        after_group(self, key, window, tctx, t)

    def _merge(self, key: Any, result: Any, merged: list[Any], state_window: Any, merged_state_windows: list[Any]) -> None:
        if self.event_time and result.max_timestamp() + self.lateness <= self.watermark:
            msg = (
                f"merging session windows gave {result!r}, which ends before the current watermark "
                f"{self.watermark}: an event-time window cannot become late by merging (check the "
                f"dynamic gap extractor)"
            )
            raise StateAccessError(msg)
        if not self.event_time and result.max_timestamp() <= self.processing_time:
            msg = f"merging session windows gave {result!r}, which ends before the current processing time {self.processing_time}"
            raise StateAccessError(msg)
        tctx = self.tctx.at(key, result)
        tctx.merged = merged
        try:
            self.trigger.on_merge(result, tctx)
        finally:
            tctx.merged = None
        for m in merged:
            self.trigger.clear(m, tctx.at(key, m))
            self._delete_cleanup_timer(m)
        ns = self.assigner.namespace_of
        self.contents.merge_namespaces(ns(state_window), [ns(w) for w in merged_state_windows])

    # -- timers ----------------------------------------------------------------------------------

    def _on_event_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._on_timer(key, namespace, timestamp, True)

    def _on_processing_time(self, key: Any, namespace: Any, timestamp: int) -> None:
        self._on_timer(key, namespace, timestamp, False)

    def _on_timer(self, key: Any, namespace: Any, timestamp: int, event_time: bool) -> None:
        window = self.assigner.window_from_namespace(namespace)
        try:
            mws = None
            if self.merging:
                mws = MergingWindowSet(self.assigner, self.merging_state)
                state_window = mws.state_window(window)
                if state_window is None:  # a trigger left a timer of a merged-away window
                    return
                self.contents.namespace = self.assigner.namespace_of(state_window)
            else:
                self.contents.namespace = namespace
            tctx = self.tctx.at(key, window)
            if event_time:
                result = self.trigger.on_event_time(timestamp, window, tctx)
            else:
                result = self.trigger.on_processing_time(timestamp, window, tctx)
            if result.is_fire():
                self._fire(key, window)
            if result.is_purge():
                self.contents.clear()
            if event_time == self.event_time and timestamp == self._cleanup_time(window):
                self._clear_all_state(key, window, mws)
            if mws is not None:
                mws.persist()
        except Exception as e:
            raise window_error(self, e, f"firing {window!r}", key) from e

    def _cleanup_time(self, window: Any) -> int:
        if self.event_time:
            return min(window.max_timestamp() + self.lateness, MAX_WATERMARK)
        return window.max_timestamp()

    def _is_window_late(self, window: Any) -> bool:
        return self.event_time and self._cleanup_time(window) <= self.watermark

    def _register_cleanup_timer(self, window: Any, namespace: Any) -> None:
        t = self._cleanup_time(window)
        if t == MAX_WATERMARK:
            return
        if self.event_time:
            self.timers.register_event_time_timer(namespace, t)
        else:
            self.timers.register_processing_time_timer(namespace, t)

    def _delete_cleanup_timer(self, window: Any) -> None:
        t = self._cleanup_time(window)
        if t == MAX_WATERMARK:
            return
        if self.event_time:
            self.timers.delete_event_time_timer(self.assigner.namespace_of(window), t)
        else:
            self.timers.delete_processing_time_timer(self.assigner.namespace_of(window), t)

    def _clear_all_state(self, key: Any, window: Any, mws: MergingWindowSet | None) -> None:
        self.contents.clear()
        self.trigger.clear(window, self.tctx.at(key, window))
        self.wctx._window = self.wctx._state_window = window
        self.run_window_function.clear(self.wctx)
        if mws is not None:
            mws.retire_window(window)

    # -- firing ----------------------------------------------------------------------------------

    def _fire(self, key: Any, window: Any) -> None:
        """Run the window function over the contents (namespace already set)."""
        self.wctx._window = self.wctx._state_window = window
        if self.evictor is not None:
            self._fire_evicting(key, window)
            return
        raw = self.contents.raw()
        if raw is None:
            return
        if self.incremental_kind == "reduce":
            inputs = [raw]
        elif self.incremental_kind == "aggregate":
            inputs = [self.incremental.get_result(raw)]
        else:
            inputs = raw.to_list() if type(raw) is ChunkedList else list(raw)
        self._emit(self.run_window_function(key, self._shown(window), self.wctx, inputs), window)

    def _shown(self, window: Any) -> Any:
        """The window the function sees: a count window's next ``CountWindow(id)`` of the
        current key (PyFlink's ids: the key's n-th firing), else the window itself."""
        if not self.count_window_ids:
            return window
        n = self.count_window_id.value() or 0
        self.count_window_id.update(n + 1)
        self.wctx._window = CountWindow(n)
        return self.wctx._window

    def _fire_evicting(self, key: Any, window: Any) -> None:
        pairs = self.contents.raw()
        if pairs is None:
            return
        elements = [TimestampedValue(v, t) for v, t in pairs]
        self.evictor.evict_before(elements, len(elements), window, self.tctx)
        inputs = evicted_inputs(self.incremental_kind, self.incremental, [e.value for e in elements])
        if inputs:
            self._emit(self.run_window_function(key, self._shown(window), self.wctx, inputs), window)
        self.evictor.evict_after(elements, len(elements), window, self.tctx)
        self.contents.update([(e.value, e.timestamp) for e in elements])

    def _emit(self, outputs: list, window: Any) -> None:
        if outputs:
            ts = window.max_timestamp()
            self.buffer.values.extend(outputs)
            self.buffer.timestamps.extend([ts] * len(outputs))


def window_error(op: WindowOperator, e: BaseException, during: str, key: Any) -> FlowpointError:
    """The error the window operator ``op`` raises for ``e``, raised ``during`` its work on
    ``key``: a user function's exception names the function whose code raised."""
    spec = op.spec
    if isinstance(e, UserFunctionError):
        return e
    if isinstance(e, FlowpointError):
        return type(e)(f"operator {spec.name!r} (uid {spec.uid!r}): {e}")
    fn = blamed_function(op, e)
    desc = describe_function(fn) if fn is not None else spec.kind
    msg = (
        f"operator {spec.name!r} (uid {spec.uid!r}, function {desc}) raised {type(e).__name__}: {e} "
        f"while {during} of key {key!r:.100}"
    )
    return user_function_error(msg, e, operator=spec.name, uid=spec.uid, function=desc)


def blamed_function(op: WindowOperator, e: BaseException) -> Any:
    """The user function whose code raised: the first of them in the traceback."""
    candidates = [*op._user_functions(), op.trigger, op.evictor, op.assigner, getattr(op.assigner, "extractor", None)]
    codes: dict[Any, Any] = {}
    for fn in candidates:
        if fn is not None:
            for code in _user_code(fn):
                codes.setdefault(code, fn)
    tb = e.__traceback__
    while tb is not None:
        fn = codes.get(tb.tb_frame.f_code)
        if fn is not None:
            return fn
        tb = tb.tb_next
    return op.spec.function


def _user_code(fn: Any) -> list[Any]:
    """Code objects of a user function (or of the methods of a user class), nested ones too;
    flowpoint's own classes have none."""
    fn = unwrap(fn)
    target = getattr(fn, "user_function", None)
    if callable(target):
        fn = unwrap(target())
    codes = []
    if inspect.isfunction(fn) or inspect.ismethod(fn):
        codes.append(fn.__code__)
    else:
        for klass in type(fn).__mro__:
            if klass.__module__.startswith("flowpoint.") or klass is object:
                continue
            codes.extend(m.__code__ for m in vars(klass).values() if inspect.isfunction(m))
    out = []
    while codes:
        code = codes.pop()
        out.append(code)
        codes.extend(c for c in code.co_consts if inspect.iscode(c))
    return out
