"""End-to-end latency of a per-key count, next to the embedded broker's own delay (issue 18).

Three cases, each on the epoch runtime and, once it exists, the continuous one
(``execution.runtime: continuous``), in one run:

* **kafka**: a producer thread feeds the input topic of the embedded broker (Tansu, memory
  storage, on loopback; stopped by its pid) at a steady rate. Each record is ``seq,key,created_ns``
  (``created_ns``: ``time.time_ns()`` just before ``produce``; 100 keys). The job reads it with an
  unbounded ``KafkaSource``, counts per key (``key_by(...).process(...)``, a ``ValueState``) and
  writes ``LAT,key,count,seq,created_ns`` to a ``KafkaSink`` (``AT_LEAST_ONCE``); a consumer
  thread reads the output topic: latency = consume time - ``created_ns``. In the same run a second
  consumer reads the *input* topic directly: the broker's own produce-to-consume delay
  ("broker only"), with the same client settings as flowpoint's reader (``fetch.wait.max.ms`` 10).
* **print**: the same job with ``.print()`` instead of the Kafka sink; latency is taken when the
  job's stdout line reaches this process (the job runs with ``PYTHONUNBUFFERED=1``), with the
  broker-only consumer alongside.
* **generator**: no broker. A source in this file (``PacedSource``) whose split advances with the
  wall clock: record ``i`` is due at ``t0 + i / rate``; the reader sleeps until a record is due
  if it is early and stamps it with ``time.time_ns()`` when it produces it. The job counts per key
  and prints; two latencies are reported: from the due time (what a record arriving on a socket
  at that moment would see: includes waiting for the next read) and from the read stamp (the
  pipeline after the source). Rates 1,000 and 10,000 records/s by default.

Every job runs as a subprocess of this script (``latency.py --job <spec>``: ``local[2]``,
parallelism 2), which is stopped by closing its stdin (it cancels the job). A case measures the
records created in a window of ``--seconds`` that opens ``--warmup`` seconds after the job's
first output (the first epoch pays Spark's and the Python workers' start-up); the producer keeps
going until the window's records had time to arrive (``--drain`` seconds at most). Reported:
count, records of the window never seen ("missing"), p50/p90/p99/max in ms. "flowpoint share" is
a difference of percentiles (flowpoint's p50 minus the broker's p50, and so on), not a
percentile of per-record differences. The jobs print a progress line per epoch to their stderr
(kept in a log file per job); the script reports the epochs' median and p90 duration.

The continuous runtime is selected with ``execution.runtime: continuous`` and
``execution.buffer-timeout`` (``--buffer-timeout`` ms), with ``config.strict`` on: where
flowpoint does not know these keys yet, its rows say "not available: <the error>" and the epoch
rows still run.

    python benchmarks/latency.py [--runtime epoch|continuous|both] [--spark classic|connect|both] [--rate 200] [--seconds 20]
        [--case kafka|print|generator|all] [--buffer-timeout 5] [--generator-rates 1000,10000]

Results: a table on stdout and ``benchmarks/results/latency-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from flowpoint import (  # noqa: E402
    DeliveryGuarantee,
    KafkaOffsetsInitializer,
    KafkaRecordSerializationSchema,
    KafkaSink,
    KafkaSource,
    KeyedProcessFunction,
    SimpleStringSchema,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from flowpoint.connectors.source import Source, SourceReader, SourceSplit, SplitPlan  # noqa: E402

KEYS = 100
PARTITIONS = 2
MARK = "LAT,"  # output lines: LAT,key,count,seq,created_ns[,read_ns]
RUNTIME_KEY = "execution.runtime"
BUFFER_TIMEOUT_KEY = "execution.buffer-timeout"
# both consumers (broker only, flowpoint's output) and flowpoint's own reader wait at most this
# long for a fetch the broker holds open
EPOCH_LINE = re.compile(r"\] epoch \d+: [\d,]+ records in ([\d.]+) s")
CONSUMER_CONFIG = {"fetch.wait.max.ms": 10, "enable.auto.commit": False, "log_level": 2}


# -- the job (runs in a subprocess) ----------------------------------------------------------


class CountPerKey(KeyedProcessFunction):
    """``(key, seq, created_ns[, read_ns])`` -> ``LAT,key,count,seq,created_ns[,read_ns]``."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield MARK + ",".join(map(str, (value[0], n, *value[1:])))


