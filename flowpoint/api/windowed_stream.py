"""``WindowedStream`` and ``AllWindowedStream``: ``key_by(...).window(assigner)`` and
``window_all(assigner)``, recorded as one ``"window"`` transformation.

The transformation's ``function`` is the user's main function (the window function if there is
one, else the reduce/aggregate function); its ``options`` hold everything the window operator
(:mod:`flowpoint.tasks.window_operator`) needs: ``assigner``, ``trigger``, ``evictor``,
``allowed_lateness_ms``, ``late_tag_id``, ``function_kind`` (``"reduce"``, ``"aggregate"``,
``"process"``, ``"apply"``, ``"reduce+process"``, ...), ``incremental_kind`` and
``incremental_function``, ``window_function_kind`` and ``window_function``.

``window_all`` is, as in Flink, a keyed window over a constant key, with parallelism 1.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING, Any

from flowpoint.api.aggregates import Aggregates, BuiltinAggregate
from flowpoint.api.collecting import call_collecting, takes_collector
from flowpoint.api.functions import (
    AggregateFunction,
    AllWindowFunction,
    KeySelector,
    OutputTag,
    ProcessAllWindowFunction,
    ProcessWindowFunction,
    ReduceFunction,
    ReduceFunctionWrapper,
    WindowFunction,
)
from flowpoint.api.time import Duration, to_millis
from flowpoint.api.triggers import SlidingCountTrigger
from flowpoint.api.types import Types
from flowpoint.api.windows import (
    CountEvictor,
    CountTrigger,
    CountTumblingWindowAssigner,
    Evictor,
    GlobalWindows,
    PurgingTrigger,
    Trigger,
    WindowAssigner,
)
from flowpoint.errors import ConfigurationError, JobGraphError

if TYPE_CHECKING:
    from flowpoint.api.datastream import DataStream, KeyedStream
    from flowpoint.api.types import TypeInformation


# -- window functions in their call forms ----------------------------------------------------------


class _Adapter:
    def __init__(self, function: Any):
        self.function = function
        self.collector: bool | None = None

    def user_function(self) -> Any:
        return self.function

    def open(self, runtime_context: Any) -> None:
        if hasattr(self.function, "open"):
            self.function.open(runtime_context)

    def close(self) -> None:
        if hasattr(self.function, "close"):
            self.function.close()


class CallableWindowFunction(_Adapter, WindowFunction):
    """``apply(lambda key, window, inputs: ...)``: a plain callable as a WindowFunction."""

    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        if self.collector is None:
            self.collector = takes_collector(self.function, 3)
        return call_collecting(self.function, (key, window, inputs), self.collector)


class AllProcessWindowFunctionAdapter(_Adapter, ProcessWindowFunction):
    """A :class:`ProcessAllWindowFunction` run as a keyed one (the key is dropped)."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        if self.collector is None:
            self.collector = takes_collector(self.function.process, 2)
        return call_collecting(self.function.process, (context, elements), self.collector)

    def clear(self, context: Any) -> None:
        self.function.clear(context)


class AllWindowFunctionAdapter(_Adapter, WindowFunction):
    """An :class:`AllWindowFunction` (or a callable ``(window, inputs)``) run as a keyed one."""

    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        method = getattr(self.function, "apply", self.function)
        if self.collector is None:
            self.collector = takes_collector(method, 2)
        return call_collecting(method, (window, inputs), self.collector)


class ConstantKeySelector(KeySelector):
    """The key of every record in ``window_all``: 0."""

    def get_key(self, value: Any) -> int:
        return 0

    def __repr__(self) -> str:
        return "constant key 0"


# -- the API ---------------------------------------------------------------------------------------


