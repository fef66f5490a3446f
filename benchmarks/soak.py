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

Sources (``--source``): ``datagen`` (the default) is the in-process ``DataGeneratorSource``
above. ``kafka`` starts the embedded broker (Tansu, memory storage), creates a topic of 2
partitions per case, and produces to it from a thread of this process at ``--rate`` records/s
(every 10 ms the records due so far, round-robin over the partitions; value
``"<user>,<created_ns>"``, users chosen as for datagen); the job reads it unbounded from the
earliest offsets with ``KafkaSource`` and a ``map`` parses each value to the same
``(user, created_ns)``. A second thread, with its own consumer (own group, both partitions from
the latest offsets), keeps every 20th message's ``now - created`` as the broker's own delay.
Extra sample fields with Kafka: ``produced_per_s`` (what the producer thread wrote),
``producer_lag`` (records due but not yet produced at the sample; the producer fell behind when it
grows), ``broker_p50_ms``/``broker_p99_ms`` and ``broker_mb`` (the broker's RSS, not counted in
the workers). Records/s stays what the job read.

Output: a table per case on stdout, ``benchmarks/results/soak-<timestamp>.json`` with every
sample, and ``soak-<timestamp>.png`` (matplotlib) with one panel per figure. "growth after
warm-up" compares the mean of the last 3 samples with the mean of the 3 samples after
``--warmup`` minutes.

    python benchmarks/soak.py --minutes 60 [--rate 3000] [--backends hashmap,rocksdb]
        [--keys-modes grow,full] [--keys 100000] [--interval 2] [--sample 30] [--warmup 5]
        [--source datagen|kafka]

Needs ``pip install psutil matplotlib`` (the ``bench`` extra); ``--source kafka`` also needs
``pip install 'flowpoint[kafka]'`` (confluent-kafka and the Tansu broker).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flowpoint import (  # noqa: E402
    DataGeneratorSource,
    KafkaOffsetsInitializer,
    KafkaSource,
    KeyedProcessFunction,
    SimpleStringSchema,
    StreamExecutionEnvironment,
    Time,
    TumblingProcessingTimeWindows,
    ValueStateDescriptor,
)
from flowpoint.api.functions import SinkFunction  # noqa: E402

LATENCY_EVERY = 20
BUCKETS = 100
PARTITIONS = 2
TICK_S = 0.01


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


def parse(line: str) -> tuple[str, int]:
    """A Kafka value ``"<user>,<created_ns>"`` as the datagen source's ``(user, created_ns)``."""
    user, created = line.split(",")
    return user, int(created)


class KafkaProducerThread(threading.Thread):
    """Produces ``rate`` records/s to ``topic``: every ``TICK_S`` the records due so far, record
    ``i`` to partition ``i % PARTITIONS``, its value ``"<user>,<time.time_ns()>"``."""

    def __init__(self, bootstrap: str, topic: str, rate: int, users: Users):
        super().__init__(name="soak-producer", daemon=True)
        self.bootstrap, self.topic, self.rate, self.users = bootstrap, topic, rate, users
        self.produced = 0
        self.t0: float | None = None
        self.error: BaseException | None = None
        self.stopping = threading.Event()

    def due(self) -> int:
        return 0 if self.t0 is None else int((time.monotonic() - self.t0) * self.rate)

    def run(self) -> None:
        from confluent_kafka import Producer

        try:
            producer = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 1, "log_level": 2})
            self.t0 = next_tick = time.monotonic()
            i = 0
            while not self.stopping.is_set():
                due = self.due()
                while i < due and not self.stopping.is_set():
                    user, created_ns = self.users(i)  # created_ns: time.time_ns() now
                    try:
                        producer.produce(self.topic, value=f"{user},{created_ns}".encode(), partition=i % PARTITIONS)
                    except BufferError:
                        producer.poll(0.01)
                        continue
                    i += 1
                    self.produced = i
                producer.poll(0)
                next_tick += TICK_S
                delay = next_tick - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                else:
                    next_tick = time.monotonic()  # behind: the lag shows in producer_lag
            producer.flush(10)
        except BaseException as e:  # noqa: BLE001 - reported by the sampling loop
            self.error = e


