"""HashMap incremental checkpoints: a checkpoint part is a full snapshot or a changelog (the
keys set and deleted since the last completed checkpoint) on top of that checkpoint's parts.

The job's state after its first ``n`` records is a pure function of ``n`` (:func:`expected`),
so every retained checkpoint is checked exactly against the records it had read; restores
continue from any retained checkpoint at the same and at another parallelism.
"""

from __future__ import annotations

import json
import os

import pytest
from test_checkpoints import completed, wait_for

from flowpoint import (
    CollectSink,
    DataGeneratorSource,
    ExternalizedCheckpointCleanup,
    KeyedProcessFunction,
    MapStateDescriptor,
    ValueStateDescriptor,
)
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.checkpoint.metadata import read_metadata
from flowpoint.checkpoint.savepoint import load_operator_state
from flowpoint.errors import CorruptStateError
from flowpoint.partition.working import ChangeTracker
from flowpoint.state.key_identity import user_key

KEYS = 600


def key_of(i: int):
    k = (i * 7919) % KEYS
    return k + 0.5 if k % 3 == 0 else k  # floats are StateKeys: their pickles rebuild them


def step(count: dict, seen: dict, i: int) -> None:
    """One record's effect on the state, as the job applies it."""
    k = key_of(i)
    n = count.get(k, 0) + 1
    m = seen.setdefault(k, {})
    if n % 7 == 0:  # ValueState.clear and MapState.remove
        count.pop(k, None)
        m.pop(i % 4, None)
    elif n % 11 == 0:  # as a TTL expiry would: all of the key's state goes
        count.pop(k, None)
        m.clear()
    else:
        count[k] = n
        m[i % 4] = i
    if not m:
        seen.pop(k, None)


def expected(n: int) -> dict:
    count: dict = {}
    seen: dict = {}
    for i in range(n):
        step(count, seen, i)
    return {"count": count, "seen": seen}


class Churn(KeyedProcessFunction):
    def __init__(self, drop_cache_at: int | None = None, flag: str | None = None):
        self.drop_cache_at = drop_cache_at
        self.flag = flag

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))
        self.seen = ctx.get_map_state(MapStateDescriptor("seen"))

    def process_element(self, i, ctx):
        if self.drop_cache_at is not None and self.drop_cache_at <= i < self.drop_cache_at + 300:
            # as if the partitions moved to other workers: every worker process that meets these
            # records forgets the partitions it holds, once; the next epoch rebuilds them from the
            # durable state, with no record of the keys changed since the last checkpoint
            from flowpoint.partition.working import task_states

            cache = task_states()
            if cache.__dict__.get("dropped_for") != self.flag:
                cache.clear()
                cache.dropped_for = self.flag
                open(self.flag, "w").close()
        n = (self.count.value() or 0) + 1
        if n % 7 == 0:
            self.count.clear()
            self.seen.remove(i % 4)
        elif n % 11 == 0:
            self.count.clear()
            self.seen.clear()
        else:
            self.count.update(n)
            self.seen.put(i % 4, i)
        return iter(())


def build(env, events: int, rate: float | None = None, function: Churn | None = None) -> CollectSink:
    sink = CollectSink()
    source = DataGeneratorSource(lambda i: i, count=events, rate_limit_per_second=rate)
    (
        env.from_source(source, source_name="numbers").uid("numbers").set_parallelism(1)  # one split: records in order
        .key_by(key_of)
        .process(function or Churn()).uid("churn")
        .sink_to(sink).uid("collect")
    )
    return sink


def incremental_env(make_env, tmp_path, parallelism=2, retained=50, ratio=100.0, parts=4, max_records=150, ck="ck"):
    env = make_env(parallelism=parallelism, max_records=max_records, state_checkpoints_dir=str(tmp_path / ck))
    c = env.get_configuration()
    c.set("state.backend.type", "hashmap")
    c.set("state.checkpoints.num-retained", retained)
    c.set("state.backend.hashmap.changelog.max-ratio", ratio)
    c.set("state.backend.hashmap.changelog.max-parts", parts)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    return env


