"""A job that runs for an hour: memory, checkpoints, latency and throughput over time (issue 27).

One continuous job per case, in this process (``local[2]``, parallelism 2, checkpoints every
``--interval`` s to a local ``file://`` directory, RocksDB incremental), fed at a fixed rate by
an in-process source whose records carry their creation time:

* a keyed count (``key_by(user).process(...)``, a ``ValueState`` per user) that emits every
  record's count with its creation time;
* a processing-time tumbling window (5 s) over 100 key buckets counting the same records;
* a sink that keeps every 20th record's latency (now - creation) in a file per parallel
  instance under the case's directory (local mode: the files are on this host).

Key sets: ``grow`` gives every record a new user (the state grows without end), ``full`` draws
users from ``--keys`` ids (the state is full after the first pass). Every ``--sample`` seconds
the script records: records/s read in the last sample, the RSS of this process (the driver), of
Spark's JVM and of the Python workers (summed; ``psutil`` over this process's children), the
latest completed checkpoint's end-to-end duration and incremental size, the state size, and
p50/p99 latency of the records that arrived in the sample.

Output: a table per case on stdout, ``benchmarks/results/soak-<timestamp>.json`` with every
sample, and ``soak-<timestamp>.png`` (matplotlib) with one panel per figure. "growth after
warm-up" compares the mean of the last 3 samples with the mean of the 3 samples after
``--warmup`` minutes.

    python benchmarks/soak.py --minutes 60 [--rate 3000] [--backends hashmap,rocksdb]
        [--keys-modes grow,full] [--keys 100000] [--interval 2] [--sample 30] [--warmup 5]

Needs ``pip install psutil matplotlib`` (the ``bench`` extra).
"""

from __future__ import annotations

import argparse
import glob
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
    Time,
    TumblingProcessingTimeWindows,
    ValueStateDescriptor,
)
from flowpoint.api.functions import SinkFunction  # noqa: E402

LATENCY_EVERY = 20
BUCKETS = 100


class Users:
    """Record ``i``: ``(user, created_ns)``; a new user per record, or one of ``keys``."""

    def __init__(self, keys: int | None):
        self.keys = keys

    def __call__(self, i: int) -> tuple[str, int]:
        user = i if self.keys is None else (i * 7919) % self.keys
        return f"user-{user}", time.time_ns()


