"""FileSource and FileSink: formats, splits over several epochs, monitoring, errors, round trips."""

from __future__ import annotations

import json
import os
import re
import time
from collections import Counter

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from flowpoint import CollectSink, Duration, Row, Types
from flowpoint.api.typed_values import java_to_string
from flowpoint.api.types import arrow_to_rows
from flowpoint.connectors.file_sink import BucketAssigner, Encoder, FileSink
from flowpoint.connectors.files import BulkFormat, FileFormat, FileSource, StreamFormat
from flowpoint.errors import ConfigurationError, FlowpointError, JobCancelledError

WORD_N = Types.ROW_NAMED(["word", "n"], [Types.STRING(), Types.LONG()])
PEOPLE = Types.ROW_NAMED(["name", "age", "score"], [Types.STRING(), Types.LONG(), Types.DOUBLE()])


def write(path, text: str) -> str:
    path = str(path)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def publish(path, text: str) -> None:
    """Write under a hidden temporary name, then rename: how files must appear in a watched dir."""
    tmp = os.path.join(os.path.dirname(path), "." + os.path.basename(path) + ".inprogress")
    write(tmp, text)
    os.replace(tmp, path)


def add_junk(directory) -> None:
    """Files a directory source must skip; reading any of them would fail the job."""
    for name in ("_SUCCESS", ".hidden.csv", "part-9.csv.inprogress", "x.tmp"):
        write(os.path.join(directory, name), "not,a,valid\nfile\n")


def read_direct(source: FileSource, budget: int = 3) -> list:
    """Read a source split by split without Spark, like the coordinator and the tasks do."""
    reader = source.create_reader()
    out = []
    for split in source.create_splits(2):
        pos = split.start
        while True:
            plan = source.plan(split, pos, budget, 0.0)
            if plan.end != pos:
                for batch in reader.read(split, source.read_spec(split, pos, plan.end)):
                    out.extend(batch if isinstance(batch, list) else arrow_to_rows(batch, source.output_type))
            pos = plan.end
            if plan.finished:
                break
    return out


def final_sums(results) -> dict:
    """The last (largest) running sum per word of a keyed reduce over positive numbers."""
    sums: dict = {}
    for r in results:
        sums[r.word] = max(sums.get(r.word, 0), r.n)
    return sums


def sum_n(a, b):
    return Row(word=a.word, n=a.n + b.n)


# -- reading (end to end) ----------------------------------------------------------------------


def test_csv_and_text_sources_over_several_epochs(make_env, tmp_path):
    d = tmp_path / "csv"
    write(d / "a.csv", "word,n\nx,1\ny,2\n\nx,3\nz,4\r\nx,5\n")
    write(d / "b.csv", "word,n\ny,10\nz,20\nx,30\ny,40\nq,50\nz,60\n")
    add_junk(d)
    lines = write(tmp_path / "lines.txt", "alpha\nbeta\n\ngamma \r\ndelta")

    env = make_env(parallelism=2, max_records=10)  # 5 splits: 2 records per split and epoch
    typed, untyped, text = CollectSink(), CollectSink(), CollectSink()
    env.from_source(FileSource.for_format(FileFormat.csv(WORD_N), str(d)).build()) \
        .key_by(lambda r: r.word).reduce(sum_n).sink_to(typed)
    env.from_source(FileSource.for_format(FileFormat.csv(), f"file://{d}").build()) \
        .map(lambda r: (r.word, r.n * 2)).sink_to(untyped)
    env.from_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(), lines).build()) \
        .map(lambda s: s.upper()).sink_to(text)
    result = env.execute("csv")

    assert result.epochs >= 3  # records spread over several epochs
    records = [("x", 1), ("y", 2), ("x", 3), ("z", 4), ("x", 5), ("y", 10), ("z", 20), ("x", 30), ("y", 40), ("q", 50), ("z", 60)]
    assert len(typed.results) == len(records)
    assert final_sums(typed.results) == {"x": 39, "y": 52, "z": 84, "q": 50}
    assert Counter(untyped.results) == Counter((w, 2 * n) for w, n in records)
    assert Counter(text.results) == Counter(["ALPHA", "BETA", "", "GAMMA ", "DELTA"])