class BrokerProbe(threading.Thread):
    """Its own consumer of ``topic`` (own group id, every partition from the latest offset):
    every ``LATENCY_EVERY``-th message's ``(arrival_ns, now - created in ms)``."""

    def __init__(self, bootstrap: str, topic: str):
        super().__init__(name="soak-broker-probe", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.lock = threading.Lock()
        self.samples: list[tuple[int, float]] = []
        self.error: BaseException | None = None
        self.ready = threading.Event()
        self.stopping = threading.Event()

    def run(self) -> None:
        from confluent_kafka import Consumer, TopicPartition

        try:
            # fetch.wait.max.ms 10: Tansu holds a fetch for up to this long even when records are
            # there (100 ms gave a p50 of ~28 ms, 10 ms ~4 ms, measured alone); poll(), not
            # consume(n, timeout), which waits for n messages or the timeout
            c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"soak-probe-{uuid.uuid4().hex[:8]}",
                          "enable.auto.commit": False, "fetch.wait.max.ms": 10, "log_level": 2})
            try:
                # the latest offsets, resolved now (OFFSET_END would resolve at the first fetch)
                ends = [c.get_watermark_offsets(TopicPartition(self.topic, p), timeout=10, cached=False)[1]
                        for p in range(PARTITIONS)]
                c.assign([TopicPartition(self.topic, p, end) for p, end in enumerate(ends)])
                self.ready.set()
                n = 0
                while not self.stopping.is_set():
                    m = c.poll(0.1)
                    if m is None or m.error():
                        continue
                    n += 1
                    if n % LATENCY_EVERY == 0:
                        now = time.time_ns()
                        created = int(m.value().split(b",")[1])
                        with self.lock:
                            self.samples.append((now, (now - created) / 1e6))
            finally:
                c.close()
        except BaseException as e:  # noqa: BLE001 - reported by the sampling loop
            self.error = e
            self.ready.set()

    def take(self, hi_ns: int) -> list[float]:
        """The delays (ms) of the messages that arrived before ``hi_ns``, removed from the list."""
        with self.lock:
            k = next((j for j, (a, _) in enumerate(self.samples) if a >= hi_ns), len(self.samples))
            out = [d for _, d in self.samples[:k]]
            del self.samples[:k]
        return out


def delete_topic(bootstrap: str, topic: str) -> None:
    """Best effort: the broker keeps every record in memory, and deleting the topic frees them
    (measured: 300,000 records took 14.5 MB of the broker's RSS, 12.3 MB came back), so the next
    case starts from an empty broker."""
    from confluent_kafka.admin import AdminClient

    try:
        admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
        for f in admin.delete_topics([topic]).values():
            f.result(30)
    except Exception as e:  # noqa: BLE001 - the case's samples are taken
        print(f"  could not delete topic {topic} ({e})", flush=True)


def rss_mb(pid: int | None) -> float | None:
    import psutil

    try:
        return None if pid is None else psutil.Process(pid).memory_info().rss / 1e6
    except psutil.Error:
        return None


def processes(exclude: frozenset[int] = frozenset()) -> dict[str, float]:
    """RSS in MB of this process, Spark's JVM and the Python workers (summed); processes whose pid
    is in ``exclude`` (the embedded Kafka broker, also a child of this process) are left out."""
    import psutil

    me = psutil.Process()
    out = {"driver_mb": me.memory_info().rss / 1e6, "jvm_mb": 0.0, "workers_mb": 0.0}
    for p in me.children(recursive=True):
        if p.pid in exclude:
            continue
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