def plain(tables: dict) -> dict:
    return {
        "count": {user_key(k): v for k, v in tables.get("count", {}).items()},
        "seen": {user_key(k): dict(v) for k, v in tables.get("seen", {}).items()},
    }


def final_state(result) -> dict:
    state = result.get_keyed_state("churn")
    return {"count": dict(state.get("count", {})), "seen": {k: dict(v) for k, v in state.get("seen", {}).items()}}


def run_and_cancel(env, events: int, checkpoints: int, function: Churn | None = None, rate: float = 1500):
    build(env, events, rate=rate, function=function)
    client = env.execute_async("churn")
    wait_for(lambda: len(completed(client.get_checkpoint_stats())) >= checkpoints, what=f"{checkpoints} completed checkpoints")
    client.cancel()
    with pytest.raises(Exception):  # noqa: B017 - a cancelled job ends with an error
        client.wait(120)
    return client


def checkpoints_of(job_dir) -> dict[int, object]:
    access = CheckpointStorageAccess(str(job_dir))
    ids = sorted(int(n[4:]) for n in os.listdir(job_dir) if n.startswith("chk-") and (job_dir / n / "_metadata").exists())
    return {i: read_metadata(access, f"chk-{i}") for i in ids}


def kinds(meta) -> list[list[str]]:
    return [[f.kind for f in sub.files] for sub in meta.operator("churn").subtasks]


def assert_exact(job_dir, metas: dict) -> None:
    access = CheckpointStorageAccess(str(job_dir))
    for cid, meta in metas.items():
        got = plain(load_operator_state(access, meta, "churn"))
        assert got == expected(int(meta.stats["records_read"])), f"checkpoint {cid}"


# -- the tracker -------------------------------------------------------------------------------


def test_tracker_keeps_the_changes_of_declined_checkpoints_and_knows_where_it_started():
    t = ChangeTracker(start=5)
    assert t.since(4) is None  # this copy did not hold the state at version 4
    t.add("op", "count", ["a"])
    t.cut(6)  # snapshot of checkpoint 1 at version 6 (it completes)
    t.add("op", "count", ["b"])
    t.cut(7)  # checkpoint 2 at version 7: declined
    t.add("op", "count", ["c"])
    t.add("op", "seen", ["c"])
    assert t.since(6) == {("op", "count"): {"b", "c"}, ("op", "seen"): {"c"}}
    t.cut(8)
    t.add("op", "count", ["d"])
    t.cut(8)  # a retried task's snapshot of the same version
    assert t.since(7) == {("op", "count"): {"c", "d"}, ("op", "seen"): {"c"}}  # superset of what changed since 7
    assert t.since(8) == {}


# -- end to end on Spark -----------------------------------------------------------------------


def test_every_retained_checkpoint_is_exact_and_retention_keeps_only_referenced_files(make_env, tmp_path):
    env = incremental_env(make_env, tmp_path, retained=6, parts=3)
    client = run_and_cancel(env, 10**9, 10)
    job_dir = tmp_path / "ck" / client.get_job_id()
    metas = checkpoints_of(job_dir)
    assert len(metas) == 6
    all_kinds = [k for m in metas.values() for k in kinds(m)]
    assert any("changelog" in k for k in all_kinds), all_kinds
    assert all(k[0] == "full" and set(k[1:]) <= {"changelog"} and len(k) <= 4 for k in all_kinds), all_kinds
    assert_exact(job_dir, metas)
    # retention: exactly the files some retained checkpoint lists are left in shared/
    shared = {f"shared/{n}" for n in os.listdir(job_dir / "shared")}
    referenced = set().union(*(m.referenced_files() for m in metas.values()))
    assert shared == referenced
    # a changelog checkpoint uploads only its new part
    done = {s.checkpoint_id: s for s in client.get_checkpoint_stats() if s.status == "COMPLETED"}
    for cid, meta in metas.items():
        if all(k[-1] == "changelog" for k in kinds(meta)):
            assert done[cid].incremental_size < done[cid].state_size
            assert meta.incremental