def test_json_lines_sources(make_env, tmp_path):
    d = tmp_path / "json"
    write(d / "1.jsonl", '{"word": "x", "n": 1, "extra": [1, 2]}\n\n{"n": 2, "word": "y"}\n{"word": "x", "n": 3}\n')
    write(d / "2.jsonl", "".join(json.dumps({"word": w, "n": n}) + "\n" for w, n in [("y", 4), ("z", 5), ("x", 6), ("z", 7)]))
    add_junk(d)

    env = make_env(parallelism=2, max_records=8)  # 4 splits: 2 records per split and epoch
    raw, typed = CollectSink(), CollectSink()
    env.from_source(FileSource.for_format(FileFormat.json_lines(), str(d)).build()).map(lambda r: r).sink_to(raw)
    env.from_source(FileSource.for_format(FileFormat.json_lines(WORD_N), str(d)).build()) \
        .key_by(lambda r: r.word).reduce(sum_n).sink_to(typed)
    env.execute("json")

    # objects become Rows named after their keys, in the file's key order
    by_repr = Counter(repr(r) for r in raw.results)
    assert by_repr == Counter([
        "Row(word='x', n=1, extra=[1, 2])", "Row(n=2, word='y')", "Row(word='x', n=3)",
        "Row(word='y', n=4)", "Row(word='z', n=5)", "Row(word='x', n=6)", "Row(word='z', n=7)",
    ])
    assert all(r.n == r["n"] for r in raw.results)
    assert len(typed.results) == 7
    assert final_sums(typed.results) == {"x": 10, "y": 6, "z": 12}


def test_parquet_source_and_arrow_passthrough_to_parquet_sink(make_env, tmp_path):
    d = tmp_path / "pq"
    os.makedirs(d)
    words = ["a", "b", "c"]
    t1 = pa.table({"word": [words[i % 3] for i in range(10)], "n": list(range(10)), "other": [0.5] * 10})
    t2 = pa.table({"n": pa.array(list(range(10, 17)), pa.int32()), "word": [words[i % 3] for i in range(7)]})
    pq.write_table(t1, d / "one.parquet", row_group_size=3)
    pq.write_table(t2, d / "two.parquet", row_group_size=2)
    add_junk(d)
    out_dir = tmp_path / "copy"

    env = make_env(parallelism=2, max_records=12)  # 3 splits: 4 records per split and epoch
    typed, untyped = CollectSink(), CollectSink()
    stream = env.from_source(FileSource.for_bulk_file_format(BulkFormat.parquet(WORD_N), str(d)).build())
    stream.sink_to(FileSink.for_bulk_format(str(out_dir), BulkFormat.parquet(WORD_N)).build())
    stream.key_by(lambda r: r.word).reduce(sum_n).sink_to(typed)
    env.from_source(FileSource.for_format(FileFormat.parquet(), str(d / "one.parquet")).build()) \
        .map(lambda r: (r.word, r.n, r.other)).sink_to(untyped)
    env.execute("parquet")

    all_rows = [(words[i % 3], i) for i in range(10)] + [(words[i % 3], 10 + i) for i in range(7)]
    expected = {w: sum(n for ww, n in all_rows if ww == w) for w in words}
    assert len(typed.results) == 17
    assert final_sums(typed.results) == expected
    assert Counter(untyped.results) == Counter((words[i % 3], i, 0.5) for i in range(10))
    copied = pq.read_table(out_dir)
    assert copied.schema == WORD_N.arrow_schema()
    assert Counter(zip(copied.column("word").to_pylist(), copied.column("n").to_pylist(), strict=True)) == Counter(all_rows)


# -- writing and reading back ------------------------------------------------------------------


