"""RocksDB checkpoints with the changelog (``state.backend.changelog.enabled``): a chain of a
materialization (the DB's files, in ``shared/``) and changelog parts (the deltas committed since
the part before). Each checkpoint restores to exactly the committed state it was taken at; a
checkpoint uploads what changed, not what compaction rewrote; the chain materializes when it is
not this DB's, is older than the interval, or its parts outgrow the materialization.

Without Spark: one partition driven as the continuous runtime drives it (commit at each barrier,
then the snapshot), checked against a model of the committed state.
"""

from __future__ import annotations

import os
import random
from dataclasses import replace

import pytest

from flowpoint import MapStateDescriptor, ValueStateDescriptor
from flowpoint.errors import CorruptStateError
from flowpoint.state.key_identity import user_key


def registry_after(cid: int, part) -> dict[str, str]:
    """What the driver's registry holds for partition 0 once checkpoint ``cid`` with ``part`` completed."""
    from flowpoint.driver.checkpoint_coordinator import shared_registry

    class Cut:
        checkpoint_id = cid
        parts = {(0, 0): [part]}

    return shared_registry(Cut)[("op", 0)]


def write_values(b, writes: dict, model: dict) -> None:
    """``writes`` into ValueState ``v`` of backend ``b`` (value None: clear), and into ``model``."""
    v = b.get_partitioned_state(ValueStateDescriptor("v"))
    for key, value in writes.items():
        b.current_key = key
        if value is None:
            v.clear()
            model.pop(key, None)
        else:
            v.update(value)
            model[key] = value
    b.current_key = None


class Partition:
    """One keyed partition on the RocksDB backend with the changelog, its completed
    checkpoints and a model of its committed state."""

    def __init__(self, tmp_path, interval_ms: int = 600_000) -> None:
        from flowpoint.partition.committed_chain import CommittedChain
        from flowpoint.partition.protocol import StateLocation
        from flowpoint.partition.rocksdb_backend import RocksDBPartitionBackend
        from flowpoint.partition.working import TaskStateCache

        self.tmp = tmp_path
        self.location = StateLocation(
            "job/run-0", str(tmp_path / "local"), str(tmp_path / "durable"), "rocksdb", incremental=True,
            rocksdb_changelog=True, materialize_interval_ms=interval_ms,
        )
        self.backend = RocksDBPartitionBackend(self.location, 128, TaskStateCache())
        self.ts, _ = self.backend.acquire(0, 0, CommittedChain(), ["op"])
        self.version = 0
        self.shared: dict[str, str] = {}
        self.model: dict = {"v": {}, "m": {}}
        self.checkpoints: dict[int, tuple[list, dict]] = {}

    def segment(self, writes: dict, maps: dict | None = None) -> None:
        """One segment's writes (value None: clear), committed at its barrier."""
        b = self.ts.backend("op", "op")
        write_values(b, writes, self.model["v"])
        m = b.get_partitioned_state(MapStateDescriptor("m"))
        for key, entries in (maps or {}).items():
            b.current_key = key
            if entries is None:
                m.clear()
                self.model["m"].pop(key, None)
                continue
            for uk, x in entries.items():
                if x is None:
                    m.remove(uk)
                    self.model["m"].get(key, {}).pop(uk, None)
                else:
                    m.put(uk, x)
                    self.model["m"].setdefault(key, {})[uk] = x
            if not self.model["m"].get(key):
                self.model["m"].pop(key, None)
        b.current_key = None
        self.version += 1
        self.backend.commit_in_place(self.ts, self.version)

    def checkpoint(self, cid: int, complete: bool = True) -> list[str]:
        """A checkpoint of the committed state; its kinds of files (``sst`` and ``private``
        folded into ``m``: a materialization)."""
        from flowpoint.partition.protocol import CheckpointTarget

        write = self.backend.snapshot(self.ts, ["op"], 0, CheckpointTarget(cid, str(self.tmp / "ck")), dict(self.shared))
        state = {"v": dict(self.model["v"]), "m": {k: dict(x) for k, x in self.model["m"].items()}}
        (part,) = write()
        self.checkpoints[cid] = (part.files, state)
        if complete:
            self.shared = registry_after(cid, part)
        kinds = []
        for h in part.files:
            k = "m" if h.kind in ("sst", "private") else "log"
            if k == "log" or not kinds or kinds[-1] != "m":
                kinds.append(k)
        return kinds

    def uploaded(self, cid: int) -> int:
        return sum(h.size for h in self.checkpoints[cid][0] if h.uploaded)

    def restored(self, cid: int) -> dict:
        """What a restore of checkpoint ``cid`` builds from its files alone."""
        from flowpoint.checkpoint.parts import RestoredFile, restore_native
        from flowpoint.state.rocksdb import RocksDBKeyedStateBackend
        from flowpoint.state.rocksdb_changelog import replay

        files, _ = self.checkpoints[cid]
        base = self.tmp / "ck"
        listed = tuple((str(base / h.path), h.local_name, h.size, h.sha256) for h in files)
        path = str(self.tmp / f"restore-{cid}-{random.random()}" / "db")
        logs = restore_native(path, [RestoredFile("op", str(base), 0, files=listed)], {})
        b = RocksDBKeyedStateBackend("op", path, 128)
        b.open()
        try:
            replay(b, logs)
            tables = b.snapshot()
        finally:
            b.close()
        return {
            "v": {user_key(k): x for k, x in tables.get("v", {}).items()},
            "m": {user_key(k): dict(x) for k, x in tables.get("m", {}).items()},
        }

    def check(self, cid: int) -> None:
        assert self.restored(cid) == self.checkpoints[cid][1], f"checkpoint {cid}"