class WindowedStream:
    """A keyed stream cut into windows: ``key_by(...).window(assigner)``. Configure it with
    :meth:`trigger`, :meth:`evictor`, :meth:`allowed_lateness` and
    :meth:`side_output_late_data`, then give it a window function."""

    _all = False

    def __init__(self, keyed_stream: KeyedStream, window_assigner: WindowAssigner):
        if not isinstance(window_assigner, WindowAssigner):
            msg = (
                f"{self._method()}() needs a WindowAssigner (TumblingEventTimeWindows.of(...), "
                f"EventTimeSessionWindows.with_gap(...), GlobalWindows.create(), ...); got {window_assigner!r:.80}"
            )
            raise JobGraphError(msg)
        self._keyed_stream = keyed_stream
        self._assigner = window_assigner
        self._trigger: Trigger | None = None
        self._evictor: Evictor | None = None
        self._lateness = 0
        self._late_tag: OutputTag | None = None
        self._count_window_ids = False  # count_window: functions see CountWindow(id), as PyFlink's

    def _default_trigger(self) -> Any:
        """The assigner's trigger: PyFlink's assigners take the environment
        (``get_default_trigger(self, env)``), flowpoint's take nothing; both are called right."""
        method = self._assigner.get_default_trigger
        try:
            takes_env = any(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL) for p in inspect.signature(method).parameters.values())
        except (TypeError, ValueError):
            takes_env = False
        return method(self._keyed_stream._env) if takes_env else method()

    def _method(self) -> str:
        return "window_all" if self._all else "window"

    def _describe(self, function: str | None = None) -> str:
        """The operator's name: ``Window(TumblingEventTimeWindows(10000), EventTimeTrigger, reduce)``."""
        parts = [repr(self._assigner), repr(self._trigger or self._default_trigger())]
        if self._evictor is not None:
            parts.append(repr(self._evictor))
        if function:
            parts.append(function)
        return f"{'AllWindow' if self._all else 'Window'}({', '.join(parts)})"

    # -- configuration -------------------------------------------------------------------------

    def trigger(self, trigger: Trigger) -> WindowedStream:
        if not isinstance(trigger, Trigger):
            msg = f"trigger() of {self._describe()} needs a Trigger (EventTimeTrigger.create(), CountTrigger.of(n), ...); got {trigger!r:.80}"
            raise JobGraphError(msg)
        if self._assigner.is_merging() and not trigger.can_merge():
            msg = (
                f"{self._describe()}: the merging window assigner {self._assigner!r} cannot be used with "
                f"{trigger!r}, which does not support merging; use a trigger whose can_merge() is True"
            )
            raise JobGraphError(msg)
        self._trigger = trigger
        self._count_window_ids = False  # another trigger: the firings are no longer PyFlink's count windows
        return self

    def evictor(self, evictor: Evictor) -> WindowedStream:
        if not isinstance(evictor, Evictor):
            msg = f"evictor() of {self._describe()} needs an Evictor (CountEvictor.of(n), TimeEvictor.of(...), ...); got {evictor!r:.80}"
            raise JobGraphError(msg)
        self._evictor = evictor
        return self

    def allowed_lateness(self, time: Duration | int) -> WindowedStream:
        """Keep windows for ``time`` after their end: late elements fire them again."""
        ms = to_millis(time, f"the allowed lateness of {self._describe()}")
        if ms < 0:
            msg = f"the allowed lateness of {self._describe()} cannot be negative; got {ms} ms"
            raise ConfigurationError(msg)
        self._lateness = ms
        return self

    def side_output_late_data(self, output_tag: OutputTag) -> WindowedStream:
        """Send elements dropped as late to ``output_tag`` (read it with ``get_side_output``)."""
        if not isinstance(output_tag, OutputTag):
            msg = f"side_output_late_data() of {self._describe()} needs an OutputTag; got {output_tag!r:.80}"
            raise JobGraphError(msg)
        self._late_tag = output_tag
        return self

    # -- window functions ----------------------------------------------------------------------

    def reduce(self, reduce_function: ReduceFunction | Any, window_function: Any = None, output_type: TypeInformation | None = None) -> DataStream:
        """Reduce each window incrementally (one value per window in state); with a window
        function, it gets the reduced value as its only input."""
        if isinstance(reduce_function, ReduceFunction):
            fn = reduce_function
        elif callable(reduce_function):
            fn = ReduceFunctionWrapper(reduce_function)
        else:
            msg = f"reduce() of {self._describe()} needs a ReduceFunction or a callable (a, b) -> value; got {reduce_function!r:.80}"
            raise JobGraphError(msg)
        return self._build("reduce", fn, window_function, output_type)

    def aggregate(self, aggregate_function: AggregateFunction, window_function: Any = None, accumulator_type: TypeInformation | None = None, output_type: TypeInformation | None = None) -> DataStream:
        """Aggregate each window incrementally (one accumulator per window in state); with a
        window function, it gets the result as its only input."""
        if not isinstance(aggregate_function, AggregateFunction):
            msg = (
                f"aggregate() of {self._describe()} needs an AggregateFunction (create_accumulator, add, "
                f"get_result, merge) or one of Aggregates.count()/sum()/min()/max()/avg(); got {aggregate_function!r:.80}"
            )
            raise JobGraphError(msg)
        return self._build("aggregate", aggregate_function, window_function, output_type)

    def process(self, process_window_function: Any, output_type: TypeInformation | None = None) -> DataStream:
        """Run a ProcessWindowFunction over all elements of each fired window."""
        return self._build(None, None, self._require_process(process_window_function), output_type)

    def apply(self, window_function: Any, output_type: TypeInformation | None = None) -> DataStream:
        """Run a WindowFunction (``apply(key, window, inputs)``) over each fired window."""
        return self._build(None, None, window_function, output_type)

    def sum(self, position_to_sum: int | str = 0) -> DataStream:
        """The first record of each window with the field replaced by the window's sum."""
        return self.aggregate(Aggregates.sum(position_to_sum), output_type=self._input_type())

    def min(self, position_to_min: int | str = 0) -> DataStream:
        return self.aggregate(Aggregates.min(position_to_min), output_type=self._input_type())

    def max(self, position_to_max: int | str = 0) -> DataStream:
        return self.aggregate(Aggregates.max(position_to_max), output_type=self._input_type())

    def count(self) -> DataStream:
        """The number of records of each window."""
        return self.aggregate(Aggregates.count(), output_type=Types.LONG())

    def avg(self, field: int | str = 0) -> DataStream:
        """The mean of the field over each window, as a float."""
        return self.aggregate(Aggregates.avg(field), output_type=Types.DOUBLE())

    # -- building ------------------------------------------------------------------------------

    def _input_type(self) -> Any:
        return self._keyed_stream._t.output_type

    def _require_process(self, function: Any) -> Any:
        expected = ProcessAllWindowFunction if self._all else ProcessWindowFunction
        if not isinstance(function, expected):
            msg = f"process() of {self._describe()} needs a {expected.__name__}; got {type(function).__name__}: {function!r:.80}"
            raise JobGraphError(msg)
        return function

    def _window_function(self, function: Any) -> tuple[str, Any]:
        """``(kind, function as the operator calls it)`` of a window function."""
        if self._all:
            if isinstance(function, ProcessAllWindowFunction):
                return "process", AllProcessWindowFunctionAdapter(function)
            if isinstance(function, AllWindowFunction) or callable(function):
                return "apply", AllWindowFunctionAdapter(function)
            expected = "a ProcessAllWindowFunction, an AllWindowFunction or a callable (window, inputs)"
        else:
            if isinstance(function, ProcessWindowFunction):
                return "process", function
            if isinstance(function, WindowFunction):
                return "apply", function
            if callable(function) and not isinstance(function, (ProcessAllWindowFunction, AllWindowFunction)):
                return "apply", CallableWindowFunction(function)
            expected = "a ProcessWindowFunction, a WindowFunction or a callable (key, window, inputs)"
        msg = f"the window function of {self._describe()} must be {expected}; got {type(function).__name__}: {function!r:.80}"
        raise JobGraphError(msg)

    def _build(self, incremental_kind: str | None, incremental: Any, window_function: Any, output_type: Any) -> DataStream:
        # in the function: the stream classes import each other
        from flowpoint.api.datastream import DataStream

        wf_kind, wf = (None, None) if window_function is None else self._window_function(window_function)
        function_kind = "+".join(k for k in (incremental_kind, wf_kind) if k)
        if incremental_kind == "reduce" and wf is None and output_type is None:
            output_type = self._input_type()  # a reduction keeps the element type
        main = window_function if window_function is not None else incremental
        name = self._describe(repr(incremental) if isinstance(incremental, BuiltinAggregate) else function_kind)
        t = self._keyed_stream._add("window", name, main, output_type)
        t.options.update(
            assigner=self._assigner,
            trigger=self._trigger or self._default_trigger(),
            evictor=self._evictor,
            allowed_lateness_ms=self._lateness,
            late_tag_id=self._late_tag.tag_id if self._late_tag is not None else None,
            function_kind=function_kind,
            incremental_kind=incremental_kind,
            incremental_function=incremental,
            window_function_kind=wf_kind,
            window_function=wf,
            count_window_ids=self._count_window_ids,
        )
        if self._all:
            t.parallelism = 1
            t.max_parallelism = 1
        return DataStream(self._keyed_stream._env, t)


