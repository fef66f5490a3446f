"""Keyed state backends: heap vs RocksDB, in one process (not a test).

1. Per-record cost: ValueState ``update((value() or 0) + 1)`` for each of 200,000 keys, after an
   epoch that created them all. Heap: dict lookups. RocksDB: the first touch of a key in an epoch
   reads it from the DB ("cold"), a second touch in the same epoch hits the overlay ("hot").
   The end of the epoch (delta + apply + commit) is timed separately, and so is an open+close
   of the DB that changed nothing (the working state opens a partition's DBs for every task).
2. Incremental checkpoints: 1,000,000 keys, then 20 rounds that each update a random 1 % of
   them and take a RocksDB checkpoint; reports the bytes of SST files new since the previous
   checkpoint against the total live SST bytes (what an incremental upload sends vs a full one).

    python benchmarks/state_backends.py [--keys 200000] [--checkpoint-keys 1000000]
        [--rounds 20] [--fraction 0.01] [--compaction universal|level|both] [--skip-checkpoints]

Measured on a noisy 2-vCPU VM (ranges over three runs, each the best of 5 alternating passes):
- heap 1.3-1.8 M ops/s; RocksDB cold (every key read from the DB) 166-183 k ops/s, so heap is
  7.3-9.9x faster; RocksDB hot (overlay hits) 1.8-1.9 M ops/s, heap's speed (0.8-1.2x).
  Epoch end for 200k changed keys: heap 0.08-0.11 s, RocksDB (delta + apply) 0.61-0.69 s.
  Open+close of the DB without changes: 4-5 ms.
- Incremental checkpoints, 1 M keys, 20 rounds of 1 % updates (new SST bytes / live SST bytes):
  universal (the backend's setting) 1.45 % mean (max 10.8 %) after a bulk load; 6.3 % after a
  load with a checkpoint per 100k keys, of which one round (93 %) merges the ten runs written
  while the state grew and the other 19 average 1.7 %; over 80 rounds 1.9 % and 3.4 %.
  Level style: 20 % (four rounds near 100 %).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flowpoint import ValueStateDescriptor  # noqa: E402
from flowpoint.state import rocksdb as rocks_module  # noqa: E402
from flowpoint.state.heap import HeapKeyedStateBackend  # noqa: E402
from flowpoint.state.rocksdb import RocksDBKeyedStateBackend  # noqa: E402

MAX_PARALLELISM = 128


def _pass(backend, state, keys) -> float:
    t0 = time.perf_counter()
    for k in keys:
        backend.current_key = k
        state.update((state.value() or 0) + 1)
    return time.perf_counter() - t0


def _end_epoch(backend) -> float:
    t0 = time.perf_counter()
    if isinstance(backend, RocksDBKeyedStateBackend):
        backend.apply(backend.delta())
    else:
        backend.delta()
    backend.commit()
    return time.perf_counter() - t0


def measure_ops(n_keys: int, root: str, repeats: int = 5) -> dict:
    """Heap and RocksDB passes alternate ``repeats`` times (each rolled back, so every RocksDB
    "cold" pass reads from the DB again); the fastest pass of each kind counts, which keeps the
    ratio meaningful on a machine whose speed drifts."""
    keys = [f"user-{i}" for i in range(n_keys)]
    order = keys[:]
    random.Random(1).shuffle(order)

    heap = HeapKeyedStateBackend("bench")
    hv = heap.get_partitioned_state(ValueStateDescriptor("count"))
    _pass(heap, hv, keys)
    _end_epoch(heap)

    rdb = RocksDBKeyedStateBackend("bench", os.path.join(root, "ops-db"), MAX_PARALLELISM)
    rdb.open()
    times: dict[str, list[float]] = {"heap": [], "heap_hot": [], "cold": [], "hot": [], "heap_end": [], "rdb_end": []}
    try:
        rv = rdb.get_partitioned_state(ValueStateDescriptor("count"))
        _pass(rdb, rv, keys)
        _end_epoch(rdb)
        rdb._db.flush(True)  # the committed state is in SST files, as after a checkpoint
        for r in range(repeats):
            last = r == repeats - 1
            times["heap"].append(_pass(heap, hv, order))
            times["heap_hot"].append(_pass(heap, hv, order))
            times["cold"].append(_pass(rdb, rv, order))
            times["hot"].append(_pass(rdb, rv, order))
            if last:
                times["heap_end"].append(_end_epoch(heap))
                times["rdb_end"].append(_end_epoch(rdb))
            else:
                heap.rollback()
                rdb.rollback()
        rdb.current_key = order[0]
        assert rv.value() == 3
        rdb.commit()
        rdb.close()  # flushes what the last apply wrote
        t0 = time.perf_counter()
        for _ in range(10):
            rdb.open()
            rdb.close()
        open_close_ms = (time.perf_counter() - t0) * 100
    finally:
        rdb.close()
    best = {k: min(v) for k, v in times.items()}

    def ops(seconds: float) -> int:
        return round(n_keys / seconds)

    return {
        "keys": n_keys,
        "best_of": repeats,
        "heap_ops_per_s": ops(best["heap"]),
        "heap_hot_ops_per_s": ops(best["heap_hot"]),
        "heap_epoch_end_s": round(best["heap_end"], 3),
        "rocksdb_cold_ops_per_s": ops(best["cold"]),
        "rocksdb_hot_ops_per_s": ops(best["hot"]),
        "rocksdb_epoch_end_s": round(best["rdb_end"], 3),
        "rocksdb_open_close_ms": round(open_close_ms, 1),
        "ratio_heap_over_rocksdb_cold": round(best["cold"] / best["heap"], 2),
        "ratio_heap_over_rocksdb_hot": round(best["hot"] / best["heap_hot"], 2),
        "ratio_heap_over_rocksdb_cold_with_epoch_end": round((best["cold"] + best["rdb_end"]) / (best["heap"] + best["heap_end"]), 2),
    }


def _level_options():
    """Level-style compaction (RocksDB's default style), for comparison."""
    from rocksdict import DBCompactionStyle

    o = _universal_options()
    o.set_compaction_style(DBCompactionStyle.level())
    o.set_level_zero_file_num_compaction_trigger(4)
    o.set_level_compaction_dynamic_level_bytes(True)
    o.set_max_bytes_for_level_base(64 << 20)
    o.set_target_file_size_base(8 << 20)
    return o


_universal_options = rocks_module._options


def measure_checkpoints(n_keys: int, rounds: int, fraction: float, compaction: str, root: str, growth: bool = False) -> dict:
    if compaction == "level":
        rocks_module._options = _level_options
    try:
        return _measure_checkpoints(n_keys, rounds, fraction, compaction, root, growth)
    finally:
        rocks_module._options = _universal_options


def _sst(files: list[tuple[str, int]]) -> dict[str, int]:
    return {name: size for name, size in files if name.endswith(".sst")}


def _measure_checkpoints(n_keys: int, rounds: int, fraction: float, compaction: str, root: str, growth: bool) -> dict:
    """Load ``n_keys`` in 10 epochs (``growth``: with a checkpoint after each, as a job whose
    state grows; otherwise one checkpoint after the load), then measure ``rounds`` checkpoints."""
    rng = random.Random(7)
    db_path = os.path.join(root, f"chk-db-{compaction}-{'growth' if growth else 'bulk'}")
    b = RocksDBKeyedStateBackend("bench", db_path, MAX_PARALLELISM)
    b.open()
    try:
        v = b.get_partitioned_state(ValueStateDescriptor("count"))
        t0 = time.perf_counter()
        step = max(1, n_keys // 10)
        for start in range(0, n_keys, step):
            for k in range(start, min(n_keys, start + step)):
                b.current_key = k
                v.update(rng.randrange(1 << 30))
            b.apply(b.delta())
            b.commit()
            if growth:
                load_dir = os.path.join(root, f"load-{start}")
                b.create_checkpoint(load_dir)
                shutil.rmtree(load_dir)
        load_s = time.perf_counter() - t0
        prev_dir = os.path.join(root, "chk-0")
        prev = _sst(b.create_checkpoint(prev_dir))
        per_round = []
        for n in range(1, rounds + 1):
            for k in rng.sample(range(n_keys), int(n_keys * fraction)):
                b.current_key = k
                v.update((v.value() or 0) + 1)
            b.apply(b.delta(), version=n)
            b.commit()
            cur_dir = os.path.join(root, f"chk-{n}")
            t1 = time.perf_counter()
            cur = _sst(b.create_checkpoint(cur_dir))
            chk_s = time.perf_counter() - t1
            new_bytes = sum(size for name, size in cur.items() if prev.get(name) != size)
            total = sum(cur.values())
            per_round.append({"round": n, "new_sst_bytes": new_bytes, "total_sst_bytes": total, "ratio": round(new_bytes / total, 4), "sst_files": len(cur), "checkpoint_s": round(chk_s, 3)})
            shutil.rmtree(prev_dir)
            prev_dir, prev = cur_dir, cur
        shutil.rmtree(prev_dir)
        assert b.num_keys() == n_keys
    finally:
        b.close()
    ratios = [r["ratio"] for r in per_round]
    return {
        "compaction": compaction,
        "load": "10 epochs, a checkpoint after each" if growth else "10 epochs, then one checkpoint",
        "keys": n_keys,
        "rounds": rounds,
        "updated_per_round": int(n_keys * fraction),
        "load_s": round(load_s, 2),
        "mean_ratio_new_over_total": round(sum(ratios) / len(ratios), 4),
        "max_ratio": max(ratios),
        "sum_new_over_mean_total": round(sum(r["new_sst_bytes"] for r in per_round) / (sum(r["total_sst_bytes"] for r in per_round) / len(per_round)), 4),
        "last_total_sst_bytes": per_round[-1]["total_sst_bytes"],
        "rounds_over_5_percent": [[r["round"], r["ratio"]] for r in per_round if r["ratio"] > 0.05],
        "per_round": per_round,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", type=int, default=200_000)
    parser.add_argument("--checkpoint-keys", type=int, default=1_000_000)
    parser.add_argument("--rounds", type=int, default=20)
    parser.add_argument("--fraction", type=float, default=0.01)
    parser.add_argument("--compaction", choices=["universal", "level", "both"], default="universal")
    parser.add_argument("--skip-checkpoints", action="store_true")
    parser.add_argument("--verbose", action="store_true", help="print every checkpoint round")
    args = parser.parse_args()
    root = tempfile.mkdtemp(prefix="flowpoint-bench-state-")
    try:
        result: dict = {"ops": measure_ops(args.keys, root)}
        print(json.dumps(result["ops"], indent=2), flush=True)
        if not args.skip_checkpoints:
            styles = ["universal", "level"] if args.compaction == "both" else [args.compaction]
            for style in styles:
                for growth in (False, True):
                    r = measure_checkpoints(args.checkpoint_keys, args.rounds, args.fraction, style, root, growth)
                    if not args.verbose:
                        r = {k: v for k, v in r.items() if k != "per_round"}
                    result[f"checkpoints_{style}_{'growth' if growth else 'bulk'}"] = r
                    print(json.dumps(r, indent=2), flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