@pytest.mark.slow
def test_restore_from_a_retained_checkpoint_at_any_parallelism(make_env, tmp_path):
    events = 6_000
    client = run_and_cancel(incremental_env(make_env, tmp_path, retained=5, parts=6), events, 7)
    job_dir = tmp_path / "ck" / client.get_job_id()
    metas = checkpoints_of(job_dir)
    # the latest retained checkpoint at parallelism 3 and the oldest at 1 (HashMap), the latest into RocksDB at 2
    for i, (which, parallelism, backend) in enumerate([("latest", 3, "hashmap"), ("oldest", 1, "hashmap"), ("latest", 2, "rocksdb")]):
        cid = max(metas) if which == "latest" else min(metas)
        chains = kinds(metas[cid])
        assert any("changelog" in k for k in chains) or which == "oldest", chains
        env = incremental_env(make_env, tmp_path, parallelism, ck=f"ck{i + 2}")
        env.get_configuration().set("state.backend.type", backend)  # a HashMap checkpoint restores into RocksDB too
        env.get_configuration().set("execution.savepoint.path", str(job_dir / f"chk-{cid}"))
        build(env, events)
        result = env.execute("restored")
        assert final_state(result) == expected(events), (which, parallelism, backend)


def test_a_declined_checkpoint_loses_no_change(make_env, tmp_path, monkeypatch):
    job_id = "d" * 32
    monkeypatch.setattr("flowpoint.driver.coordinator.new_job_id", lambda: job_id)
    job_dir = tmp_path / "ck" / job_id
    job_dir.mkdir(parents=True)
    (job_dir / "chk-4").write_text("in the way")  # checkpoint 4's _metadata cannot be written: declined
    env = incremental_env(make_env, tmp_path, parts=20)
    env.get_checkpoint_config().set_tolerable_checkpoint_failure_number(1)
    client = run_and_cancel(env, 10**9, 7)
    stats = client.get_checkpoint_stats()
    failed = [s.checkpoint_id for s in stats if s.status == "FAILED"]
    assert failed[0] == 4 and all(f > max(completed(stats)) for f in failed[1:])  # (the cancel aborts one in flight)
    (job_dir / "chk-4").unlink(missing_ok=True)  # (the abort removed it)
    metas = checkpoints_of(job_dir)
    assert 3 in metas and 5 in metas
    # checkpoint 5 builds on checkpoint 3 (4 never completed): its changelog holds 4's changes too
    five = [[f.path for f in sub.files] for sub in metas[5].operator("churn").subtasks]
    three = [[f.path for f in sub.files] for sub in metas[3].operator("churn").subtasks]
    for a, b in zip(three, five, strict=True):
        if len(b) > 1 and "log" in b[-1]:
            assert b[:-1] == a
    assert any(len(b) == len(a) + 1 for a, b in zip(three, five, strict=True)), (three, five)
    # the parts tasks wrote for checkpoint 4 were removed with it
    assert not [n for n in os.listdir(job_dir / "shared") if "-chk4-" in n]
    assert_exact(job_dir, metas)


def test_partitions_rebuilt_from_durable_state_stay_exact(make_env, tmp_path):
    # compaction-bytes 1: partitions write a new durable base every few epochs, so a copy rebuilt
    # after one may start past the last checkpoint (then its next part is a full snapshot)
    env = incremental_env(make_env, tmp_path, parts=1000)
    env.get_configuration().set("state.working.compaction-bytes", 1)
    flag = str(tmp_path / "dropped")
    client = run_and_cancel(env, 10**9, 14, function=Churn(drop_cache_at=1500, flag=flag))
    assert os.path.exists(flag)
    job_dir = tmp_path / "ck" / client.get_job_id()
    metas = checkpoints_of(job_dir)
    assert any(len(k) > 2 for m in metas.values() for k in kinds(m))
    assert_exact(job_dir, metas)