class AllWindowedStream(WindowedStream):
    """``window_all(assigner)``: windows over the whole stream, evaluated by one task (a keyed
    window over a constant key). ``process`` takes a ProcessAllWindowFunction, ``apply`` an
    AllWindowFunction."""

    _all = True

    def __init__(self, data_stream: DataStream, window_assigner: WindowAssigner):
        super().__init__(data_stream.key_by(ConstantKeySelector()), window_assigner)


# -- entry points for DataStream / KeyedStream -------------------------------------------------------


def window(keyed_stream: KeyedStream, window_assigner: WindowAssigner) -> WindowedStream:
    """``KeyedStream.window(assigner)``."""
    if isinstance(window_assigner, CountTumblingWindowAssigner):
        return count_window(keyed_stream, window_assigner.size, window_assigner.slide)
    return WindowedStream(keyed_stream, window_assigner)


def count_window(keyed_stream: KeyedStream, size: int, slide: int | None = None) -> WindowedStream:
    """``KeyedStream.count_window(size[, slide])``: windows of ``size`` elements per key, every
    ``size`` (tumbling) or every ``slide`` elements (sliding, the last ``size`` elements)."""
    return _count(WindowedStream(keyed_stream, GlobalWindows.create()), size, slide)


def window_all(data_stream: DataStream, window_assigner: WindowAssigner) -> AllWindowedStream:
    """``DataStream.window_all(assigner)``."""
    if isinstance(window_assigner, CountTumblingWindowAssigner):
        return count_window_all(data_stream, window_assigner.size, window_assigner.slide)
    return AllWindowedStream(data_stream, window_assigner)


def count_window_all(data_stream: DataStream, size: int, slide: int | None = None) -> AllWindowedStream:
    """``DataStream.count_window_all(size[, slide])``."""
    return _count(AllWindowedStream(data_stream, GlobalWindows.create()), size, slide)  # type: ignore[return-value]


def _count(ws: WindowedStream, size: int, slide: int | None) -> WindowedStream:
    """Count windows on the GlobalWindow; window functions see ``CountWindow(id)`` as PyFlink's
    (``slide`` None or 0, PyFlink's default, is tumbling)."""
    for what, n in (("size", size), ("slide", slide)):
        if n is not None and (not isinstance(n, int) or isinstance(n, bool) or n < (1 if what == "size" else 0)):
            msg = f"count_window{'_all' if ws._all else ''}() needs a positive int {what}; got {n!r}"
            raise ConfigurationError(msg)
    if not slide:
        ws.trigger(PurgingTrigger.of(CountTrigger.of(size)))
    else:
        # PyFlink's CountSlidingWindowAssigner: the first window once there are ``size`` elements
        ws.evictor(CountEvictor.of(size)).trigger(SlidingCountTrigger(size, slide))
    ws._count_window_ids = True
    return ws
