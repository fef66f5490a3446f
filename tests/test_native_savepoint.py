"""``flowpoint savepoint -type native``: a running job's savepoint in the state backend's own
format (a full checkpoint copied into the savepoint directory, self-contained), restored with
``flowpoint run -s`` into exactly the state its source positions imply."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
from test_control import flowpoint, running_id

from flowpoint.checkpoint.savepoint import load_operator_state, open_savepoint

JOB = textwrap.dedent(
    """
    import sys
    from flowpoint import DataGeneratorSource, StreamExecutionEnvironment

    env = StreamExecutionEnvironment.get_execution_environment({"execution.epoch.interval": 50})
    env.set_parallelism(2)
    env.enable_checkpointing(300)
    env.get_checkpoint_config().set_checkpoint_storage(sys.argv[2])
    source = DataGeneratorSource(lambda i: i, count=None, rate_limit_per_second=200)
    env.from_source(source, source_name="numbers").uid("numbers") \\
       .key_by(lambda x: x % 7).reduce(lambda a, b: a + b).uid("sums").print()
    env.execute(sys.argv[1])
    """
)


def start(home, tmp_path, name: str, *options: str) -> subprocess.Popen:
    script = tmp_path / "job.py"
    script.write_text(JOB)
    env = dict(os.environ, FLOWPOINT_HOME=str(home))
    cmd = [sys.executable, "-m", "flowpoint.cli", "run", "-m", "local[1]", "-D", "execution.progress.interval=-1",
           *options, str(script), name, f"file://{tmp_path}/checkpoints"]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(tmp_path / f"{name}.err", "w"), env=env, cwd=str(tmp_path))


def expected_sums(meta) -> dict[int, int]:
    """The sums per key the source positions imply: split i of 2 produced indexes i, i+2, ...
    (its position counts them); key = index % 7, the state sums the indexes."""
    sums: dict[int, int] = {}
    positions = counts(meta)
    assert sorted(positions) == ["index-0", "index-1"], positions
    for split_id, count in positions.items():
        first = int(split_id.split("-")[1])
        for j in range(count):
            idx = first + 2 * j
            sums[idx % 7] = sums.get(idx % 7, 0) + idx
    return sums


def counts(meta) -> dict[str, int]:
    """Records each split of the source produced at the savepoint's cut."""
    out = {}
    for sp in meta.sources:
        if sp.source_uid == "numbers":
            assert tuple(sp.position["payload"]) == (int(sp.split_id.split("-")[1]), 2), sp.position
            out[sp.split_id] = int(sp.position["position"])
    return out


def state_of(path: str) -> tuple[object, dict]:
    access, meta = open_savepoint(path)
    state = load_operator_state(access, meta, "sums")
    (values,) = state.values()
    return meta, {int(k): int(v) for k, v in values.items()}


def savepoint(home, job_id: str, target, *options: str) -> str:
    r = flowpoint(home, "savepoint", *options, job_id, str(target))
    assert r.returncode == 0, r.stderr
    return re.search(r"^Savepoint completed\. Path: (\S+)$", r.stdout, re.M).group(1)


@pytest.mark.slow
def test_a_native_savepoint_is_self_contained_and_restores_exactly(tmp_path):
    home = tmp_path / "home"
    first, second = tmp_path / "first", tmp_path / "second"
    first.mkdir()
    second.mkdir()
    a = start(home, first, "native-a")
    b = None
    try:
        id_a = running_id(home, "native-a", a, first)
        path = savepoint(home, id_a, tmp_path / "savepoints", "-type", "native")
        local = path.removeprefix("file://")
        meta, sums = state_of(path)
        assert meta.kind == "savepoint" and meta.stats["savepoint_format"] == "NATIVE"
        assert {op.backend for op in meta.operators} == {"hashmap"}  # the backend's files, not canonical Parquet
        for f in meta.files():  # every file inside the savepoint directory
            assert os.path.isfile(os.path.join(local, f.path)), f.path
            assert not f.path.startswith("/") and ".." not in f.path.split("/")
        assert sum(counts(meta).values()) > 0
        assert sums == expected_sums(meta)

        assert flowpoint(home, "cancel", id_a).returncode == 0
        a.wait(timeout=120)
        shutil.rmtree(first / "checkpoints")  # the savepoint needs nothing of the job's checkpoints

        b = start(home, second, "native-b", "-s", path)
        id_b = running_id(home, "native-b", b, second)
        later = savepoint(home, id_b, tmp_path / "later")
        meta2, sums2 = state_of(later)
        before, after = counts(meta), counts(meta2)
        assert all(after[s] >= before[s] for s in before) and sum(after.values()) > sum(before.values())
        assert sums2 == expected_sums(meta2)  # restored state plus what came after: nothing lost or doubled

        r = flowpoint(home, "savepoint", "-d", path)  # disposed like any savepoint: nothing left
        assert r.returncode == 0, r.stderr
        assert f"Savepoint '{path}' disposed." in r.stdout and not os.path.exists(local)
    finally:
        for p in (a, b):
            if p is not None and p.poll() is None:
                p.kill()
                p.wait(timeout=30)


def test_native_is_refused_for_stop_and_unknown_formats():
    from flowpoint.control import live_api

    class Job:
        config = None

    with pytest.raises(live_api.ApiError) as e:
        live_api.savepoint_target({"formatType": "NATIVE", "target-directory": "/tmp/x"}, Job())
    assert "a stop-with-savepoint is canonical" in str(e.value)
    with pytest.raises(live_api.ApiError) as e:
        live_api.savepoint_target({"formatType": "BINARY", "target-directory": "/tmp/x"}, Job(), native_allowed=True)
    assert "'BINARY' is not supported here: CANONICAL or NATIVE" in str(e.value)
