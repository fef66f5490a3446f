"""PyFlink's TypeSerializer (``pyflink.common.serializer``) and window serializers: a program
with a window type of its own gives its assigner a ``get_window_serializer()``, and flowpoint
keeps those windows in state and timers as that serializer's bytes, as Flink does."""

from __future__ import annotations

import struct
from io import BytesIO

import pytest

from flowpoint import CollectSink, Types, WatermarkStrategy
from flowpoint.common.serializer import TypeSerializer
from flowpoint.common.watermark_strategy import TimestampAssigner
from flowpoint.datastream.functions import KeyedProcessFunction, ProcessWindowFunction
from flowpoint.datastream.state import ListStateDescriptor, ValueStateDescriptor
from flowpoint.datastream.window import (
    CountWindow,
    CountWindowSerializer,
    GlobalWindow,
    GlobalWindowSerializer,
    TimeWindow,
    TimeWindowSerializer,
    Trigger,
    TriggerResult,
    TumblingEventTimeWindows,
    Window,
    WindowAssigner,
)
from flowpoint.errors import ConfigurationError


def round_trip(serializer, value):
    out = BytesIO()
    serializer.serialize(value, out)
    data = out.getvalue()
    return data, serializer.deserialize(BytesIO(data))


def test_the_window_serializers_write_pyflink_s_bytes():
    # PyFlink's coders (fn_execution/coder_impl_slow.py): two big-endian int64, one int64, one byte
    assert round_trip(TimeWindowSerializer(), TimeWindow(1, 5)) == (bytes.fromhex("0000000000000001" "0000000000000005"), TimeWindow(1, 5))
    assert round_trip(TimeWindowSerializer(), TimeWindow(-10, 0))[1] == TimeWindow(-10, 0)
    assert round_trip(CountWindowSerializer(), CountWindow(7)) == (bytes.fromhex("0000000000000007"), CountWindow(7))
    assert round_trip(GlobalWindowSerializer(), GlobalWindow.get()) == (b"\x00", GlobalWindow.get())
    assert TumblingEventTimeWindows.of(10).get_window_serializer() == TimeWindowSerializer()
    assert repr(TimeWindowSerializer()) == "TimeWindowSerializer()"


class Decade(Window):
    """Ten time units: decade n covers [10 n, 10 n + 10). No to_namespace, not flowpoint's."""

    def __init__(self, n):
        self.n = n

    def max_timestamp(self):
        return self.n * 10 + 9

    def __eq__(self, other):
        return isinstance(other, Decade) and other.n == self.n

    def __hash__(self):
        return hash(self.n)

    def __repr__(self):
        return f"Decade({self.n})"


class DecadeSerializer(TypeSerializer):
    def serialize(self, element, stream):
        stream.write(struct.pack(">q", element.n))

    def deserialize(self, stream):
        return Decade(struct.unpack(">q", stream.read(8))[0])


class AtDecadeEnd(Trigger):
    def on_element(self, element, timestamp, window, ctx):
        ctx.register_event_time_timer(window.max_timestamp())
        return TriggerResult.CONTINUE

    def on_processing_time(self, time, window, ctx):
        return TriggerResult.CONTINUE

    def on_event_time(self, time, window, ctx):
        return TriggerResult.FIRE_AND_PURGE if time == window.max_timestamp() else TriggerResult.CONTINUE

    def on_merge(self, window, ctx):
        pass

    def clear(self, window, ctx):
        ctx.delete_event_time_timer(window.max_timestamp())


class Decades(WindowAssigner):
    def __init__(self, serializer=None):
        self.serializer = serializer

    def assign_windows(self, element, timestamp, context):
        return [Decade(timestamp // 10)]

    def get_default_trigger(self, env):  # PyFlink's signature: the environment
        return AtDecadeEnd()

    def get_window_serializer(self):
        return self.serializer

    def is_event_time(self):
        return True


class SecondField(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return value[1]


class Listing(ProcessWindowFunction):
    def process(self, key, context, elements):
        yield f"{key} {context.window()} ends {context.window().max_timestamp()}: {sorted(e[1] for e in elements)}"


def run(make_env, assigner):
    env = make_env(parallelism=1)
    sink = CollectSink()
    data = [("a", 1), ("b", 3), ("a", 12), ("a", 15), ("b", 19), ("a", 21), ("b", 35)]
    (
        env.from_collection(data, type_info=Types.TUPLE([Types.STRING(), Types.INT()]))
        .assign_timestamps_and_watermarks(WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondField()))
        .key_by(lambda r: r[0], key_type=Types.STRING())
        .window(assigner)
        .process(Listing(), Types.STRING())
        .sink_to(sink)
    )
    return env.execute("decades"), sink


def test_a_window_type_of_the_program_s_own_lives_in_state_as_its_serializer_s_bytes(make_env):
    # Decade has no to_namespace(): its windows reach state and timers only through DecadeSerializer
    _result, sink = run(make_env, Decades(DecadeSerializer()))
    assert sorted(sink.results) == sorted([
        "a Decade(0) ends 9: [1]", "b Decade(0) ends 9: [3]", "a Decade(1) ends 19: [12, 15]",
        "b Decade(1) ends 19: [19]", "a Decade(2) ends 29: [21]", "b Decade(3) ends 39: [35]",
    ])


def test_a_window_without_a_serializer_that_can_write_it_is_refused_by_name(make_env):
    with pytest.raises(Exception) as info:  # noqa: PT011 - the job fails with the cause named
        run(make_env, Decades(TimeWindowSerializer()))
    text = f"{info.value} {info.value.__cause__}"
    assert "Decades.get_window_serializer()" in text and "Decade(0)" in text and "TypeSerializer" in text
    assert isinstance(info.value, ConfigurationError) or "ConfigurationError" in text


class LongSerializer(TypeSerializer):
    """A program's serializer of ints (big-endian int64), given where a type goes."""

    def serialize(self, element, stream):
        stream.write(struct.pack(">q", element))

    def deserialize(self, stream):
        return struct.unpack(">q", stream.read(8))[0]


class CountAndList(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", LongSerializer()))
        self.seen = runtime_context.get_list_state(ListStateDescriptor("seen", LongSerializer()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        self.seen.add(value[1])
        yield value[0], self.count.value(), list(self.seen.get())


@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_type_serializer_given_as_a_state_or_stream_type_is_accepted(make_env, backend):
    # PyFlink 2.3 refuses these (ValueError: Unsupported type_info LongSerializer()); flowpoint
    # keeps the values as the Python objects they are, as for an undeclared type
    env = make_env(parallelism=2)
    env.get_configuration().set("state.backend.type", backend)
    sink = CollectSink()
    (
        env.from_collection([("a", 1), ("b", 5), ("a", 2)])
        .map(lambda r: r, output_type=LongSerializer())
        .key_by(lambda r: r[0])
        .process(CountAndList())
        .sink_to(sink)
    )
    env.execute("serializer types")
    assert sorted(sink.results) == [("a", 1, [1]), ("a", 2, [1, 2]), ("b", 1, [5])]
