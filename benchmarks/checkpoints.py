"""Full vs incremental checkpoints (issues 3, 17): 1,000,000 keys of state, 1% of them updated per epoch.

One job per configuration, in this one run: the first epoch writes all 1,000,000 keys, then
every epoch updates 10,000 pseudo-random keys, with a checkpoint at every epoch boundary. For
each configuration we report the checkpointed state size, the bytes each checkpoint uploaded,
the synchronous and asynchronous durations, and the update epochs' durations next to the same
job without checkpoints (what a checkpoint costs the epochs beyond its synchronous part).

    python benchmarks/checkpoints.py [--keys 1000000] [--epochs 20] [--only hashmap,hashmap-incremental]

HashMap "incremental" is its changelog checkpoints (the default); plain "hashmap" sets
``state.backend.hashmap.changelog.max-ratio: 0`` (a full snapshot at every checkpoint, the
behaviour before issue 17).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flowpoint import (  # noqa: E402
    DataGeneratorSource,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    ValueStateDescriptor,
)


class Phased(DataGeneratorSource):
    """All keys in the first epoch, then ``updates`` records per epoch."""

    def __init__(self, generator, count, keys, updates):
        super().__init__(generator, count=count)
        self.keys, self.updates = keys, updates

    def plan(self, split, position, budget, elapsed_s):
        want = self.keys - position if position < self.keys else self.updates
        return super().plan(split, position, want, elapsed_s)


class Record:
    def __init__(self, keys: int):
        self.keys = keys

    def __call__(self, i: int):
        return (i if i < self.keys else (i * 2654435761) % self.keys), i


class Latest(KeyedProcessFunction):
    def open(self, ctx):
        self.latest = ctx.get_state(ValueStateDescriptor("latest"))

    def process_element(self, value, ctx):
        self.latest.update(value[1])


def run(spark, keys: int, epochs: int, backend: str, incremental: bool, checkpoints: bool, root: str) -> dict:
    updates = keys // 100
    config = {
        "execution.progress.interval": -1, "parallelism.default": 2, "state.working.dir": os.path.join(root, "working"),
        "state.backend.type": backend, "state.backend.incremental": incremental,
        "state.checkpoints.dir": os.path.join(root, "ck"), "state.checkpoints.num-retained": 2,
        # HashMap: incremental = changelog parts (the default), else a full snapshot every checkpoint
        "state.backend.hashmap.changelog.max-ratio": 0.5 if incremental else 0,
    }
    env = StreamExecutionEnvironment.get_execution_environment(config, spark_session=spark)
    if checkpoints:
        env.enable_checkpointing(1)
    source = Phased(Record(keys), keys + updates * epochs, keys, updates)
    env.from_source(source, source_name="keys").set_parallelism(1).key_by(lambda r: r[0]).process(Latest()).uid("latest")
    t0 = time.perf_counter()
    result = env.execute(f"checkpoints-{backend}-{incremental}")
    seconds = time.perf_counter() - t0
    update_epochs = [s for e, n, s in result.get_epoch_stats() if e > 1]
    out = {
        "backend": backend,
        "checkpoints_on": checkpoints,
        "incremental": incremental,
        "seconds": round(seconds, 2),
        "update_epoch_median_s": round(statistics.median(update_epochs), 3),
        "update_epoch_max_s": round(max(update_epochs), 3),
    }
    done = [s for s in result.get_checkpoint_stats() if s.status == "COMPLETED" and s.epoch > 1]
    if done:
        later = done[1:] or done  # the first checkpoint after the load uploads everything
        out.update({
            "checkpoints": len(done),
            "state_size_mb": round(statistics.median(s.state_size for s in later) / 1e6, 2),
            "uploaded_mb_median": round(statistics.median(s.incremental_size for s in later) / 1e6, 3),
            "uploaded_mb_mean": round(statistics.mean(s.incremental_size for s in later) / 1e6, 3),
            "uploaded_share": round(statistics.mean(s.incremental_size / s.state_size for s in later), 4),
            "sync_ms_median": round(statistics.median(s.sync_ms for s in later), 1),
            "async_ms_median": round(statistics.median(s.async_ms for s in later), 1),
        })
    return out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--keys", type=int, default=1_000_000)
    parser.add_argument("--epochs", type=int, default=20)
    parser.add_argument("--only", help="comma-separated configurations: hashmap, hashmap-incremental, rocksdb, rocksdb-incremental (each backend also runs without checkpoints)")
    args = parser.parse_args()
    from benchmarks.baselines.spark_tws import make_session

    spark = make_session()
    rows = []
    configurations = [
        ("hashmap", False, False), ("hashmap", False, True), ("hashmap", True, True),
        ("rocksdb", False, False), ("rocksdb", False, True), ("rocksdb", True, True),
    ]
    if args.only:
        wanted = args.only.split(",")
        configurations = [
            c for c in configurations
            if f"{c[0]}{'-incremental' if c[1] else ''}" in wanted or (not c[2] and c[0] in {w.split("-")[0] for w in wanted})
        ]
    # warm-up, as large as the measured jobs: the first such job of a session ran its update
    # epochs about 30% slower, whichever configuration it was (Python workers starting and
    # growing their heaps, JVM code generation); without it the first configuration looked slowest
    with tempfile.TemporaryDirectory(prefix="fp-ckbench-") as root:
        run(spark, args.keys, 3, "hashmap", False, False, root)
    for backend, incremental, checkpoints in configurations:
        with tempfile.TemporaryDirectory(prefix="fp-ckbench-") as root:
            row = run(spark, args.keys, args.epochs, backend, incremental, checkpoints, root)
        rows.append(row)
        print(json.dumps(row), flush=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "checkpoints.json"), "w") as f:
        json.dump(rows, f, indent=2)
    print(f"\n{'configuration':<30}{'state MB':>9}{'uploaded MB':>13}{'share':>8}{'sync ms':>9}{'async ms':>10}{'epoch s':>9}")
    for r in rows:
        name = r["backend"] + (", incremental" if r["incremental"] else "") + ("" if r["checkpoints_on"] else ", no checkpoints")
        print(f"{name:<30}{r.get('state_size_mb', 0):>9}{r.get('uploaded_mb_mean', 0):>13}{r.get('uploaded_share', 0):>8}"
              f"{r.get('sync_ms_median', 0):>9}{r.get('async_ms_median', 0):>10}{r['update_epoch_median_s']:>9}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