def test_a_chain_grows_by_changelog_parts_and_every_checkpoint_restores_exactly(tmp_path):
    p = Partition(tmp_path)
    p.segment({i: i for i in range(2000)}, {i: {0: "a", 1: "b"} for i in range(50)})
    assert p.checkpoint(1) == ["m"]
    p.segment({1: 10, 2: None, 2.5: "x"}, {3: {0: None, 5: "c"}, 4: None})
    assert p.checkpoint(2) == ["m", "log"]
    p.segment({3: None}, {5: {9: 9}})
    p.segment({4: 44})  # two segments in one part
    assert p.checkpoint(3) == ["m", "log", "log"]
    assert p.checkpoint(4) == ["m", "log", "log"]  # nothing changed: the same chain, nothing uploaded
    assert p.uploaded(4) == 0 and [h.path for h in p.checkpoints[4][0]] == [h.path for h in p.checkpoints[3][0]]
    for cid in (1, 2, 3, 4):
        p.check(cid)
    assert 2 not in p.restored(4)["v"] and 4 not in p.restored(4)["m"]


def test_a_checkpoint_uploads_what_changed_not_what_compaction_rewrote(tmp_path):
    """A key set that grows by 500 keys a segment: a changelog part holds those 500 keys; the
    materializations in between (the DB's new files) keep the average upload near that."""
    p = Partition(tmp_path)
    p.segment({f"user-{i}": i for i in range(20_000)})
    p.checkpoint(1)
    parts, uploads = [], []
    for cid in range(2, 60):
        p.segment({f"user-{20_000 + cid * 500 + i}": i for i in range(500)})
        if p.checkpoint(cid)[-1] == "log":
            parts.append(p.uploaded(cid))
        uploads.append(p.uploaded(cid))
    assert len(parts) > 40, "most checkpoints are changelog parts"
    assert max(parts) < 12_000, parts  # 500 puts of ~20-byte keys, compressed
    assert sum(uploads) / len(uploads) < 2 * sum(parts) / len(parts), uploads
    p.check(59)
    p.check(30)


def test_a_declined_checkpoint_s_changes_go_into_the_next_part(tmp_path):
    p = Partition(tmp_path)
    p.segment({i: i for i in range(100)})
    p.checkpoint(1)
    p.segment({1: 11, 2: None})
    assert p.checkpoint(2, complete=False) == ["m", "log"]  # declined: the registry still names 1
    p.segment({3: 33})
    assert p.checkpoint(3) == ["m", "log"]  # on top of checkpoint 1, with 2's changes
    p.check(3)
    assert p.restored(3)["v"][1] == 11 and 2 not in p.restored(3)["v"]