def parse_input(line: str) -> tuple[str, int, int]:
    seq, key, created = line.split(",")
    return key, int(seq), int(created)


class _PacedReader(SourceReader):
    def __init__(self, rate: float, t0_ns: int):
        self.rate, self.t0_ns = rate, t0_ns

    def read(self, split: SourceSplit, spec: Any) -> Iterator[list]:
        start, end = spec
        batch: list = []
        for i in range(start, end):
            due = self.t0_ns + int(i * 1e9 / self.rate)
            now = time.time_ns()
            if due > now:  # early: hand over what is due, then wait for this one
                if batch:
                    yield batch
                    batch = []
                time.sleep((due - now) / 1e9)
            batch.append((f"k{i % KEYS}", i, due, time.time_ns()))
            if len(batch) >= 1000:
                yield batch
                batch = []
        if batch:
            yield batch


class PacedSource(Source):
    """An unbounded generator driven by the wall clock: record ``i`` is due at
    ``t0_ns + i / rate``; an epoch reads the records due by the time it is planned. Records are
    ``(key, i, due_ns, read_ns)``, ``read_ns`` stamped by the reader as it produces them."""

    def __init__(self, rate: float, t0_ns: int):
        self.rate, self.t0_ns = rate, t0_ns

    def is_parallel(self) -> bool:
        return False

    def is_bounded(self) -> bool:
        return False

    def create_splits(self, parallelism: int) -> list[SourceSplit]:
        return [SourceSplit("paced-0", None, 0)]

    def plan(self, split: SourceSplit, position: int, budget: int, elapsed_s: float) -> SplitPlan:
        due = int((time.time_ns() - self.t0_ns) * self.rate / 1e9) + 1
        end = min(position + budget, max(position, due))
        return SplitPlan(end, end - position, False)

    def create_reader(self) -> SourceReader:
        return _PacedReader(self.rate, self.t0_ns)

    def default_name(self) -> str:
        return "Paced Generator"


def runtime_settings(runtime: str, buffer_timeout_ms: int, spark_mode: str = "classic") -> dict[str, Any]:
    """The configuration of a job on ``runtime``; ``config.strict`` makes an unknown key an
    error instead of a warning, so a continuous row never silently runs the epoch runtime.
    ``spark_mode`` connect: the job's session is a Spark Connect one (``spark.api.mode=connect``:
    PySpark starts a Connect server for ``local[2]`` in the job's process)."""
    settings: dict[str, Any] = {"config.strict": True, "spark.master": "local[2]", "parallelism.default": 2,
                                "execution.progress.interval": 0, "spark.ui.enabled": "false"}
    if spark_mode == "connect":
        settings["spark.api.mode"] = "connect"
    if runtime == "continuous":
        settings[RUNTIME_KEY] = "continuous"
        settings[BUFFER_TIMEOUT_KEY] = f"{buffer_timeout_ms} ms"
    return settings


def runtime_unavailable(runtime: str, buffer_timeout_ms: int) -> str | None:  # (either Spark mode)
    """Why ``runtime`` cannot be selected in this flowpoint (None: it can)."""
    from flowpoint.api.config import Configuration
    from flowpoint.errors import FlowpointError

    try:
        Configuration(runtime_settings(runtime, buffer_timeout_ms))
    except FlowpointError as e:
        return str(e)
    return None