def test_file_sinks_round_trip(make_env, tmp_path):
    people = [
        Row(name=f"p{i}" if i % 4 else f'odd, "quoted" é{i}', age=20 + i, score=i / 4) for i in range(23)
    ]
    out = {k: str(tmp_path / "out" / k) for k in ("json", "csv", "parquet", "text")}

    env = make_env(parallelism=2, max_records=12)
    stream = env.from_collection(people, type_info=PEOPLE).rebalance()
    flat = BucketAssigner.base_path_bucket_assigner()
    stream.sink_to(FileSink.for_row_format(out["json"], Encoder.json_lines()).with_bucket_assigner(flat).build())
    stream.sink_to(FileSink.for_row_format(f"file://{out['csv']}", Encoder.csv(header=True)).with_bucket_assigner(flat).build())
    stream.sink_to(FileSink.for_bulk_format(out["parquet"], BulkFormat.parquet(PEOPLE)).with_bucket_assigner(flat).build())
    stream.sink_to(FileSink.for_row_format(out["text"], Encoder.simple_string_encoder()).with_bucket_assigner(flat).build())
    result = env.execute("write")
    assert result.epochs == 2

    for kind in out:
        names = os.listdir(out[kind])
        for name in names:  # Flink's part file names, no in-progress pieces left
            assert re.fullmatch(r"part-[0-9a-f-]{36}-\d+", name), (kind, name)
        assert len({n[5:41] for n in names}) == 2, kind  # one uuid per sink instance
        # a row-format part file holds both epochs (the default rolling policy); a Parquet piece
        # becomes a part file of its own
        assert len(names) == (4 if kind == "parquet" else 2), (kind, names)

    env = make_env(parallelism=2, max_records=1000)
    sinks = {k: CollectSink() for k in out}
    env.from_source(FileSource.for_format(FileFormat.json_lines(), out["json"]).build()).sink_to(sinks["json"])
    env.from_source(FileSource.for_format(FileFormat.csv(PEOPLE), out["csv"]).build()).sink_to(sinks["csv"])
    env.from_source(FileSource.for_format(FileFormat.parquet(), out["parquet"]).build()).sink_to(sinks["parquet"])
    env.from_source(FileSource.for_record_stream_format(StreamFormat.text_line_format(), out["text"]).build()) \
        .sink_to(sinks["text"])
    env.execute("read back")

    expected = Counter(people)
    assert Counter(sinks["json"].results) == expected
    assert all(r._fields == ("name", "age", "score") for r in sinks["json"].results)
    assert Counter(sinks["csv"].results) == expected
    assert Counter(sinks["parquet"].results) == expected
    # simple_string_encoder writes what Flink's SimpleStringEncoder writes: Java's Row.toString
    assert "+I[p1, 21, 0.25]" in sinks["text"].results
    assert Counter(sinks["text"].results) == Counter(java_to_string(PEOPLE)(p) for p in people)


# -- monitoring --------------------------------------------------------------------------------


def wait_for(sink: CollectSink, count: int, client, timeout: float = 60.0) -> list:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        results = sink.results
        if len(results) >= count:
            return results
        if client.is_done():
            client.wait()  # raises why the job ended
            pytest.fail(f"job ended with {len(results)} of {count} records")
        time.sleep(0.1)
    pytest.fail(f"timed out: {len(sink.results)} of {count} records")


def test_monitoring_picks_up_new_files(make_env, tmp_path):
    d = tmp_path / "watched"
    write(d / "f1.txt", "a\nb\nc\n")
    env = make_env(parallelism=2, max_records=100, execution_epoch_interval=50)
    sink = CollectSink()
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), str(d)) \
        .monitor_continuously(Duration.of_millis(100)).build()
    assert not source.is_bounded()
    env.from_source(source).map(lambda s: s + "!").sink_to(sink)
    client = env.execute_async("watch")
    try:
        assert sorted(wait_for(sink, 3, client)) == ["a!", "b!", "c!"]
        write(d / "f2.txt.inprogress", "never\n")  # still being written: must be skipped
        publish(d / "f2.txt", "d\ne\n")
        publish(d / "sub" / "f3.txt", "f\n")
        assert sorted(wait_for(sink, 6, client)) == ["a!", "b!", "c!", "d!", "e!", "f!"]
        time.sleep(0.5)  # a few more discovery rounds: nothing is read twice
        assert sorted(sink.results) == ["a!", "b!", "c!", "d!", "e!", "f!"]
    finally:
        client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)