def run_case(backend: str, keys_mode: str, args: argparse.Namespace, root: str, broker=None) -> list[dict]:
    """One case; ``broker`` (a started ``EmbeddedKafka``) when ``args.source == "kafka"``."""
    case_dir = os.path.join(root, f"{backend}-{keys_mode}-{args.source}")
    os.makedirs(case_dir)
    env = StreamExecutionEnvironment.get_execution_environment({
        "spark.master": "local[2]", "execution.runtime": "continuous", "execution.progress.interval": -1,
        "state.backend.type": backend, "state.backend.incremental": backend == "rocksdb",
        "state.backend.changelog.enabled": bool(args.changelog and backend == "rocksdb"),
        "state.backend.changelog.periodic-materialize.interval": int(getattr(args, "materialize_minutes", 10.0) * 60_000),
        "state.checkpoints.dir": f"file://{case_dir}/checkpoints", "state.working.dir": f"{case_dir}/working",
        "spark.ui.enabled": "false",
    })
    env.set_parallelism(2)
    env.enable_checkpointing(int(args.interval * 1000))
    seconds = args.minutes * 60
    users = Users(None if keys_mode == "grow" else args.keys)
    producer = probe = None
    if args.source == "kafka":
        bootstrap = broker.bootstrap_servers
        topic = f"soak-{backend}-{keys_mode}-{uuid.uuid4().hex[:6]}"
        broker.create_topic(topic, PARTITIONS)
        source = (KafkaSource.builder().set_bootstrap_servers(bootstrap).set_topics(topic)
                  .set_starting_offsets(KafkaOffsetsInitializer.earliest())
                  .set_value_only_deserializer(SimpleStringSchema()).build())
        events = env.from_source(source, source_name="events").uid("events").map(parse).uid("parse")
        producer = KafkaProducerThread(bootstrap, topic, args.rate, users)
        probe = BrokerProbe(bootstrap, topic)
    else:
        source = DataGeneratorSource(users, count=int(args.rate * seconds * 2), rate_limit_per_second=args.rate)
        events = env.from_source(source, source_name="events").uid("events")
    events.key_by(lambda v: v[0]).process(CountPerUser()).uid("count").add_sink(LatencyFile(case_dir)).uid("latency")
    events.key_by(bucket).window(TumblingProcessingTimeWindows.of(Time.seconds(5))).reduce(lambda a, b: a).uid("window") \
        .add_sink(Discard()).uid("discard")
    client = env.execute_async(f"soak-{backend}-{keys_mode}-{args.source}")
    label = f"{backend}/{keys_mode}/{args.source}"
    samples: list[dict] = []
    exclude = frozenset() if broker is None else frozenset({broker.pid})
    try:
        if probe is not None:
            probe.start()
            if not probe.ready.wait(30):
                print(f"  {label}: the broker probe's consumer was not assigned within 30 s", flush=True)
            producer.start()
        t0 = time.time()
        last_t, last_n, last_produced = t0, 0, 0
        while time.time() - t0 < seconds:
            time.sleep(args.sample)
            if client.is_done():
                client.wait(0)  # raises the job's error
                break
            for thread in (producer, probe):
                if thread is not None and thread.error is not None:
                    msg = f"{thread.name} failed: {thread.error!r}"
                    raise RuntimeError(msg) from thread.error
            now = time.time()
            n = client.progress().records_read
            done = [s for s in client.get_checkpoint_stats() if s.status == "COMPLETED"]
            recent = done[-max(1, int(args.sample / args.interval)):]
            lat = latencies(case_dir, int(last_t * 1e9), int(now * 1e9))
            sample = {
                "minute": round((now - t0) / 60, 2), "records_per_s": round((n - last_n) / (now - last_t)),
                **{k: round(v, 1) for k, v in processes(exclude).items()},
                "checkpoints": len(done),
                "checkpoint_s": round(statistics.mean(s.end_to_end_ms for s in recent) / 1000, 3) if recent else None,
                "checkpoint_max_s": round(max(s.end_to_end_ms for s in recent) / 1000, 3) if recent else None,
                "incremental_mb": round(statistics.mean(s.incremental_size for s in recent) / 1e6, 3) if recent else None,
                "state_mb": round(recent[-1].state_size / 1e6, 2) if recent else None,
                "latency_p50_ms": rnd(pct(lat, 0.5)), "latency_p99_ms": rnd(pct(lat, 0.99)),
            }
            if producer is not None:
                produced = producer.produced
                broker_lat = probe.take(int(now * 1e9))
                sample.update({
                    "produced_per_s": round((produced - last_produced) / (now - last_t)),
                    "producer_lag": max(0, producer.due() - produced),
                    "broker_p50_ms": rnd(pct(broker_lat, 0.5)), "broker_p99_ms": rnd(pct(broker_lat, 0.99)),
                    "broker_mb": rnd(rss_mb(broker.pid)),
                })
                last_produced = produced
                if sample["producer_lag"] > args.rate:
                    print(f"  {label}: the producer is {sample['producer_lag']:,} records behind its rate", flush=True)
            samples.append(sample)
            print(f"  {label} " + json.dumps(sample), flush=True)
            last_t, last_n = now, n
    finally:
        for thread in (producer, probe):
            if thread is not None:
                thread.stopping.set()
        client.cancel()
        try:
            client.wait(60)
        except Exception:  # noqa: BLE001 - cancelled
            pass
        for thread in (producer, probe):
            if thread is not None and thread.is_alive():
                thread.join(15)
        if args.source == "kafka":
            delete_topic(broker.bootstrap_servers, topic)
    return samples


FIGURES = ("records_per_s", "driver_mb", "jvm_mb", "workers_mb", "checkpoint_s", "incremental_mb", "state_mb", "latency_p99_ms")
KAFKA_FIGURES = ("produced_per_s", "broker_mb", "broker_p99_ms")