def job_main(spec: dict) -> int:
    settings = runtime_settings(spec["runtime"], spec["buffer_timeout_ms"], spec.get("spark", "classic"))
    runtime_keys = {k: settings.pop(k) for k in (RUNTIME_KEY, BUFFER_TIMEOUT_KEY) if k in settings}
    env = StreamExecutionEnvironment.get_execution_environment(settings)
    for k, v in runtime_keys.items():  # as a user selects the runtime
        env.get_configuration().set_string(k, v)
    if spec["case"] == "generator":
        stream = env.from_source(PacedSource(spec["rate"], time.time_ns() + 2_000_000_000), source_name="paced").uid("paced")
    else:
        source = (KafkaSource.builder().set_bootstrap_servers(spec["bootstrap"]).set_topics(spec["input_topic"])
                  .set_group_id(f"latency-{uuid.uuid4().hex[:6]}")
                  .set_starting_offsets(KafkaOffsetsInitializer.earliest())
                  .set_value_only_deserializer(SimpleStringSchema()).build())
        stream = (env.from_source(source, WatermarkStrategy.no_watermarks(), "input").uid("input")
                  .map(parse_input))
    counts = stream.key_by(lambda r: r[0]).process(CountPerKey(), output_type=Types.STRING()).uid("count")
    if spec["case"] == "kafka":
        sink = (KafkaSink.builder().set_bootstrap_servers(spec["bootstrap"])
                .set_record_serializer(KafkaRecordSerializationSchema.builder().set_topic(spec["output_topic"])
                                       .set_value_serialization_schema(SimpleStringSchema()).build())
                .set_delivery_guarantee(DeliveryGuarantee.AT_LEAST_ONCE).build())
        counts.sink_to(sink).uid("sink")
    else:
        counts.print().uid("print")
    client = env.execute_async(f"latency-{spec['case']}-{spec['runtime']}")
    print(f"job {client.get_job_id()} started", file=sys.stderr, flush=True)
    sys.stdin.read()  # the benchmark closes our stdin to stop the job
    client.cancel()
    try:
        client.wait(60)
    except Exception as e:  # noqa: BLE001 - cancelled (JobCancelledError) is the expected end
        print(f"job ended: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
    return 0


# -- measuring -------------------------------------------------------------------------------


class Arrivals:
    """First arrival (ns) of each record by ``seq``, with its creation stamps."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.first: dict[int, tuple[int, int, int | None]] = {}  # seq -> (arrived, created, read)
        self.first_seen: float | None = None  # time.time() of the first arrival
        self.lines = 0

    def add(self, seq: int, created_ns: int, arrived_ns: int, read_ns: int | None = None) -> None:
        with self.lock:
            self.lines += 1
            if self.first_seen is None:
                self.first_seen = time.time()
            if seq not in self.first:
                self.first[seq] = (arrived_ns, created_ns, read_ns)

    def add_line(self, line: str, arrived_ns: int) -> None:
        at = line.find(MARK)
        if at < 0:
            return
        parts = line[at + len(MARK):].strip().split(",")
        self.add(int(parts[2]), int(parts[3]), arrived_ns, int(parts[4]) if len(parts) > 4 else None)

    def latencies_ms(self, lo_ns: int, hi_ns: int, from_read: bool = False) -> list[float]:
        with self.lock:
            rows = list(self.first.values())
        out = []
        for arrived, created, read in rows:
            if lo_ns <= created < hi_ns:
                origin = read if from_read else created
                out.append((arrived - origin) / 1e6)
        return out


@dataclass
class Stats:
    count: int
    missing: int
    p50: float | None = None
    p90: float | None = None
    p99: float | None = None
    max: float | None = None

    @staticmethod
    def of(latencies_ms: list[float], expected: int) -> Stats:
        import numpy as np

        s = Stats(len(latencies_ms), max(0, expected - len(latencies_ms)))
        if latencies_ms:
            a = np.asarray(latencies_ms)
            s.p50, s.p90, s.p99 = (float(x) for x in np.percentile(a, [50, 90, 99]))
            s.max = float(a.max())
        return s

    def minus(self, other: Stats) -> Stats:
        """Percentile by percentile (not a percentile of per-record differences)."""
        def d(a: float | None, b: float | None) -> float | None:
            return None if a is None or b is None else a - b
        return Stats(self.count, self.missing, d(self.p50, other.p50), d(self.p90, other.p90),
                     d(self.p99, other.p99), d(self.max, other.max))


@dataclass
class Row:
    runtime: str
    case: str
    rate: int
    measured: str
    stats: Stats | None = None
    note: str = ""
    extra: dict = field(default_factory=dict)


# -- the broker side -------------------------------------------------------------------------


class Producer(threading.Thread):
    """``seq,key,created_ns`` to ``topic`` at ``rate`` records/s; ``created`` keeps each seq's stamp."""

    def __init__(self, bootstrap: str, topic: str, rate: float):
        super().__init__(daemon=True, name="producer")
        self.bootstrap, self.topic, self.rate = bootstrap, topic, rate
        self.stop = threading.Event()
        self.created: dict[int, int] = {}
        self.late_sends = 0  # records sent more than 10 ms after their due time (the producer lagged)

    def run(self) -> None:
        from confluent_kafka import Producer as KafkaProducer

        p = KafkaProducer({"bootstrap.servers": self.bootstrap, "linger.ms": 0, "log_level": 2})
        t0 = time.perf_counter()
        seq = 0
        while not self.stop.is_set():
            due = t0 + seq / self.rate
            wait = due - time.perf_counter()
            if wait > 0:
                time.sleep(wait)
            elif wait < -0.01:
                self.late_sends += 1
            created = time.time_ns()
            value = f"{seq},k{seq % KEYS},{created}".encode()
            while True:
                try:
                    p.produce(self.topic, value=value, partition=seq % PARTITIONS)
                    break
                except BufferError:
                    p.poll(0.01)
            p.poll(0)
            self.created[seq] = created
            seq += 1
        p.flush(10)

    def expected(self, lo_ns: int, hi_ns: int) -> int:
        return sum(1 for c in list(self.created.values()) if lo_ns <= c < hi_ns)


class TopicReader(threading.Thread):
    """Reads ``topic`` from the beginning; every record's first arrival goes to ``arrivals``.
    ``output``: records are the job's ``LAT,...`` lines, else the producer's ``seq,key,created``."""

    def __init__(self, bootstrap: str, topic: str, output: bool):
        super().__init__(daemon=True, name=f"reader-{topic}")
        self.bootstrap, self.topic, self.output = bootstrap, topic, output
        self.arrivals = Arrivals()
        self.stop = threading.Event()
        self.ready = threading.Event()

    def run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"latency-{uuid.uuid4().hex[:8]}",
                      **CONSUMER_CONFIG})
        c.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        self.ready.set()
        try:
            while not self.stop.is_set():
                # poll returns at the first record; consume(n, timeout) would wait for n of them
                first = c.poll(0.05)
                arrived = time.time_ns()
                if first is None:
                    continue
                for m in [first, *c.consume(num_messages=1000, timeout=0)]:
                    if m.error():
                        continue
                    line = m.value().decode()
                    if self.output:
                        self.arrivals.add_line(line, arrived)
                    else:
                        seq, _key, created = line.split(",")
                        self.arrivals.add(int(seq), int(created), arrived)
        finally:
            c.close()