# -- errors ------------------------------------------------------------------------------------


def test_missing_path_fails_the_job_naming_it(make_env, tmp_path):
    missing = str(tmp_path / "no-such-dir")
    env = make_env()
    env.from_source(FileSource.for_format(FileFormat.csv(), missing).build()).sink_to(CollectSink())
    with pytest.raises(ConfigurationError, match="no-such-dir.*does not exist"):
        env.execute("missing")


def test_malformed_json_line_fails_the_job_naming_file_and_line(make_env, tmp_path):
    bad = write(tmp_path / "in" / "events.jsonl", '{"a": 1}\n{"a": 2}\n\n{"a": 3,}\n{"a": 4}\n')
    env = make_env(parallelism=1)
    env.from_source(FileSource.for_format(FileFormat.json_lines(), bad).build()).sink_to(CollectSink())
    with pytest.raises(FlowpointError, match=r"events\.jsonl' line 4 is not valid JSON"):
        env.execute("bad json")


# -- without Spark -----------------------------------------------------------------------------


def test_directory_listing_order_and_skipped_files(tmp_path):
    d = tmp_path / "d"
    write(d / "b.txt", "b1\nb2\n")
    write(d / "a.txt", "a1\n")
    write(d / "sub" / "c.txt", "c1\n")
    write(d / "_hidden" / "x.txt", "no\n")
    add_junk(d)
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), d).build()
    splits = source.create_splits(2)
    assert [os.path.relpath(s.split_id, d) for s in splits] == ["a.txt", "b.txt", os.path.join("sub", "c.txt")]
    assert source.is_bounded() and source.output_type == Types.STRING()
    assert read_direct(source, budget=1) == ["a1", "b1", "b2", "c1"]


def test_reads_are_ranges_and_repeatable(tmp_path):
    lines = [f"w{i % 7},{i}" for i in range(10_000)]
    path = write(tmp_path / "big.csv", "word,n\n" + "\n".join(lines) + "\n")
    for fmt in (FileFormat.csv(WORD_N), FileFormat.csv(), StreamFormat.text_line_format()):
        source = FileSource.for_format(fmt, path).build()
        (split,) = source.create_splits(1)
        plan = source.plan(split, 0, 10**9, 0.0)
        assert plan.finished and plan.end == (10_001 if fmt.kind == "text" else 10_000)
        reader = source.create_reader()

        def read(start, end, source=source, reader=reader, split=split, fmt=fmt):
            out = []
            for b in reader.read(split, source.read_spec(split, start, end)):
                out.extend(b if isinstance(b, list) else arrow_to_rows(b, fmt.type_info))
            return out

        first = read(5_000, 9_100)
        assert first == read(5_000, 9_100)
        offset = 1 if fmt.kind == "text" else 0  # the header is a line of text
        want = [f"w{i % 7},{i}" for i in range(5_000 - offset, 9_100 - offset)]
        got = first if fmt.kind == "text" else [f"{r.word},{r.n}" for r in first]
        assert got == want


def test_changed_file_is_reported(tmp_path):
    path = write(tmp_path / "grows.txt", "a\nb\n")
    source = FileSource.for_record_stream_format(StreamFormat.text_line_format(), path).build()
    (split,) = source.create_splits(1)
    source.plan(split, 0, 10, 0.0)
    with open(path, "a") as f:
        f.write("c\n")
    with pytest.raises(ConfigurationError, match="grows.txt.*changed after it was discovered.*rename"):
        list(source.create_reader().read(split, source.read_spec(split, 0, 2)))


