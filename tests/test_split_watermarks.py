"""A source task that reads several splits keeps one watermark per split through the operators
chained after the source, up to the exchange (DESIGN section 8): the window stage takes the
minimum over splits, and at the end of input every split's final watermark fires the windows.

Regression: the operators between the source and the exchange (a map, a filter, a process
function) used to forward only the highest split's watermark, so the other splits' channels
stayed at Long.MIN_VALUE, event-time windows never fired and a bounded job ended with no
output at all."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from flowpoint import (
    CollectSink,
    Duration,
    ProcessFunction,
    TimestampAssigner,
    TumblingEventTimeWindows,
    Types,
    WatermarkStrategy,
)
from flowpoint.connectors.files import FileSource, StreamFormat

MINUTE = 60_000


class LineTime(TimestampAssigner):
    def extract_timestamp(self, value, record_timestamp):
        return int(value.split(",")[0])


class Pass(ProcessFunction):
    def process_element(self, value, ctx):
        yield value


def write_splits(d, files: int, per_file: int) -> list[tuple[int, str]]:
    """``files`` files (one split each) whose event times interleave across files."""
    os.makedirs(d, exist_ok=True)
    events = []
    for f in range(files):
        lines = []
        for i in range(per_file):
            t = i * (10 * MINUTE // per_file) + f * 1_000  # in order in each file, all ten minutes
            key = "abc"[(i + f) % 3]
            lines.append(f"{t},{key}")
            events.append((t, key))
        with open(os.path.join(d, f"part-{f}.txt"), "w", encoding="utf-8") as out:
            out.write("\n".join(lines) + "\n")
    return events


def expected_windows(events) -> Counter:
    return Counter((t // MINUTE * MINUTE, key) for t, key in events)


@pytest.mark.slow
@pytest.mark.parametrize(("chain", "parallelism"), [("map", 1), ("filter+map", 2), ("process", 1), ("source-strategy", 2)])
def test_windows_fire_for_every_split_of_a_task(make_env, tmp_path, parallelism, chain):
    events = write_splits(tmp_path / "in", files=5, per_file=80)
    env = make_env(parallelism=parallelism, max_records=60)  # several epochs, several splits per task
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(5_000)).with_timestamp_assigner(LineTime())
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(tmp_path / "in")).build()
    if chain == "source-strategy":
        lines = env.from_source(source, strategy, "lines").map(lambda s: s)
    else:
        lines = env.from_source(source).assign_timestamps_and_watermarks(strategy)
        if chain == "filter+map":
            lines = lines.filter(lambda s: bool(s)).map(lambda s: s)
        elif chain == "process":
            lines = lines.process(Pass(), Types.STRING())
        else:
            lines = lines.map(lambda s: s)
    sink = CollectSink()
    (lines.map(lambda s: (s.split(",")[1], 1), Types.TUPLE([Types.STRING(), Types.LONG()]))
     .key_by(lambda t: t[0])
     .window(TumblingEventTimeWindows.of(Duration.of_millis(MINUTE)))
     .reduce(lambda a, b: (a[0], a[1] + b[1]))
     .sink_to(sink))
    result = env.execute(f"split watermarks {chain} p{parallelism}")
    assert result.epochs >= 3
    # the window start is not in a reduce's output: recount the expected per key and compare
    # multisets of (key, count), and the total
    got = Counter((k, n) for k, n in sink.results)
    want = Counter((key, n) for (_, key), n in expected_windows(events).items())
    assert sum(n for _, n in sink.results) == len(events)
    assert got == want