def create_topics(bootstrap: str, *topics: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "log_level": 2})
    for f in admin.create_topics([NewTopic(t, num_partitions=PARTITIONS, replication_factor=1) for t in topics]).values():
        f.result(30)


# -- one case --------------------------------------------------------------------------------


class JobProcess:
    """``latency.py --job spec`` as a subprocess; stdout lines with ``LAT,`` go to ``arrivals``
    stamped as they arrive; stderr to a log file."""

    def __init__(self, spec: dict, workdir: str):
        self.arrivals = Arrivals()
        self.started = time.time()
        self.log_path = os.path.join(workdir, f"job-{spec['case']}-{spec['runtime']}-{spec['rate']}.log")
        self._log = open(self.log_path, "wb")
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--job", json.dumps(spec)],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, env=env)
        self._reader = threading.Thread(target=self._read, daemon=True, name="job-stdout")
        self._reader.start()

    def _read(self) -> None:
        for raw in iter(self.proc.stdout.readline, b""):
            arrived = time.time_ns()
            self.arrivals.add_line(raw.decode(errors="replace"), arrived)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(90)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
        self._reader.join(5)
        self._log.close()

    def epoch_seconds(self) -> list[float]:
        """Durations of the job's epochs, from its progress lines (``epoch N: R records in S s``)."""
        with open(self.log_path, errors="replace") as f:
            return [float(m.group(1)) for m in map(EPOCH_LINE.search, f) if m]

    def log_tail(self, n: int = 15) -> str:
        with open(self.log_path, errors="replace") as f:
            return "".join(f.readlines()[-n:])