def test_a_corrupted_changelog_part_is_refused_by_name(make_env, tmp_path):
    client = run_and_cancel(incremental_env(make_env, tmp_path, retained=2, parts=10), 10**9, 4)
    job_dir = tmp_path / "ck" / client.get_job_id()
    metas = checkpoints_of(job_dir)
    cid = max(metas)
    log = next(f for sub in metas[cid].operator("churn").subtasks for f in sub.files if f.kind == "changelog")
    path = job_dir / log.path
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    env = incremental_env(make_env, tmp_path, ck="ck2")
    env.get_configuration().set("execution.savepoint.path", str(job_dir / f"chk-{cid}"))
    build(env, 1000)
    with pytest.raises(CorruptStateError) as info:
        env.execute("corrupt")
    assert log.path.rsplit("/", 1)[-1] in str(info.value)


def test_full_snapshots_only_with_max_ratio_zero(make_env, tmp_path):
    env = incremental_env(make_env, tmp_path, retained=3, ratio=0)
    client = run_and_cancel(env, 10**9, 4)
    job_dir = tmp_path / "ck" / client.get_job_id()
    metas = checkpoints_of(job_dir)
    assert all(k == ["full"] for m in metas.values() for k in kinds(m))
    assert all(f.path.startswith(f"chk-{cid}/") for cid, m in metas.items() for f in m.files())
    assert not os.listdir(job_dir / "shared")
    assert_exact(job_dir, metas)
    assert json.loads((job_dir / f"chk-{max(metas)}" / "_metadata").read_text())["incremental"] is False


# -- the partition backend, driven as the runtime drives it (no Spark) ------------------------


class Partition:
    """One partition's committed history, its checkpoints, and the workers it runs on."""

    def __init__(self, tmp_path, ratio: float = 100.0, parts: int = 3) -> None:
        from flowpoint.partition.committed_chain import CommittedChain
        from flowpoint.partition.protocol import StateLocation

        self.tmp = tmp_path
        self.location = StateLocation("job/run-0", str(tmp_path / "local"), str(tmp_path / "durable"), "hashmap", changelog=True, changelog_max_ratio=ratio, changelog_max_parts=parts)
        self.chain = CommittedChain()
        self.shared: dict[str, str] = {}  # the driver's registry of the last completed checkpoint
        self.model: dict = {}  # the committed state
        self.epoch = 0
        self.workers: dict[str, object] = {}
        self.checkpoints: dict[int, tuple[list, dict]] = {}  # id -> (files, the state they hold)

    def backend(self, worker: str):
        from flowpoint.partition.backend import HashMapPartitionBackend
        from flowpoint.partition.working import TaskStateCache

        if worker not in self.workers:
            self.workers[worker] = HashMapPartitionBackend(self.location, 128, TaskStateCache())
        return self.workers[worker]

    def run(self, worker: str, writes: dict, checkpoint: int | None = None, complete: bool = True, compact: bool = False):
        """One epoch on ``worker``: the checkpoint's snapshot first (of the committed state), then
        the writes (value None: clear), committed; the checkpoint completes if ``complete``."""
        from flowpoint.partition.protocol import CheckpointTarget, TaskSlice

        backend = self.backend(worker)
        self.epoch += 1
        token = f"t{self.epoch}"
        ts, _fresh = backend.acquire(0, 0, self.chain, ["op"])
        write = None
        if checkpoint is not None:
            write = backend.snapshot(ts, ["op"], 0, CheckpointTarget(checkpoint, str(self.tmp / "ck")), dict(self.shared))
            snapshot_state = dict(self.model)
        ts.pending = (self.epoch, token)
        b = ts.backend("op", "op")
        v = b.get_partitioned_state(ValueStateDescriptor("v"))
        for key, value in writes.items():
            b.current_key = key
            if value is None:
                v.clear()
                self.model.pop(key, None)
            else:
                v.update(value)
                self.model[key] = value
        b.current_key = None
        ack = backend.end_epoch(ts, TaskSlice(0, 0, self.chain, compact), self.epoch, token)
        self.chain = self.chain.committed(self.epoch, token, ack)
        if write is None:
            return None
        (part,) = write()
        self.checkpoints[checkpoint] = (part.files, snapshot_state)
        if complete:
            from flowpoint.partition.backend import chain_entry, is_chain

            assert is_chain(part.files)
            key, value = chain_entry(part, checkpoint)
            self.shared = {key: value}
        return [h.kind for h in part.files]

    def restored(self, checkpoint: int) -> dict:
        """The state a restore of ``checkpoint`` builds from its files."""
        from flowpoint.checkpoint.parts import apply_part, load_part

        files, _ = self.checkpoints[checkpoint]
        tables: dict = {}
        for h in files:
            data = (self.tmp / "ck" / h.path).read_bytes()
            apply_part(tables, h.kind == "changelog", load_part(data, h.path, "op"))
        return {user_key(k): v for k, v in tables.get("v", {}).items()}

    def check(self, checkpoint: int) -> None:
        assert self.restored(checkpoint) == self.checkpoints[checkpoint][1]


