"""FileSink directories other users can write or own are refused (issue 25, item 5), as
checkpoint directories are (docs/architecture.md, section 10a): before the job starts (the base
path and every bucket directory below it), and by the tasks for a bucket directory they write
into; ``security.trust-shared-directories: true`` accepts them. Pieces and part files are 0644
and new directories 0755 (a stricter umask narrows both; none widens them), so no one else can change a piece before it is
committed.
"""

from __future__ import annotations

import os
import stat

import pytest

from flowpoint import BucketAssigner, Encoder, FileSink, RollingPolicy
from flowpoint.api.config import Configuration
from flowpoint.errors import InsecurePathError

TRUST = "security.trust-shared-directories"
RUNTIMES = {
    "epoch": {"execution.runtime": "epoch"},
    "continuous": {"execution.runtime": "continuous", "execution.buffer-timeout": 5},
}


def _sink(base, assigner=None):
    return (FileSink.for_row_format(str(base), Encoder.simple_string_encoder())
            .with_bucket_assigner(assigner or BucketAssigner.base_path_bucket_assigner())
            .with_rolling_policy(RollingPolicy.on_checkpoint_rolling_policy()).build())


def _config(trust: bool = False) -> Configuration:
    return Configuration({TRUST: trust})


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def test_a_world_writable_sink_directory_is_refused_naming_it_and_the_setting(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    out.chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"FileSink directory {out} can be written by other users \(mode 0777\).*{TRUST}: true"):
        _sink(out).on_job_config(_config())
    _sink(out).on_job_config(_config(trust=True))  # the named setting accepts it


def test_a_sink_directory_below_a_world_writable_directory_is_refused(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)  # no sticky bit: anyone can rename the sink directory away
    with pytest.raises(InsecurePathError, match=rf"FileSink directory {shared / 'out'} is below {shared}, which other users can write"):
        _sink(shared / "out").on_job_config(_config())


@pytest.mark.parametrize(("umask", "dirs", "files"), [(0o000, 0o755, 0o644), (0o002, 0o755, 0o644), (0o077, 0o700, 0o600)])
def test_a_missing_sink_directory_is_never_writable_by_others_and_a_strict_umask_is_kept(tmp_path, umask, dirs, files):
    out = tmp_path / "a" / "out"
    old = os.umask(umask)
    try:
        sink = _sink(out)
        sink.on_job_config(_config())
        w = sink.create_writer(0, 1, None)
        w.write(["x"])
        [(_bucket, rel, _size, _sha)] = w.finish(1)
        sink.on_epoch_committed(1, [(0, [(_bucket, rel, _size, _sha)])], 1)
        sink.on_job_end("FINISHED")
    finally:
        os.umask(old)
    assert _mode(out) == dirs and _mode(out.parent) == dirs
    [name] = [n for n in os.listdir(out) if not n.startswith(".")]
    assert _mode(out / name) == files  # the part file


def test_pieces_are_never_writable_by_others(tmp_path):
    sink = _sink(tmp_path, BucketAssigner.date_time_bucket_assigner("yyyy/MM", "UTC"))
    old = os.umask(0)
    try:
        w = sink.create_writer(0, 1, None)
        w.write(["x"])
        [(bucket, rel, _size, _sha)] = w.finish(1)
    finally:
        os.umask(old)
    assert _mode(tmp_path / rel) == 0o644
    year, month = bucket.split("/")
    assert _mode(tmp_path / year) == 0o755 and _mode(tmp_path / year / month) == 0o755


def test_a_sink_directory_of_another_user_is_refused(tmp_path, other_uid):
    out = tmp_path / "out"
    out.mkdir()
    os.chown(out, other_uid, -1)
    with pytest.raises(InsecurePathError, match=rf"FileSink directory {out} belongs to .*uid {other_uid}.*{TRUST}: true"):
        _sink(out).on_job_config(_config())
    _sink(out).on_job_config(_config(trust=True))


@pytest.mark.parametrize("planted", ["owned", "writable"])
def test_a_bucket_directory_another_user_created_or_can_write_is_refused_before_the_job_starts(tmp_path, other_uid, planted):
    out = tmp_path / "out"
    bucket = out / "2030-01-01--00"
    bucket.mkdir(parents=True)
    if planted == "owned":
        os.chown(bucket, other_uid, -1)
    else:
        bucket.chmod(0o777)
    sink = _sink(out, BucketAssigner.date_time_bucket_assigner())
    with pytest.raises(InsecurePathError, match=rf"FileSink bucket directory {bucket} "):
        sink.on_job_config(_config())


@pytest.mark.parametrize("planted", ["owned", "writable"])
def test_a_task_refuses_a_bucket_directory_of_another_user(tmp_path, other_uid, planted):
    """A bucket directory that appears while the job runs (made by root for her, say) is refused
    by the task that would write its piece there, and nothing is written into it."""
    sink = _sink(tmp_path, BucketAssigner.date_time_bucket_assigner("yyyy", "UTC"))
    sink.on_job_config(_config())
    w = sink.create_writer(0, 1, None)
    w.write(["x"])
    bucket = tmp_path / sink.bucket_assigner.bucket_id(int(__import__("time").time() * 1000))
    bucket.mkdir()
    if planted == "owned":
        os.chown(bucket, other_uid, -1)
    else:
        bucket.chmod(0o777)
    with pytest.raises(InsecurePathError, match=rf"FileSink bucket directory {bucket} "):
        w.finish(1)
    assert os.listdir(bucket) == []


def _job(make_env, tmp_path, runtime, out):
    env = make_env(parallelism=1, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"), **RUNTIMES[runtime])
    env.enable_checkpointing(50)
    env.from_collection([1, 2, 3]).map(str).uid("text").sink_to(_sink(out)).uid("files")
    return env


@pytest.mark.parametrize("runtime", list(RUNTIMES))
@pytest.mark.parametrize("planted", ["world-writable", "other-user"])
def test_a_job_refuses_a_shared_sink_directory_before_it_starts(make_env, tmp_path, other_uid, runtime, planted):
    out = tmp_path / "out"
    out.mkdir()
    if planted == "world-writable":
        out.chmod(0o777)
    else:
        os.chown(out, other_uid, -1)
    env = _job(make_env, tmp_path, runtime, out)
    with pytest.raises(InsecurePathError, match=rf"FileSink directory {out} .*{TRUST}: true"):
        env.execute(f"shared sink directory ({runtime})")
    assert not (tmp_path / "ck").exists()  # refused before anything of the job started
    assert os.listdir(out) == []