def wait_first_output(arrivals: Arrivals, job: JobProcess, timeout_s: float = 240.0) -> float:
    deadline = time.time() + timeout_s
    while arrivals.first_seen is None:
        if not job.alive():
            msg = f"the job exited with code {job.proc.returncode} before any output; its log:\n{job.log_tail()}"
            raise RuntimeError(msg)
        if time.time() > deadline:
            msg = f"no output from the job within {timeout_s:.0f} s; its log:\n{job.log_tail()}"
            raise RuntimeError(msg)
        time.sleep(0.05)
    return arrivals.first_seen


def wait_window(arrivals: Arrivals, expected: Any, lo_ns: int, hi_ns: int, drain_s: float) -> None:
    """Until every record created in [lo_ns, hi_ns) arrived, or ``drain_s`` after ``hi_ns``."""
    while time.time_ns() < hi_ns:
        time.sleep(0.1)
    deadline = time.time() + drain_s
    while time.time() < deadline:
        if len(arrivals.latencies_ms(lo_ns, hi_ns)) >= expected():
            return
        time.sleep(0.1)


def epochs_summary(job: JobProcess) -> dict:
    """Median and p90 epoch duration after the first two epochs (start-up), for the report."""
    import numpy as np

    seconds = job.epoch_seconds()[2:]
    if not seconds:
        return {}
    p50, p90 = (float(x) for x in np.percentile(seconds, [50, 90]))
    return {"epochs": len(seconds), "epoch_s_p50": p50, "epoch_s_p90": p90}