def test_the_chain_materializes_after_the_interval_and_when_its_parts_outgrow_it(tmp_path, monkeypatch):
    import flowpoint.partition.rocksdb_backend as backend_module

    clock = [1_000_000]
    monkeypatch.setattr(backend_module, "now_ms", lambda: clock[0])
    p = Partition(tmp_path, interval_ms=60_000)
    p.segment({i: i for i in range(3000)})
    assert p.checkpoint(1) == ["m"]
    clock[0] += 30_000
    p.segment({1: -1})
    assert p.checkpoint(2) == ["m", "log"]
    clock[0] += 31_000  # 61 s after the materialization: due
    p.segment({2: -2})
    # this checkpoint is still a changelog part, while the memtables flush in the background ...
    assert p.checkpoint(3) == ["m", "log", "log"]
    p.segment({3: -3})
    assert p.checkpoint(4) == ["m"]  # ... and the next one materializes
    p.segment({i: -i for i in range(3000)})  # every key changes: the part would outgrow the DB's files
    p.segment({i: i * 2 for i in range(3000)})
    assert p.checkpoint(5) == ["m", "log"]
    p.segment({4: -4})
    assert p.checkpoint(6) == ["m"]
    for cid in (1, 2, 3, 4, 5, 6):
        p.check(cid)


def test_another_db_lineage_or_a_rewrite_in_place_materializes(tmp_path):
    from flowpoint.partition.backend import ROCKSDB_CHAIN_PREFIX

    p = Partition(tmp_path)
    p.segment({i: i for i in range(100)})
    p.checkpoint(1)
    # the registry names a chain of another DB (a restart rebuilt the partition elsewhere)
    other = dict(p.shared)
    key = ROCKSDB_CHAIN_PREFIX + "op"
    other[key] = other[key].replace(p.ts.db_id, "000000000000")
    p.shared = other
    p.segment({1: 11})
    assert p.checkpoint(2) == ["m"]
    # a migration rewrote values in the DB without a delta: the log cannot replay it
    p.segment({2: 22})
    p.ts.backend("op", "op")._forget_log()
    assert p.checkpoint(3) == ["m"]
    p.segment({3: 33})
    assert p.checkpoint(4) == ["m", "log"]
    for cid in (2, 3, 4):
        p.check(cid)


def test_random_segments_and_checkpoints_restore_exactly(tmp_path):
    rng = random.Random(7)
    p = Partition(tmp_path)
    keys = [*range(60), *(k + 0.5 for k in range(20)), *(f"s{k}" for k in range(40))]
    cid = 0
    for _ in range(40):
        writes = {rng.choice(keys): (None if rng.random() < 0.2 else rng.randint(0, 99)) for _ in range(rng.randint(0, 30))}
        maps = {rng.choice(keys): (None if rng.random() < 0.1 else {rng.randint(0, 5): (None if rng.random() < 0.3 else rng.random())}) for _ in range(rng.randint(0, 10))}
        p.segment(writes, maps)
        if rng.random() < 0.6:
            cid += 1
            p.checkpoint(cid, complete=rng.random() < 0.8)
    assert cid > 10
    for c in p.checkpoints:
        p.check(c)


def test_on_epochs_the_deltas_a_task_catches_up_with_are_in_the_next_part(tmp_path):
    """The epoch runtime commits differently: a task writes its epoch's delta file, and the
    next acquire applies the committed deltas to the DB (RocksDBKeyedStateBackend.apply, which
    records them). A checkpoint is taken at the start of an epoch, of the committed state."""
    from flowpoint.partition.committed_chain import CommittedChain
    from flowpoint.partition.protocol import CheckpointTarget, TaskSlice

    p = Partition(tmp_path)
    backend, chain, model, kinds = p.backend, CommittedChain(), {}, {}
    p.backend.release(p.ts)
    writes = [{i: i for i in range(200)}, {1: 11, 2: None}, {3: 33}, {}, {4: 44, 5: None}, {6: 66}]
    for epoch, w in enumerate(writes, 1):
        ts, _ = backend.acquire(0, 0, chain, ["op"])
        cid = epoch - 1
        if cid:
            write = backend.snapshot(ts, ["op"], 0, CheckpointTarget(cid, str(tmp_path / "ck")), dict(p.shared))
            (part,) = write()
            p.checkpoints[cid] = (part.files, {"v": dict(model), "m": {}})
            kinds[cid] = [h.kind for h in part.files if h.kind == "changelog"]
            p.shared = registry_after(cid, part)
        ts.pending = (epoch, f"t{epoch}")
        write_values(ts.backend("op", "op"), w, model)
        ack = backend.end_epoch(ts, TaskSlice(0, 0, chain), epoch, f"t{epoch}")
        chain = chain.committed(epoch, f"t{epoch}", ack)
        backend.release(ts)
    assert kinds[1] == [] and all(kinds[c] for c in (2, 3, 5)), kinds
    for cid in p.checkpoints:
        p.check(cid)