class CountPerUser(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count"))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield value[0], n, value[1]


class LatencyFile(SinkFunction):
    """Every ``LATENCY_EVERY``-th record's ``arrival_ns created_ns`` appended to a file of this
    parallel instance (line-buffered)."""

    def __init__(self, directory: str):
        self.directory = directory
        self.n = 0
        self.f = None

    def open(self, ctx):
        index = ctx.get_index_of_this_subtask()
        self.f = open(os.path.join(self.directory, f"latency-{index}-{os.getpid()}.txt"), "a", buffering=1)  # noqa: SIM115

    def invoke(self, value, context):
        self.n += 1
        if self.n % LATENCY_EVERY == 0:
            self.f.write(f"{time.time_ns()} {value[2]}\n")

    def close(self):
        if self.f is not None:
            self.f.close()


def bucket(value):
    return hash(value[0]) % BUCKETS


class Discard(SinkFunction):
    def invoke(self, value, context):
        pass


def processes() -> dict[str, float]:
    """RSS in MB of this process, Spark's JVM and the Python workers (summed)."""
    import psutil

    me = psutil.Process()
    out = {"driver_mb": me.memory_info().rss / 1e6, "jvm_mb": 0.0, "workers_mb": 0.0}
    for p in me.children(recursive=True):
        try:
            name, rss = p.name(), p.memory_info().rss / 1e6
        except psutil.Error:
            continue
        if name == "java":
            out["jvm_mb"] += rss
        elif name.startswith("python"):
            out["workers_mb"] += rss
    return out


def latencies(directory: str, lo_ns: int, hi_ns: int) -> list[float]:
    """Latency in ms of the sampled records that arrived in ``[lo_ns, hi_ns)``."""
    out: list[float] = []
    for path in glob.glob(os.path.join(directory, "latency-*.txt")):
        with open(path) as f:
            for line in f:
                parts = line.split()
                if len(parts) != 2:
                    continue
                arrived, created = int(parts[0]), int(parts[1])
                if lo_ns <= arrived < hi_ns:
                    out.append((arrived - created) / 1e6)
    return out


def pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def rnd(x: float | None) -> float | None:
    return None if x is None else round(x, 1)


def run_case(backend: str, keys_mode: str, args: argparse.Namespace, root: str) -> list[dict]:
    case_dir = os.path.join(root, f"{backend}-{keys_mode}")
    os.makedirs(case_dir)
    env = StreamExecutionEnvironment.get_execution_environment({
        "spark.master": "local[2]", "execution.runtime": "continuous", "execution.progress.interval": -1,
        "state.backend.type": backend, "state.backend.incremental": backend == "rocksdb",
        "state.checkpoints.dir": f"file://{case_dir}/checkpoints", "state.working.dir": f"{case_dir}/working",
        "spark.ui.enabled": "false",
    })
    env.set_parallelism(2)
    env.enable_checkpointing(int(args.interval * 1000))
    seconds = args.minutes * 60
    source = DataGeneratorSource(Users(None if keys_mode == "grow" else args.keys), count=int(args.rate * seconds * 2),
                                 rate_limit_per_second=args.rate)
    events = env.from_source(source, source_name="events").uid("events")
    events.key_by(lambda v: v[0]).process(CountPerUser()).uid("count").add_sink(LatencyFile(case_dir)).uid("latency")
    events.key_by(bucket).window(TumblingProcessingTimeWindows.of(Time.seconds(5))).reduce(lambda a, b: a).uid("window") \
        .add_sink(Discard()).uid("discard")
    client = env.execute_async(f"soak-{backend}-{keys_mode}")
    samples: list[dict] = []
    t0 = time.time()
    last_t, last_n = t0, 0
    try:
        while time.time() - t0 < seconds:
            time.sleep(args.sample)
            if client.is_done():
                client.wait(0)  # raises the job's error
                break
            now = time.time()
            n = client.progress().records_read
            done = [s for s in client.get_checkpoint_stats() if s.status == "COMPLETED"]
            recent = done[-max(1, int(args.sample / args.interval)):]
            lat = latencies(case_dir, int(last_t * 1e9), int(now * 1e9))
            sample = {
                "minute": round((now - t0) / 60, 2), "records_per_s": round((n - last_n) / (now - last_t)),
                **{k: round(v, 1) for k, v in processes().items()},
                "checkpoints": len(done),
                "checkpoint_s": round(statistics.mean(s.end_to_end_ms for s in recent) / 1000, 3) if recent else None,
                "checkpoint_max_s": round(max(s.end_to_end_ms for s in recent) / 1000, 3) if recent else None,
                "incremental_mb": round(statistics.mean(s.incremental_size for s in recent) / 1e6, 3) if recent else None,
                "state_mb": round(recent[-1].state_size / 1e6, 2) if recent else None,
                "latency_p50_ms": rnd(pct(lat, 0.5)), "latency_p99_ms": rnd(pct(lat, 0.99)),
            }
            samples.append(sample)
            print(f"  {backend}/{keys_mode} " + json.dumps(sample), flush=True)
            last_t, last_n = now, n
    finally:
        client.cancel()
        try:
            client.wait(60)
        except Exception:  # noqa: BLE001 - cancelled
            pass
    return samples


FIGURES = ("records_per_s", "driver_mb", "jvm_mb", "workers_mb", "checkpoint_s", "incremental_mb", "state_mb", "latency_p99_ms")


def growth(samples: list[dict], key: str, warmup_min: float) -> float | None:
    """Mean of the last 3 samples over the mean of the 3 after the warm-up, minus 1."""
    after = [s[key] for s in samples if s["minute"] >= warmup_min and s.get(key) is not None]
    if len(after) < 6:
        return None
    first, last = statistics.mean(after[:3]), statistics.mean(after[-3:])
    return None if first == 0 else last / first - 1


def plot(results: dict[str, list[dict]], path: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(4, 2, figsize=(12, 12), sharex=True)
    for ax, key in zip(axes.flat, FIGURES, strict=True):
        for case, samples in results.items():
            xs = [s["minute"] for s in samples if s.get(key) is not None]
            ys = [s[key] for s in samples if s.get(key) is not None]
            ax.plot(xs, ys, label=case)
        ax.set_title(key)
        ax.grid(True, alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
    axes.flat[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--minutes", type=float, default=60.0)
    ap.add_argument("--rate", type=int, default=3000, help="records/s offered")
    ap.add_argument("--backends", default="hashmap,rocksdb")
    ap.add_argument("--keys-modes", default="grow,full", help="grow: a new key per record; full: --keys keys")
    ap.add_argument("--keys", type=int, default=100_000)
    ap.add_argument("--interval", type=float, default=2.0, help="checkpoint interval, s")
    ap.add_argument("--sample", type=float, default=30.0, help="seconds between samples")
    ap.add_argument("--warmup", type=float, default=5.0, help="minutes before growth is measured")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="soak-")
    results: dict[str, list[dict]] = {}
    load_before = os.getloadavg()[0]
    for backend in args.backends.split(","):
        for keys_mode in args.keys_modes.split(","):
            print(f"{backend}, keys {keys_mode}: {args.minutes:g} min at {args.rate:,}/s", flush=True)
            results[f"{backend}/{keys_mode}"] = run_case(backend, keys_mode, args, root)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    base = os.path.join(HERE, "results", f"soak-{stamp}")
    with open(base + ".json", "w") as f:
        json.dump({"args": vars(args), "load_average": [load_before, os.getloadavg()[0]], "samples": results}, f, indent=1)
    print(f"\nlocal[2], parallelism 2, {args.rate:,} records/s offered, checkpoints every {args.interval:g} s; "
          f"load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    head = f"{'case':<18}" + "".join(f"{k:>16}" for k in FIGURES)
    print(head)
    for case, samples in results.items():
        if not samples:
            continue
        first = next((s for s in samples if s["minute"] >= args.warmup), samples[0])
        for label, s in (("after warm-up", first), ("last", samples[-1])):
            print(f"{case:<18}" + "".join(f"{'' if s.get(k) is None else s[k]:>16}" for k in FIGURES) + f"  ({label}, minute {s['minute']})")
        g = {k: growth(samples, k, args.warmup) for k in FIGURES}
        print(f"{'  growth':<18}" + "".join(f"{'' if v is None else f'{v:+.1%}':>16}" for v in g.values()))
    try:
        plot(results, base + ".png")
        print(f"plot: {base}.png")
    except ImportError as e:
        print(f"no plot ({e}): pip install matplotlib")
    print(f"samples: {base}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