def run_broker_case(case: str, runtime: str, args: argparse.Namespace, bootstrap: str, workdir: str) -> list[Row]:
    tag = uuid.uuid4().hex[:6]
    in_topic, out_topic = f"lat-in-{case}-{runtime}-{tag}", f"lat-out-{case}-{runtime}-{tag}"
    create_topics(bootstrap, in_topic, out_topic)
    broker_only = TopicReader(bootstrap, in_topic, output=False)
    output = TopicReader(bootstrap, out_topic, output=True) if case == "kafka" else None
    for r in (broker_only, output):
        if r is not None:
            r.start()
            r.ready.wait(10)
    spec = {"case": case, "runtime": runtime, "rate": args.rate, "buffer_timeout_ms": args.buffer_timeout, "spark": args.spark_mode,
            "bootstrap": bootstrap, "input_topic": in_topic, "output_topic": out_topic}
    job = JobProcess(spec, workdir)
    producer = Producer(bootstrap, in_topic, args.rate)
    producer.start()
    arrivals = output.arrivals if output is not None else job.arrivals
    try:
        first = wait_first_output(arrivals, job)
        lo = int((first + args.warmup) * 1e9)
        hi = lo + int(args.seconds * 1e9)
        print(f"  {case}/{runtime}: first output {first - job.started:.1f} s after start; measuring {args.seconds:.0f} s",
              flush=True)
        wait_window(arrivals, lambda: producer.expected(lo, hi), lo, hi, args.drain)
        wait_window(broker_only.arrivals, lambda: producer.expected(lo, hi), lo, hi, 2.0)
    finally:
        producer.stop.set()
        producer.join(15)
        job.stop()
        for r in (broker_only, output):
            if r is not None:
                r.stop.set()
                r.join(10)
    expected = producer.expected(lo, hi)
    fp = Stats.of(arrivals.latencies_ms(lo, hi), expected)
    broker = Stats.of(broker_only.arrivals.latencies_ms(lo, hi), expected)
    extra = {"producer_late_sends": producer.late_sends, "job_log": job.log_path, **epochs_summary(job)}
    sink = "Kafka sink (AT_LEAST_ONCE)" if case == "kafka" else "print (stdout)"
    return [Row(runtime, case, args.rate, f"end to end, {sink}", fp, extra=extra),
            Row(runtime, case, args.rate, "broker only (input topic)", broker),
            Row(runtime, case, args.rate, "flowpoint share (p - p)", fp.minus(broker))]


def run_generator_case(runtime: str, rate: int, args: argparse.Namespace, workdir: str) -> list[Row]:
    spec = {"case": "generator", "runtime": runtime, "rate": rate, "buffer_timeout_ms": args.buffer_timeout, "spark": args.spark_mode}
    job = JobProcess(spec, workdir)
    try:
        first = wait_first_output(job.arrivals, job)
        lo = int((first + args.warmup) * 1e9)
        hi = lo + int(args.seconds * 1e9)
        print(f"  generator/{runtime} at {rate:,}/s: first output {first - job.started:.1f} s after start; "
              f"measuring {args.seconds:.0f} s", flush=True)
        expected = int((hi - lo) * rate / 1e9)
        wait_window(job.arrivals, lambda: expected, lo, hi, args.drain)
    finally:
        job.stop()
    due = Stats.of(job.arrivals.latencies_ms(lo, hi), expected)
    read = Stats.of(job.arrivals.latencies_ms(lo, hi, from_read=True), expected)
    return [Row(runtime, "generator", rate, "end to end from due time, print", due, extra={"job_log": job.log_path, **epochs_summary(job)}),
            Row(runtime, "generator", rate, "from the reader's stamp, print", read)]


# -- main ------------------------------------------------------------------------------------


def fmt(x: float | None) -> str:
    return "" if x is None else f"{x:,.1f}"