@pytest.mark.parametrize("damage", ["flip", "truncate"])
def test_a_damaged_changelog_part_is_refused_by_name(tmp_path, damage):
    from flowpoint.state.rocksdb_changelog import decode

    p = Partition(tmp_path)
    p.segment({i: i for i in range(50)})
    p.checkpoint(1)
    p.segment({1: "changed"})
    p.checkpoint(2)
    log = next(h for h in p.checkpoints[2][0] if h.kind == "changelog")
    path = tmp_path / "ck" / log.path
    data = bytearray(path.read_bytes())
    if damage == "flip":
        data[len(data) // 2] ^= 0xFF
    else:
        del data[-3:]
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptStateError, match=os.path.basename(log.path)):
        p.restored(2)  # the SHA-256 in the part's handle
    if damage == "truncate":
        with pytest.raises(CorruptStateError, match="truncated or corrupt"):
            decode(bytes(data), "part.changelog")  # the decoder on its own, past a checksum


def test_a_part_is_bytes_and_decoding_runs_no_code():
    from flowpoint.state.rocksdb import RocksDBDelta
    from flowpoint.state.rocksdb_changelog import decode, encode

    d = RocksDBDelta(puts={b"k1": b"v1", b"k2": b""}, deletes=[b"gone"], prefix_deletes=[b"pre"], states={"v": (1, "value")}, key_count_change=-1)
    (version, back), = decode(encode([(9, d)]), "x")
    assert version == 9 and back == d
    with pytest.raises(CorruptStateError, match="not a flowpoint RocksDB changelog part"):
        decode(b"\x80\x04cos\nsystem\n", "evil.changelog")


def test_the_changelog_setting_reaches_the_tasks(make_env):
    from flowpoint.api.checkpointing import resolve_checkpoint_settings

    env = make_env(state_backend_type="rocksdb", state_checkpoints_dir="/tmp/x")
    env.enable_checkpointing(1000)
    assert not env.is_changelog_state_backend_enabled()
    env.enable_changelog_state_backend(True)
    env.get_configuration().set("state.backend.changelog.periodic-materialize.interval", "3 min")
    s = resolve_checkpoint_settings(env)
    assert env.is_changelog_state_backend_enabled() and s.rocksdb_changelog and s.materialize_interval_ms == 180_000
    assert replace(s, rocksdb_changelog=False) != s


# -- a job ---------------------------------------------------------------------------------------


def test_every_retained_changelog_checkpoint_is_exact_and_a_restore_continues_exactly(make_env, tmp_path):
    """The churn job of test_hashmap_incremental on RocksDB with the changelog: each retained
    checkpoint (a materialization and changelog parts) holds exactly the state after the records
    it had read; retention leaves exactly the referenced shared files; a restore from the oldest
    retained checkpoint ends with the exact state. On the continuous runtime, which commits at
    every barrier (the epoch runtime's way of committing: the test before)."""
    from test_hashmap_incremental import (
        assert_exact,
        build,
        checkpoints_of,
        expected,
        final_state,
        incremental_env,
        kinds,
        run_and_cancel,
    )

    def env_for(ck: str):
        env = incremental_env(make_env, tmp_path, retained=6, ck=ck)
        c = env.get_configuration()
        c.set("execution.runtime", "continuous")
        c.set("state.backend.type", "rocksdb")
        env.enable_changelog_state_backend(True)
        return env

    events = 6_000
    client = run_and_cancel(env_for("ck"), events, 9)
    job_dir = tmp_path / "ck" / client.get_job_id()
    metas = checkpoints_of(job_dir)
    assert len(metas) == 6
    chains = [k for m in metas.values() for k in kinds(m)]
    assert any("changelog" in k for k in chains), chains
    assert all(set(k) <= {"sst", "private", "changelog"} and "private" in k for k in chains), chains
    assert all(f.path.startswith("shared/") for m in metas.values() for f in m.files())
    assert_exact(job_dir, metas)
    shared = {f"shared/{n}" for n in os.listdir(job_dir / "shared")}
    assert shared == set().union(*(m.referenced_files() for m in metas.values()))
    env = env_for("ck2")
    env.get_configuration().set("execution.savepoint.path", str(job_dir / f"chk-{min(metas)}"))
    build(env, events)
    assert final_state(env.execute("restored")) == expected(events)