def test_csv_errors_name_file_and_line(tmp_path):
    path = write(tmp_path / "bad.csv", "word,n\n" + "".join(f"w,{i}\n" for i in range(50)) + "w,oops\nw,1\n")
    with pytest.raises(ConfigurationError, match=r"bad\.csv' line 52 .*invalid value 'oops'"):
        read_direct(FileSource.for_format(FileFormat.csv(WORD_N), path).build(), budget=1000)
    ragged = write(tmp_path / "ragged.csv", "word,n\nw,1\nw,2,3\n")
    with pytest.raises(ConfigurationError, match=r"ragged\.csv' line 3 .*Expected 2 columns, got 3"):
        read_direct(FileSource.for_format(FileFormat.csv(), ragged).build())
    wrong = write(tmp_path / "header.csv", "word,count\nw,1\n")
    with pytest.raises(ConfigurationError, match=r"header\.csv' has no column\(s\) \['n'\]"):
        read_direct(FileSource.for_format(FileFormat.csv(WORD_N), wrong).build())


def test_encoders():
    rows = [Row(a=1, b="x,y"), (2, None), {"k": [1, Row(z=2.5)]}, "s"]
    assert Encoder.json_lines().encode(rows) == ['{"a":1,"b":"x,y"}', "[2,null]", '{"k":[1,{"z":2.5}]}', '"s"']
    assert Encoder.csv().encode(rows[:2]) == ['1,"x,y"', "2,"]
    assert Encoder.csv(delimiter=";").encode([Row(a=1, b="x,y")]) == ["1;x,y"]
    assert Encoder.csv(header=True).header_line(Row(a=1, b=2)) == "a,b"
    assert Encoder.simple_string_encoder().encode([1, Row(a=1)]) == ["1", "Row(a=1)"]


def test_parquet_writer_accepts_arrow_and_python_records(tmp_path):
    sink = FileSink.for_bulk_format(tmp_path / "o", BulkFormat.parquet(WORD_N)) \
        .with_bucket_assigner(BucketAssigner.base_path_bucket_assigner()).build()
    assert sink.accepts_arrow and sink.guarantee == "exactly-once"
    assert not FileSink.for_row_format(tmp_path / "t", Encoder.json_lines()).build().accepts_arrow
    writer = sink.create_writer(3, 4, None)
    writer.write(pa.record_batch({"n": pa.array([1, 2], pa.int32()), "word": ["a", "b"], "x": [0, 0]}))
    writer.write([Row(word="c", n=3), ("d", 4)])
    payload = writer.finish(7)
    assert writer.finish(8) is None  # an epoch without records writes nothing
    assert os.listdir(tmp_path / "o") == [f".part-{sink.piece_token}-3-e7.inprogress"]  # in progress: hidden
    sink.on_epoch_committed(7, [(3, payload)], 4)
    sink.on_job_end("FINISHED")  # a bounded job's end finishes every part file
    (name,) = os.listdir(tmp_path / "o")
    table = pq.read_table(tmp_path / "o" / name)
    assert table.schema == WORD_N.arrow_schema()
    assert table.to_pylist() == [{"word": w, "n": n} for w, n in [("a", 1), ("b", 2), ("c", 3), ("d", 4)]]


def test_configuration_errors(tmp_path):
    with pytest.raises(ConfigurationError, match="only local paths"):
        FileSource.for_format(FileFormat.csv(), "s3://bucket/x")
    with pytest.raises(ConfigurationError, match="Duration"):
        FileSource.for_format(FileFormat.csv(), tmp_path).monitor_continuously(5)
    with pytest.raises(ConfigurationError, match="needs a format"):
        FileSource.for_format("csv", tmp_path)
    with pytest.raises(ConfigurationError, match="needs an Encoder"):
        FileSink.for_row_format(tmp_path, "json")
    with pytest.raises(ConfigurationError, match=r"BulkFormat\.parquet"):
        FileSink.for_bulk_format(tmp_path, FileFormat.csv())
    f = write(tmp_path / "file.txt", "x")
    with pytest.raises(ConfigurationError, match="is a file"):
        FileSink.for_row_format(f, Encoder.json_lines()).build()