def print_table(rows: list[Row]) -> None:
    head = f"{'runtime':<20}{'case':<10}{'rate/s':>8}  {'measured':<38}{'count':>7}{'missing':>8}" \
           f"{'p50 ms':>9}{'p90 ms':>9}{'p99 ms':>9}{'max ms':>9}"
    print(head)
    print("-" * len(head))
    for r in rows:
        start = f"{r.runtime:<20}{r.case:<10}{r.rate:>8,}  "
        if r.stats is None:
            print(start + r.note)
            continue
        s = r.stats
        print(start + f"{r.measured:<38}{s.count:>7,}{s.missing:>8,}{fmt(s.p50):>9}{fmt(s.p90):>9}"
              f"{fmt(s.p99):>9}{fmt(s.max):>9}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runtime", choices=("epoch", "continuous", "both"), default="both")
    parser.add_argument("--case", choices=("kafka", "print", "generator", "all"), default="all")
    parser.add_argument("--rate", type=int, default=200, help="records/s into the input topic (kafka, print)")
    parser.add_argument("--generator-rates", default="1000,10000", help="records/s of the generator case, comma-separated")
    parser.add_argument("--seconds", type=float, default=20.0, help="measured window of each case")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds after the job's first output before the window opens")
    parser.add_argument("--drain", type=float, default=20.0, help="seconds after the window to wait for its last records")
    parser.add_argument("--buffer-timeout", type=int, default=5, help="execution.buffer-timeout of the continuous runtime, ms")
    parser.add_argument("--spark", choices=("classic", "connect", "both"), default="classic",
                        help="the jobs' Spark session: classic, Spark Connect (spark.api.mode=connect), or each in turn")
    parser.add_argument("--bootstrap-servers", help="an existing broker instead of the embedded one")
    parser.add_argument("--job", help=argparse.SUPPRESS)  # internal: run one job (a JSON spec)
    args = parser.parse_args()
    if args.job:
        return job_main(json.loads(args.job))

    runtimes = ["epoch", "continuous"] if args.runtime == "both" else [args.runtime]
    cases = ["kafka", "print", "generator"] if args.case == "all" else [args.case]
    gen_rates = [int(x) for x in args.generator_rates.split(",") if x.strip()]
    workdir = tempfile.mkdtemp(prefix="latency-bench-")
    rows: list[Row] = []
    broker = None
    started = time.strftime("%Y-%m-%dT%H:%M:%S")
    load_before = os.getloadavg()
    try:
        bootstrap = args.bootstrap_servers
        unavailable = {rt: runtime_unavailable(rt, args.buffer_timeout) for rt in runtimes}
        if bootstrap is None and {"kafka", "print"} & set(cases) and None in unavailable.values():
            from flowpoint.connectors.kafka import EmbeddedKafka

            broker = EmbeddedKafka()
            bootstrap = broker.start()
            print(f"embedded broker (pid {broker.pid}) at {bootstrap}", flush=True)
        for runtime in runtimes:
            why = unavailable[runtime]
            if why is not None:
                for case in cases:
                    for rate in (gen_rates if case == "generator" else [args.rate]):
                        rows.append(Row(runtime, case, rate, "", note=f"not available: {why}"))
                print(f"{runtime}: not available: {why}", flush=True)
                continue
            for spark_mode in (["classic", "connect"] if args.spark == "both" else [args.spark]):
                args.spark_mode = spark_mode
                label = runtime if spark_mode == "classic" else f"{runtime}@connect"
                for case in cases:
                    for rate in (gen_rates if case == "generator" else [args.rate]):
                        try:
                            if case == "generator":
                                got = run_generator_case(runtime, rate, args, workdir)
                            else:
                                got = run_broker_case(case, runtime, args, bootstrap, workdir)
                            rows += [replace(r, runtime=label) for r in got]
                        except RuntimeError as e:
                            rows.append(Row(label, case, rate, "", note=f"failed: {e}".splitlines()[0]))
                            print(f"{case}/{label} failed: {e}", flush=True)
    finally:
        if broker is not None:
            broker.stop()

    print(f"\nlocal[2], parallelism 2, {KEYS} keys, window {args.seconds:.0f} s after a {args.warmup:.0f} s warm-up; "
          f"load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after")
    print_table(rows)
    print("flowpoint share = flowpoint's percentile minus the broker-only percentile (a difference of percentiles)")
    for r in rows:
        if "epochs" in r.extra:
            print(f"{r.runtime} {r.case} at {r.rate:,}/s: {r.extra['epochs']} epochs after the first two, "
                  f"median {r.extra['epoch_s_p50']:.2f} s, p90 {r.extra['epoch_s_p90']:.2f} s")
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    path = os.path.join(HERE, "results", f"latency-{time.strftime('%Y%m%d-%H%M%S')}.json")
    with open(path, "w") as f:
        json.dump({"started": started, "args": vars(args), "keys": KEYS, "master": "local[2]",
                   "load_average": [load_before[0], os.getloadavg()[0]], "job_logs": workdir,
                   "rows": [asdict(r) for r in rows]}, f, indent=2)
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
