"""FileSink as Flink's: part file names, buckets, rolling policies, and part files that become
visible only when a checkpoint completes, exactly once through failures and driver restarts."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest
from checkpoint_jobs import Counting, expected_outputs, key_of, record

from flowpoint import (
    BucketAssigner,
    DataGeneratorSource,
    Encoder,
    FileSink,
    OutputFileConfig,
    RestartStrategies,
    RollingPolicy,
)
from flowpoint.connectors.files import BulkFormat
from flowpoint.errors import ConfigurationError

PART = re.compile(r"(?P<prefix>[\w.]+)-(?P<uuid>[0-9a-f-]{36})-(?P<n>\d+)(?P<suffix>.*)")


def visible(base) -> dict[str, str]:
    """Finished part files under ``base`` (relative path -> text); hidden pieces are not listed."""
    out = {}
    for root, dirs, files in os.walk(base):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in files:
            if not name.startswith((".", "_")):
                path = os.path.join(root, name)
                with open(path, encoding="utf-8") as f:
                    out[os.path.relpath(path, base)] = f.read()
        # nothing else: pieces are hidden
    return out


def row_sink(base, policy=None, config=None, assigner=None):
    b = FileSink.for_row_format(str(base), Encoder.simple_string_encoder())
    b = b.with_bucket_assigner(assigner or BucketAssigner.base_path_bucket_assigner())
    if policy is not None:
        b = b.with_rolling_policy(policy)
    if config is not None:
        b = b.with_output_file_config(config)
    return b.build()


def epoch(sink, n, subtask, lines, base):
    """Run one epoch of one sink instance as a task would, and commit it on the driver."""
    w = sink.create_writer(subtask, 2, None)
    w.write(lines)
    sink.on_epoch_committed(n, [(subtask, w.finish(n))], 2)


def test_part_files_appear_when_the_checkpoint_completes(tmp_path):
    sink = row_sink(tmp_path, RollingPolicy.on_checkpoint_rolling_policy(),
                    OutputFileConfig.builder().with_part_prefix("clicks").with_part_suffix(".txt").build())
    epoch(sink, 1, 0, ["a", "b"], tmp_path)
    epoch(sink, 2, 0, ["c"], tmp_path)
    epoch(sink, 2, 1, ["d"], tmp_path)
    assert visible(tmp_path) == {}  # in progress
    state = sink.snapshot_driver_state()  # the checkpoint closes the part files: pending
    assert visible(tmp_path) == {}
    sink.notify_checkpoint_complete(1)  # finished
    files = visible(tmp_path)
    assert sorted(files.values()) == ["a\nb\nc\n", "d\n"]  # one part file per instance and checkpoint
    for name in files:
        m = PART.fullmatch(name)
        assert m and m["prefix"] == "clicks" and m["n"] == "0" and m["suffix"] == ".txt", name
    assert len({PART.fullmatch(n)["uuid"] for n in files}) == 2
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]  # pieces removed
    epoch(sink, 3, 0, ["e"], tmp_path)
    sink.snapshot_driver_state()
    sink.notify_checkpoint_complete(2)
    assert sorted(PART.fullmatch(n)["n"] for n in visible(tmp_path)) == ["0", "0", "1"]
    assert state["closed"]  # the checkpoint holds what it closed


def test_a_restore_finishes_what_the_checkpoint_closed_once(tmp_path):
    sink = row_sink(tmp_path, RollingPolicy.on_checkpoint_rolling_policy())
    epoch(sink, 1, 0, ["a"], tmp_path)
    state = sink.snapshot_driver_state()
    # the driver dies before it hears the checkpoint complete: a new driver restores it
    restored = row_sink(tmp_path, RollingPolicy.on_checkpoint_rolling_policy())
    restored.restore_driver_state(state)
    assert list(visible(tmp_path).values()) == ["a\n"]
    # a second restore of the same checkpoint (another crash) writes nothing twice
    again = row_sink(tmp_path, RollingPolicy.on_checkpoint_rolling_policy())
    again.restore_driver_state(state)
    assert list(visible(tmp_path).values()) == ["a\n"]
    # a piece of an epoch after the checkpoint stays hidden; the replayed epoch rewrites it
    epoch(again, 2, 0, ["b"], tmp_path)
    again.on_job_end("FINISHED")
    assert sorted(visible(tmp_path).values()) == ["a\n", "b\n"]


def test_the_default_rolling_policy_keeps_a_part_file_open_until_it_rolls(tmp_path):
    policy = RollingPolicy.default_rolling_policy(part_size=6, rollover_interval=3_600_000, inactivity_interval=3_600_000)
    sink = row_sink(tmp_path, policy)
    epoch(sink, 1, 0, ["ab"], tmp_path)  # 3 bytes
    sink.snapshot_driver_state()
    sink.notify_checkpoint_complete(1)
    assert visible(tmp_path) == {}  # still open: under part_size, not old, not inactive
    epoch(sink, 2, 0, ["cd"], tmp_path)  # 6 bytes: rolls at the next checkpoint
    sink.snapshot_driver_state()
    sink.notify_checkpoint_complete(2)
    assert list(visible(tmp_path).values()) == ["ab\ncd\n"]


def test_a_failed_or_cancelled_job_leaves_nothing_visible_that_no_checkpoint_finished(tmp_path):
    sink = row_sink(tmp_path, RollingPolicy.on_checkpoint_rolling_policy())
    epoch(sink, 1, 0, ["a"], tmp_path)
    sink.on_job_end("FAILED")
    assert visible(tmp_path) == {}


def test_date_time_buckets_name_directories_as_flink_does(tmp_path):
    a = BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd--HH", "UTC")
    assert a.bucket_id(1_700_000_000_000) == "2023-11-14--22"
    assert BucketAssigner.date_time_bucket_assigner("yyyy/MM/dd 'h'HH", "Asia/Kolkata").bucket_id(1_700_000_000_000) == "2023/11/15 h03"
    sink = row_sink(tmp_path, RollingPolicy.on_checkpoint_rolling_policy(), assigner=BucketAssigner.date_time_bucket_assigner("yyyy-MM-dd", "UTC"))
    epoch(sink, 1, 0, ["a"], tmp_path)
    sink.on_job_end("FINISHED")
    (name,) = visible(tmp_path)
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}/part-[0-9a-f-]{36}-0", name)


def test_bad_settings_are_refused_clearly(tmp_path):
    with pytest.raises(ConfigurationError, match="bulk-format FileSink rolls on every checkpoint"):
        FileSink.for_bulk_format(str(tmp_path), BulkFormat.parquet()).with_rolling_policy(RollingPolicy.default_rolling_policy())
    with pytest.raises(ConfigurationError, match="prefix"):
        OutputFileConfig.builder().with_part_prefix(".hidden").build()
    with pytest.raises(ConfigurationError, match="timezone"):
        BucketAssigner.date_time_bucket_assigner("yyyy", "Mars/Olympus")
    with pytest.raises(ConfigurationError, match="pattern letter"):
        BucketAssigner.date_time_bucket_assigner("yyyy-QQ")
    with pytest.raises(ConfigurationError, match="part_size"):
        RollingPolicy.default_rolling_policy(part_size=0)


def test_a_driver_that_cannot_see_the_pieces_fails_naming_them(tmp_path):
    sink = row_sink(tmp_path, RollingPolicy.on_checkpoint_rolling_policy())
    epoch(sink, 1, 0, ["a"], tmp_path)
    for name in os.listdir(tmp_path):
        os.remove(tmp_path / name)  # as if the piece were on another host's disk
    # found at the checkpoint that would record it (its pre-commit), not later at the commit
    with pytest.raises(ConfigurationError, match=r"cannot see the in-progress pieces \['\.part-.*-0-e1\.inprogress'\].*shared directory"):
        sink.snapshot_driver_state()


EVENTS = 900


@pytest.mark.slow
def test_exactly_once_through_a_failure_and_a_restart_from_a_checkpoint(make_env, tmp_path):
    """A record fails every attempt until the job restarts from its last checkpoint; the epochs
    after it run again. The finished part files hold every result once."""
    out = tmp_path / "out"
    env = make_env(parallelism=2, max_records=150, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 100))
    flag = str(tmp_path / "failed")
    (
        env.from_source(DataGeneratorSource(record, count=EVENTS), source_name="numbers").uid("numbers")
        .key_by(key_of)
        .process(Counting(fail_value=record(700), flag=flag)).uid("counting")
        .map(lambda kv: f"{kv[0]},{kv[1]}")
        .sink_to(FileSink.for_row_format(str(out), Encoder.simple_string_encoder())
                 .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build()).uid("files")
    )
    env.execute("file sink exactly once")
    assert os.path.exists(flag), "the injected failure never happened"
    files = visible(out)
    assert all(re.fullmatch(r"\d{4}-\d{2}-\d{2}--\d{2}/part-[0-9a-f-]{36}-\d+", n) for n in files), files
    got = Counter(line for text in files.values() for line in text.splitlines())
    expected = Counter(f"{k},{n}" for k, n in expected_outputs(EVENTS))
    assert got == expected, f"duplicates: {sum((got - expected).values())}, missing: {sum((expected - got).values())}"


def test_stop_with_savepoint_then_restore_keeps_every_record_once(tmp_path):
    """A job stopped with a savepoint finishes its open part files; a job restored from that
    savepoint continues with the next part numbers and writes nothing twice."""
    policy = RollingPolicy.default_rolling_policy()
    first = row_sink(tmp_path, policy)
    epoch(first, 1, 0, ["a"], tmp_path)
    savepoint = first.snapshot_driver_state()  # the part file stays open (default policy)
    first.on_job_end("FINISHED")  # stop-with-savepoint: the job ends, its part files are finished
    assert list(visible(tmp_path).values()) == ["a\n"]
    second = row_sink(tmp_path, policy)
    second.restore_driver_state(savepoint)
    epoch(second, 2, 0, ["b"], tmp_path)
    second.on_job_end("FINISHED")
    files = visible(tmp_path)
    assert sorted(files.values()) == ["a\n", "b\n"]
    assert sorted(PART.fullmatch(n)["n"] for n in files) == ["0", "1"]
