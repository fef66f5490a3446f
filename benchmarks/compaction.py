"""RocksDB compaction for a key set that grows without end (issue 27): what an incremental
checkpoint uploads, and what point reads cost, under flowpoint's universal compaction settings
and alternatives. Offline (no Spark): one DB with flowpoint's options
(``flowpoint.state.rocksdb_options._options``), fed ``--per`` new keys per checkpoint (the soak's rate:
3,000 records/s over two subtasks, a checkpoint every 2 s, is 3,000 new keys per DB per
checkpoint), flushed and checkpointed ``--checkpoints`` times; what a checkpoint uploads is the
size of the SST files it holds that the previous one did not (as ``shared/`` in an incremental
checkpoint). Then 200,000 point reads of present and of absent keys.

    python benchmarks/compaction.py [--checkpoints 1800] [--per 3000] [--keys 0|N] [--configs flowpoint,before,...]

With ``--keys N`` the records update N keys instead (a full key set): the state then holds old
versions until compaction drops them, and ``state MB`` against the live data shows how many.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from rocksdict import Checkpoint, Rdict, UniversalCompactOptions  # noqa: E402

from flowpoint.state import rocksdb_options as R  # noqa: E402


def universal(min_merge_width: int, trigger: int, amp: int, size_ratio: int = 1, slowdown: int = 0, stop: int = 0):
    def tweak(o):
        u = UniversalCompactOptions()
        u.size_ratio = size_ratio
        u.min_merge_width = min_merge_width
        u.max_size_amplification_percent = amp
        o.set_universal_compaction_options(u)
        o.set_level_zero_file_num_compaction_trigger(trigger)
        o.set_level_zero_slowdown_writes_trigger(slowdown or max(40, trigger + 16))
        o.set_level_zero_stop_writes_trigger(stop or max(60, trigger + 36))
    return tweak


CONFIGS = {
    "flowpoint": lambda o: None,  # what flowpoint.state.rocksdb_options._options sets now (merge width 4, 24 runs, 200 %)
    "before": universal(2, 12, 200),  # issue 27's soak: merge width 2, 12 runs, 200 % size amplification
    "width4-runs24-amp1000": universal(4, 24, 1000),
    "width4-runs24-amp600": universal(4, 24, 600),
    "width4-runs12-amp200": universal(4, 12, 200),
    "width4-runs24-stall64": universal(4, 24, 200, slowdown=64, stop=96),
    "width8-runs40-amp1000": universal(8, 40, 1000),
}


def key(k: int) -> bytes:
    return (k % 128).to_bytes(2, "big") + b"\x01" + f"user-{k}".encode()


def run(name: str, tweak, checkpoints: int, per: int, root: str, keys: int = 0) -> dict:
    """``keys`` 0: a new key per record; otherwise records update one of ``keys`` keys."""
    d, ck = os.path.join(root, f"db-{name}"), os.path.join(root, f"ck-{name}")
    o = R._options(R.RocksDBMemory(managed=False))
    tweak(o)
    db = Rdict(d, o)
    w = R._write_options()
    prev: dict[str, int] = {}
    uploads = []
    waits = []  # seconds of each checkpoint's writes, flush and checkpoint (a write stall shows here)
    started = time.perf_counter()
    k = 0
    for _ in range(checkpoints):
        t0 = time.perf_counter()
        for _ in range(per):
            db.put(key(k if not keys else (k * 7919) % keys), k.to_bytes(8, "big"), w)
            k += 1
        db.flush(True)
        shutil.rmtree(ck, ignore_errors=True)
        Checkpoint(db).create_checkpoint(ck)
        waits.append(time.perf_counter() - t0)
        files = {f: os.path.getsize(os.path.join(ck, f)) for f in os.listdir(ck) if f.endswith(".sst")}
        uploads.append(sum(size for f, size in files.items() if f not in prev))
        prev = files
    took = time.perf_counter() - started
    rates = {}
    present = min(k, keys or k)
    for label, probe in (("hit", [key(i) for i in random.Random(7).choices(range(present), k=200_000)]), ("miss", [key(i) for i in range(k, k + 200_000)])):
        t = time.perf_counter()
        for x in probe:
            db.get(x)
        rates[label] = len(probe) / (time.perf_counter() - t)
    db.close()
    n = len(uploads)
    state = sum(prev.values())
    return {
        "config": name, "seconds": took, "state_mb": state / 1e6, "files": len(prev), "new_mb": state / n / 1e6,
        "mean_mb": sum(uploads) / n / 1e6, "last_tenth_mb": sum(uploads[-n // 10:]) / (n // 10) / 1e6, "max_mb": max(uploads) / 1e6,
        "reads_hit": rates["hit"], "reads_miss": rates["miss"],
        "step_p50_ms": sorted(waits)[n // 2] * 1000, "step_max_ms": max(waits) * 1000,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--checkpoints", type=int, default=1800, help="an hour of 2 s checkpoints")
    ap.add_argument("--per", type=int, default=3000, help="new keys per checkpoint")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--keys", type=int, default=0, help="0: every record a new key (grow); else updates of this many keys (full)")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="compaction-")
    try:
        what = "new keys" if not args.keys else f"updates of {args.keys:,} keys"
        print(f"{args.checkpoints} checkpoints of {args.per:,} {what} each")
        print(f"{'config':<24}{'state MB':>9}{'files':>6}{'new/ckpt':>10}{'upload mean':>12}{'last 10%':>9}{'max':>8}{'x new':>7}{'reads hit/s':>12}{'miss/s':>9}{'step p50/max ms':>17}")
        for name in args.configs.split(","):
            r = run(name, CONFIGS[name], args.checkpoints, args.per, root, args.keys)
            print(f"{name:<24}{r['state_mb']:>9.1f}{r['files']:>6}{r['new_mb']:>10.3f}{r['mean_mb']:>12.3f}{r['last_tenth_mb']:>9.3f}"
                  f"{r['max_mb']:>8.1f}{r['mean_mb'] / r['new_mb']:>7.1f}{r['reads_hit']:>12,.0f}{r['reads_miss']:>9,.0f}"
                  f"{r['step_p50_ms']:>9.1f}/{r['step_max_ms']:<7.0f}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