def test_chains_grow_to_max_parts_then_materialize(tmp_path):
    p = Partition(tmp_path, parts=2)
    p.run("A", {i: i for i in range(100)})
    assert p.run("A", {1: 10, 2: None}, checkpoint=1) == ["full"]
    assert p.run("A", {3: 30, 1.5: "x"}, checkpoint=2) == ["full", "changelog"]
    assert p.run("A", {3: None, 4: 40}, checkpoint=3) == ["full", "changelog", "changelog"]
    assert p.run("A", {5: 50}, checkpoint=4) == ["full"]  # max-parts 2
    assert p.run("A", {}, checkpoint=5) == ["full", "changelog"]
    for c in range(1, 6):
        p.check(c)
    assert 2 not in p.restored(2) and 3 not in p.restored(4)  # deleted keys stay deleted


def test_materialize_when_the_changelogs_outgrow_max_ratio(tmp_path):
    p = Partition(tmp_path, ratio=0.5, parts=100)
    p.run("A", {i: i for i in range(1000)})
    assert p.run("A", {i: -i for i in range(300)}, checkpoint=1) == ["full"]
    assert p.run("A", {i: i for i in range(300)}, checkpoint=2) == ["full", "changelog"]  # ~30%
    assert p.run("A", {}, checkpoint=3) == ["full"]  # 30% + 30% > 50%
    for c in (1, 2, 3):
        p.check(c)


def test_a_declined_checkpoint_s_changes_go_into_the_next_changelog(tmp_path):
    p = Partition(tmp_path)
    p.run("A", {i: i for i in range(50)})
    p.run("A", {1: 11}, checkpoint=1)
    assert p.run("A", {2: None, 3: 33}, checkpoint=2, complete=False) == ["full", "changelog"]  # declined
    assert p.run("A", {4: 44}, checkpoint=3) == ["full", "changelog"]  # on top of checkpoint 1
    p.check(3)
    assert p.restored(3)[3] == 33 and 2 not in p.restored(3)


def test_a_partition_moving_between_workers(tmp_path):
    p = Partition(tmp_path, parts=100)
    p.run("A", {i: i for i in range(50)})
    p.run("A", {1: 11}, checkpoint=1)
    # B never held the partition: it loads it from the durable deltas, whose keys it tracks
    assert p.run("B", {2: None}, checkpoint=2) == ["full", "changelog"]
    # back on A, whose copy is behind: it catches up with B's delta and knows its keys too
    assert p.run("A", {3: 3.5}, checkpoint=3) == ["full", "changelog", "changelog"]
    p.check(3)
    assert 2 not in p.restored(3)
    # a new durable base after checkpoint 3, then a worker that never held the partition: it
    # loads the base and cannot know what changed between checkpoint 3 and the base
    p.run("A", {4: 44}, compact=True)
    p.run("A", {5: 55})
    assert p.run("C", {6: 66}, checkpoint=4) == ["full"]
    p.check(4)
    # the driver restarted its registry (a restore): a full snapshot
    p.shared = {}
    assert p.run("C", {7: 77}, checkpoint=5) == ["full"]
    p.check(5)