def growth(samples: list[dict], key: str, warmup_min: float) -> float | None:
    """Mean of the last 3 samples over the mean of the 3 after the warm-up, minus 1."""
    after = [s[key] for s in samples if s["minute"] >= warmup_min and s.get(key) is not None]
    if len(after) < 6:
        return None
    first, last = statistics.mean(after[:3]), statistics.mean(after[-3:])
    return None if first == 0 else last / first - 1


def plot(results: dict[str, list[dict]], path: str, figures: tuple[str, ...] = FIGURES) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = (len(figures) + 1) // 2
    fig, axes = plt.subplots(rows, 2, figsize=(12, 3 * rows), sharex=True)
    if len(figures) % 2:
        axes.flat[-1].set_visible(False)
        axes.flat[-3].set_xlabel("minutes")
        axes.flat[-3].xaxis.set_tick_params(labelbottom=True)
    for ax, key in zip(axes.flat, figures, strict=False):
        for case, samples in results.items():
            xs = [s["minute"] for s in samples if s.get(key) is not None]
            ys = [s[key] for s in samples if s.get(key) is not None]
            ax.plot(xs, ys, label=case)
        ax.set_title(key)
        ax.grid(True, alpha=0.3)
    for ax in axes[-1]:
        ax.set_xlabel("minutes")
        ax.xaxis.set_tick_params(labelbottom=True)
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
    ap.add_argument("--source", choices=("datagen", "kafka"), default="datagen",
                    help="datagen: in-process source; kafka: a topic on the embedded broker, produced to by a thread")
    ap.add_argument("--changelog", action="store_true",
                    help="RocksDB with the changelog (state.backend.changelog.enabled): checkpoints upload the changes since the last one")
    ap.add_argument("--materialize-minutes", type=float, default=10.0,
                    help="with --changelog: state.backend.changelog.periodic-materialize.interval, in minutes")
    args = ap.parse_args()
    root = tempfile.mkdtemp(prefix="soak-")
    results: dict[str, list[dict]] = {}
    figures = FIGURES + (KAFKA_FIGURES if args.source == "kafka" else ())
    load_before = os.getloadavg()[0]
    broker = None
    try:
        if args.source == "kafka":
            import signal

            from flowpoint.connectors.kafka import EmbeddedKafka

            # the broker runs in its own session: SIGTERM (``timeout``) must reach the finally below
            signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

            broker = EmbeddedKafka()
            print(f"embedded Kafka broker at {broker.start()} (pid {broker.pid}, memory storage)", flush=True)
        for backend in args.backends.split(","):
            for keys_mode in args.keys_modes.split(","):
                print(f"{backend}, keys {keys_mode}, source {args.source}: {args.minutes:g} min at {args.rate:,}/s", flush=True)
                label = backend + ("+changelog" if args.changelog and backend == "rocksdb" else "")
                results[f"{label}/{keys_mode}/{args.source}"] = run_case(backend, keys_mode, args, root, broker)
    finally:
        if broker is not None:
            broker.stop()
    stamp = time.strftime("%Y%m%d-%H%M%S")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    cases = "-".join(k.replace("/", "-").replace("+", "-") for k in results) or "none"
    base = os.path.join(HERE, "results", f"soak-{stamp}-{cases}")  # (two runs at once: different names)
    with open(base + ".json", "w") as f:
        json.dump({"args": vars(args), "source": args.source, "load_average": [load_before, os.getloadavg()[0]],
                   "samples": results}, f, indent=1)
    print(f"\nlocal[2], parallelism 2, {args.rate:,} records/s offered, source {args.source}, checkpoints every "
          f"{args.interval:g} s; load average {load_before:.1f} before, {os.getloadavg()[0]:.1f} after")
    head = f"{'case':<22}" + "".join(f"{k:>16}" for k in figures)
    print(head)
    for case, samples in results.items():
        if not samples:
            continue
        first = next((s for s in samples if s["minute"] >= args.warmup), samples[0])
        for label, s in (("after warm-up", first), ("last", samples[-1])):
            print(f"{case:<22}" + "".join(f"{'' if s.get(k) is None else s[k]:>16}" for k in figures) + f"  ({label}, minute {s['minute']})")
        g = {k: growth(samples, k, args.warmup) for k in figures}
        print(f"{'  growth':<22}" + "".join(f"{'' if v is None else f'{v:+.1%}':>16}" for v in g.values()))
    try:
        plot(results, base + ".png", figures)
        print(f"plot: {base}.png")
    except ImportError as e:
        print(f"no plot ({e}): pip install matplotlib")
    print(f"samples: {base}.json")
    return 0


if __name__ == "__main__":
    sys.exit(main())