def test_another_run_never_builds_on_this_run_s_chain(tmp_path):
    p = Partition(tmp_path)
    p.run("A", {i: i for i in range(50)})
    p.run("A", {1: 11}, checkpoint=1)
    # a restart begins a new run from a checkpoint: the driver's registry still names the last
    # completed checkpoint, but the new run's versions are not this run's history
    from dataclasses import replace

    p.location = replace(p.location, run_key="job/run-1")
    p.workers = {}
    assert p.run("A", {2: 22}, checkpoint=2) == ["full"]
    assert p.run("A", {3: 33}, checkpoint=3) == ["full", "changelog"]
    p.check(3)


def test_a_partition_without_changes_lists_the_same_parts_and_uploads_nothing(tmp_path):
    p = Partition(tmp_path)
    p.run("A", {i: i for i in range(50)})
    p.run("A", {1: 11}, checkpoint=1)
    assert p.run("A", {}, checkpoint=2) == ["full", "changelog"]
    files2 = p.checkpoints[2][0]
    assert p.run("A", {2: 2}, checkpoint=3) == ["full", "changelog"]  # nothing changed in the epoch before
    files3 = p.checkpoints[3][0]
    assert [h.path for h in files3] == [h.path for h in files2] and not any(h.uploaded for h in files3)
    assert p.run("A", {}, checkpoint=4) == ["full", "changelog", "changelog"]
    for c in (2, 3, 4):
        p.check(c)


def test_two_keyed_operators_in_one_partition_each_get_their_own_chain(tmp_path):
    from flowpoint.checkpoint.parts import apply_part, load_part
    from flowpoint.partition.backend import HashMapPartitionBackend, chain_entry
    from flowpoint.partition.committed_chain import CommittedChain
    from flowpoint.partition.protocol import CheckpointTarget, StateLocation, TaskSlice
    from flowpoint.partition.working import TaskStateCache

    location = StateLocation("job/run-0", str(tmp_path / "local"), str(tmp_path / "durable"), "hashmap", changelog=True, changelog_max_ratio=100.0)
    backend = HashMapPartitionBackend(location, 128, TaskStateCache())
    chain, shared, model = CommittedChain(), {}, {"a": {}, "b": {}}
    results = []
    for epoch, writes in enumerate([{"a": {1: 1, 2: 2}, "b": {1: 10}}, {"a": {1: None}}, {"b": {3: 30}}, {}], 1):
        ts, _ = backend.acquire(0, 0, chain, ["a", "b"])
        write = backend.snapshot(ts, ["a", "b"], 0, CheckpointTarget(epoch, str(tmp_path / "ck")), dict(shared)) if epoch > 1 else None
        expected_now = {uid: dict(t) for uid, t in model.items()}
        ts.pending = (epoch, f"t{epoch}")
        for uid, kv in writes.items():
            b = ts.backend(uid, uid)
            v = b.get_partitioned_state(ValueStateDescriptor("v"))
            for k, x in kv.items():
                b.current_key = k
                v.clear() if x is None else v.update(x)
                model[uid].pop(k, None) if x is None else model[uid].__setitem__(k, x)
            b.current_key = None
        chain = chain.committed(epoch, f"t{epoch}", backend.end_epoch(ts, TaskSlice(0, 0, chain), epoch, f"t{epoch}"))
        if write is not None:
            parts = write()
            shared = dict(chain_entry(p, epoch) for p in parts)
            results.append({p.uid: [h.kind for h in p.files] for p in parts})
            for p in parts:
                tables: dict = {}
                for h in p.files:
                    apply_part(tables, h.kind == "changelog", load_part((tmp_path / "ck" / h.path).read_bytes(), h.path, p.uid))
                assert tables.get("v", {}) == expected_now[p.uid], (epoch, p.uid)
    assert results == [
        {"a": ["full"], "b": ["full"]},
        {"a": ["full", "changelog"], "b": ["full"]},  # b: nothing changed, its chain as it was
        {"a": ["full", "changelog"], "b": ["full", "changelog"]},
    ]
