"""flowpoint on local[2] vs a 2-worker Spark standalone cluster, in one run.

    python benchmarks/cluster.py                  # about 30-40 min on 2 shared cores
    python benchmarks/cluster.py --reps 1 --quick # a smoke run (a few minutes)

Needs Linux, root and ``unshare`` (the cluster is ``tests/standalone_cluster.py``: a master and two
1-core workers on loopback, each worker in its own mount namespace seeing a private directory at
the path named as ``state.working.dir``, as two hosts that share no disk) and ``moto[server]``
(``pip install -e '.[test]'``). The script starts an S3 server (moto's ``ThreadedMotoServer`` on
127.0.0.1) and the cluster, runs everything, and removes both.

Every driver is its own process (one SparkContext per process) running this script with
``--child``; settings reach it as ``$FLOWPOINT_CONF_DIR/flowpoint.yaml`` (backend, working
directory, durable storage on S3 and the S3 options) and Spark settings (for the cluster
``StandaloneCluster.driver_conf()``: one executor per worker). Measured:

1. **Throughput**, the same workloads and code as ``keyed_count.py`` (1,000,000 click events in
   10 epochs keyed by user id, 200,000 keys; and keyed by (channel, behaviour), 28 keys) and
   ``windowed_count.py`` (``--windowed-events`` events in 20 epochs through 1-minute event-time
   windows with ``Aggregates.count()``; the input parquet files, written once, are on a path both
   workers see, as an HDFS or S3 input would be), on HashMap and RocksDB, for three set-ups:
   ``local[2]`` with durable working state on the local disk (the default), ``local[2]`` with
   durable working state on S3 (``state.working.remote-dir``), and the cluster with durable
   working state on S3 (the only correct set-up on several hosts). Alternating, ``--reps``
   times; best of the reps.
2. **Per-epoch overhead**: a keyed count of ``--tiny-events`` events per epoch for 100 epochs
   (parallelism 2): median seconds per epoch (``get_epoch_stats``) and wall time / epochs.
3. **State found in memory**: ``stateTasksInMemory / stateTasks`` of ``result.get_metrics()`` in
   that 100-epoch run, at parallelism 2 and 4 (a task that did not find its partition in its
   Python worker rebuilt it from durable storage).
4. **Recovery after losing a worker**: a paced keyed count (``--recovery-rate`` events/s by the
   wall clock, so a stalled job has a backlog to catch up, as with a message queue;
   checkpoints every 2 s to ``s3://.../ck``, durable working state under the checkpoint
   directory's ``taskowned/``) on the cluster; worker 1 is killed (``kill -9`` of its namespace:
   worker, executor and Python workers) mid-run; the driver reports every committed epoch's
   time. Reported: seconds from the kill to the first commit, and to the point after which the
   job runs at its pre-kill epoch rate again (the first of 3 consecutive epochs each at most
   1.5x the median pre-kill epoch interval), restarts, and whether the final state and outputs
   are exact (every (key, count) emitted exactly once, final counts equal to the input's).
   ``--restart-worker`` also starts the worker again right after the kill (a replacement host).

Prints tables and writes ``benchmarks/results/cluster.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BUCKET = "flowpoint-bench"
S3_KEYS = {"s3.access-key": "testing", "s3.secret-key": "testing", "s3.region": "us-east-1"}


# =================================================================================================
# child: one driver process
# =================================================================================================


def _emit(tag: str, obj: dict) -> None:
    print(f"{tag} " + json.dumps(obj), flush=True)


def _session(master: str, spark_conf: dict):
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    path = os.pathsep.join(dict.fromkeys(p for p in sys.path if p and os.path.isdir(p)))
    os.environ["PYTHONPATH"] = path
    b = (SparkSession.builder.master(master).appName("flowpoint-cluster-bench")
         .config("spark.executorEnv.PYTHONPATH", path)
         .config("spark.python.worker.reuse", "true")
         .config("spark.ui.showConsoleProgress", "false")
         .config("spark.sql.shuffle.partitions", "2")
         .config("spark.sql.adaptive.enabled", "false"))
    for k, v in spark_conf.items():
        b = b.config(k, v)
    spark = b.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _set_conf(conf_root: str, settings: dict) -> None:
    """The flowpoint settings of the next jobs: ``$FLOWPOINT_CONF_DIR/flowpoint.yaml``."""
    d = os.path.join(conf_root, uuid.uuid4().hex[:8])
    os.makedirs(d)
    with open(os.path.join(d, "flowpoint.yaml"), "w") as f:
        for k, v in settings.items():
            f.write(f"{k}: {json.dumps(v) if isinstance(v, str) else v}\n")
    os.environ["FLOWPOINT_CONF_DIR"] = d


def _expected_counts(users: int, n: int) -> dict[str, int]:
    from collections import Counter

    from flowpoint import ClickEventGenerator

    ids = ClickEventGenerator(num_users=users).batch(0, n).column("id").to_pylist()
    return dict(Counter(ids))


def _paced_source(gen, count: int, rate: float):
    """A DataGeneratorSource whose split i may read up to ``rate / splits * (now - first plan)``
    records: paced by the wall clock, so after a restart it catches up with the events that
    arrived meanwhile (as a message queue would hold them) instead of pacing from the restart."""
    from flowpoint import DataGeneratorSource
    from flowpoint.connectors.source import SplitPlan

    class PacedSource(DataGeneratorSource):
        t0: float | None = None

        def plan(self, split, position, budget, elapsed_s):
            if self.t0 is None:
                self.t0 = time.time()
            first, limit = split.payload
            allowed = first + int(rate / self._num_splits * (time.time() - self.t0))
            end = min(limit, position + budget, max(position, allowed))
            return SplitPlan(end, end - position, end >= limit)

    return PacedSource(gen, count=count)


def _count_job(spark, events: int, per_epoch: int, parallelism: int, users: int, rate: float | None = None,
               checkpoint_ms: int | None = None, emit: bool = False):
    from benchmarks.keyed_count import CountPerKey
    from flowpoint import (
        ClickEventGenerator,
        CollectSink,
        DataGeneratorSource,
        StreamExecutionEnvironment,
    )

    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.progress.interval": -1, "parallelism.default": parallelism}, spark_session=spark)
    env.set_epoch_max_records(per_epoch)
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
    if rate:
        src = _paced_source(ClickEventGenerator(num_users=users), events, rate)
    else:
        src = DataGeneratorSource(ClickEventGenerator(num_users=users), count=events)
    keyed = env.from_source(src, source_name="clicks").key_by("id")
    sink = None
    if emit:
        out = keyed.process(EmitCount()).uid("count")
        out.sink_to(sink := CollectSink())
    else:
        keyed.process(CountPerKey()).uid("count")
    return env, sink


def _emit_count_class():
    from flowpoint import KeyedProcessFunction, Types, ValueStateDescriptor

    class _EmitCount(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, event, ctx):
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            yield ctx.get_current_key(), n

    return _EmitCount


EmitCount = None  # defined in the child (flowpoint imported there)


def run_throughput(spark, m: dict) -> dict:
    if m["workload"] == "windowed":
        import benchmarks.windowed_count as wc

        data = m["data"]
        r = wc.measure_flowpoint(spark, data, m["events"], m["epochs"], _WINDOW_EXPECTED[data], "aggregate")
    else:
        import benchmarks.keyed_count as kc

        r = kc.measure_flowpoint(spark, m["events"], m["key"], epochs=m["epochs"])
    return {"events_per_s": r["events_per_s"], "seconds": r["seconds"]}


_WINDOW_EXPECTED: dict[str, dict] = {}


def run_tiny(spark, m: dict) -> dict:
    env, _ = _count_job(spark, m["per_epoch"] * m["epochs"], m["per_epoch"], m["parallelism"], 2_000)
    t0 = time.perf_counter()
    result = env.execute("tiny-epochs")
    wall = time.perf_counter() - t0
    stats = result.get_epoch_stats()
    secs = [s for _, _, s in stats]
    metrics = result.get_metrics()
    counts = result.get_keyed_state("count", "count")
    exact = counts == _expected_counts(2_000, m["per_epoch"] * m["epochs"])
    return {"epochs": result.epochs, "wall_s": wall, "wall_per_epoch_s": wall / max(1, result.epochs),
            "median_epoch_s": statistics.median(secs), "p90_epoch_s": sorted(secs)[int(0.9 * (len(secs) - 1))],
            "stateTasks": metrics.get("stateTasks", 0), "stateTasksInMemory": metrics.get("stateTasksInMemory", 0),
            "exact": exact}


def run_recovery(spark, m: dict) -> dict:
    env, sink = _count_job(spark, m["events"], m["per_epoch"], m["parallelism"], m["users"], rate=m["rate"],
                           checkpoint_ms=m["checkpoint_ms"], emit=True)
    client = env.execute_async("recovery")
    stop = threading.Event()

    def monitor():
        seen, status = 0, None
        while not stop.is_set():
            h = client.get_epoch_stats()  # (epoch, records, seconds), appended at each commit
            while seen < len(h):
                e, records, secs = h[seen]
                _emit("EPOCH", {"t": time.time(), "epoch": e, "records": records, "seconds": secs})
                seen += 1
            s = client.get_job_status().value
            if s != status:
                _emit("STATUS", {"t": time.time(), "status": s})
                status = s
            time.sleep(0.01)

    th = threading.Thread(target=monitor, daemon=True)
    th.start()
    try:
        result = client.wait()
    finally:
        time.sleep(0.05)
        stop.set()
        th.join()
    counts = result.get_keyed_state("count", "count")
    expected = _expected_counts(m["users"], m["events"])
    want_out = sorted((k, i) for k, n in expected.items() for i in range(1, n + 1))
    got_out = sorted(sink.results)
    return {"epochs": result.epochs, "restarts": client.progress().restarts, "keys": len(expected), "exact_state": counts == expected,
            "exact_outputs": got_out == want_out, "outputs": len(got_out), "expected_outputs": len(want_out),
            "checkpoints_completed": sum(1 for s in result.get_checkpoint_stats() if s.status == "COMPLETED"),
            "metrics": {k: v for k, v in result.get_metrics().items() if k.startswith("stateTasks")}}


def child(spec_path: str) -> int:
    global EmitCount
    with open(spec_path) as f:
        spec = json.load(f)
    sys.path.insert(0, REPO)
    spark = _session(spec["master"], spec["spark_conf"])
    EmitCount = _emit_count_class()
    import benchmarks.keyed_count as kc

    for m in spec["measurements"]:
        if m.get("warmup"):
            _set_conf(spec["conf_root"], m.get("warmup_settings") or m["settings"])
            kc.measure_flowpoint(spark, 20_000, "id", epochs=2)  # Python workers, as keyed_count.py
        _set_conf(spec["conf_root"], m["settings"])
        if m["kind"] == "throughput" and m["workload"] == "windowed" and m["data"] not in _WINDOW_EXPECTED:
            import benchmarks.windowed_count as wc

            _WINDOW_EXPECTED[m["data"]] = wc.expected_counts(m["data"])
        fn = {"throughput": run_throughput, "tiny": run_tiny, "recovery": run_recovery}[m["kind"]]
        out = fn(spark, m)
        _emit("RESULT", {**{k: v for k, v in m.items() if k != "settings"}, **out, "load": os.getloadavg()[0]})
    spark.stop()
    return 0


# =================================================================================================
# parent: S3 server, cluster, children, tables
# =================================================================================================


class S3Server:
    def __init__(self):
        from moto.server import ThreadedMotoServer

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def __enter__(self):
        import pyarrow.fs as pafs

        self.server.start()
        fs = pafs.S3FileSystem(access_key="testing", secret_key="testing", region="us-east-1",
                               endpoint_override=f"127.0.0.1:{self.port}", scheme="http", allow_bucket_creation=True)
        fs.create_dir(BUCKET)
        return self

    def __exit__(self, *exc):
        self.server.stop()

    def settings(self) -> dict:
        return {"s3.endpoint": self.endpoint, **S3_KEYS}


def run_child(spec: dict, tmp: str, timeout: float = 3600, on_line=None) -> list[dict]:
    path = os.path.join(tmp, f"spec-{uuid.uuid4().hex[:8]}.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    env = {k: v for k, v in os.environ.items() if k not in ("FLOWPOINT_CONF_DIR",)}
    env["PYTHONPATH"] = os.pathsep.join([REPO, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]])
    proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--child", path], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp, env=env)
    err: list[str] = []
    t = threading.Thread(target=lambda: err.extend(proc.stderr), daemon=True)
    t.start()
    results = []
    deadline = time.monotonic() + timeout
    for line in proc.stdout:
        tag, _, body = line.partition(" ")
        if tag in ("RESULT", "EPOCH", "STATUS"):
            obj = json.loads(body)
            if tag == "RESULT":
                results.append(obj)
            if on_line is not None:
                on_line(tag, obj)
        if time.monotonic() > deadline:
            proc.kill()
            break
    proc.wait()
    t.join(5)
    if proc.returncode != 0:
        sys.stderr.write("".join(err[-60:]))
        msg = f"driver process for {spec['master']} failed (exit {proc.returncode})"
        raise RuntimeError(msg)
    return results


def recovery_summary(epochs: list[dict], t_kill: float) -> dict:
    times = [e["t"] for e in epochs]
    before = [t for t in times if t <= t_kill]
    intervals = [b - a for a, b in zip(before, before[1:], strict=False)][3:]  # the first epochs start Python workers
    normal = statistics.median(intervals) if intervals else float("nan")
    after = [e for e in epochs if e["t"] > t_kill]
    first_commit = after[0]["t"] - t_kill if after else None
    back = None
    prev = before[-1] if before else t_kill
    seq = [prev] + [e["t"] for e in after]
    for i in range(1, len(seq) - 2):
        if all(seq[j] - seq[j - 1] <= 1.5 * normal for j in (i, i + 1, i + 2)):
            back = max(0.0, seq[i - 1] - t_kill)
            break
    return {"normal_epoch_interval_s": normal, "first_commit_after_kill_s": first_commit,
            "back_at_full_rate_after_s": back, "epochs_before_kill": len(before), "epochs_after_kill": len(after)}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3, help="throughput repetitions (alternating set-ups)")
    p.add_argument("--backends", default="hashmap,rocksdb")
    p.add_argument("--events", type=int, default=1_000_000, help="keyed_count events")
    p.add_argument("--windowed-events", type=int, default=10_000_000)
    p.add_argument("--tiny-events", type=int, default=100, help="events per epoch of the per-epoch-overhead job")
    p.add_argument("--recovery-rate", type=float, default=4_000.0)
    p.add_argument("--recovery-users", type=int, default=200_000, help="distinct keys of the recovery job (as keyed_count.py)")
    p.add_argument("--recovery-seconds", type=float, default=60.0)
    p.add_argument("--kill-after", type=float, default=20.0, help="seconds of committed epochs before the kill")
    p.add_argument("--restart-worker", action="store_true", help="start the killed worker again right away")
    p.add_argument("--quick", action="store_true", help="small sizes (smoke run)")
    p.add_argument("--skip", default="", help="comma list of: throughput,tiny,recovery")
    p.add_argument("--results", default=os.path.join(HERE, "results", "cluster.json"))
    p.add_argument("--child", metavar="SPEC", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.child)
    if args.quick:
        args.events, args.windowed_events, args.recovery_seconds, args.kill_after = 100_000, 1_000_000, 30.0, 10.0

    sys.path.insert(0, os.path.join(REPO, "tests"))
    from standalone_cluster import StandaloneCluster, unavailable_reason

    why = unavailable_reason()
    if why:
        print(f"cannot start the standalone cluster here: {why}", file=sys.stderr)
        return 2
    skip = set(filter(None, args.skip.split(",")))
    backends = args.backends.split(",")
    tmp = tempfile.mkdtemp(prefix="flowpoint-cluster-bench-")
    conf_root = os.path.join(tmp, "conf")
    os.makedirs(conf_root)
    started = time.time()
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "args": vars(args), "throughput": [], "tiny": [], "recovery": []}
    try:
        # the windowed input: written once, on a path every worker sees
        sys.path.insert(0, REPO)
        import benchmarks.windowed_count as wc

        data = wc.write_events(os.path.join(tmp, "windowed-data"), args.windowed_events, 20, 30_000)
        with S3Server() as s3, StandaloneCluster() as cluster:
            print(f"S3 (moto) at {s3.endpoint}; cluster {cluster.master_url}, 2 workers x 1 core, started in "
                  f"{cluster.startup_seconds:.1f} s; load {os.getloadavg()[0]:.1f}", flush=True)
            local_dir = os.path.join(tmp, "local-working")

            def setup(name: str) -> tuple[str, dict, dict]:
                """(master, spark settings, flowpoint settings but the backend) of a set-up."""
                remote = {"state.working.remote-dir": f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}/durable", **s3.settings()}
                if name == "local[2], local disk":
                    return "local[2]", {}, {"state.working.dir": local_dir}
                if name == "local[2], S3":
                    return "local[2]", {}, {"state.working.dir": local_dir, **remote}
                conf = {k: v for k, v in cluster.driver_conf().items() if k != "spark.master"}
                return cluster.master_url, conf, {"state.working.dir": cluster.working_dir, **remote}

            setups = ["local[2], local disk", "local[2], S3", "cluster, S3"]
            # -- 1-3: throughput, tiny epochs, state in memory ------------------------------------
            for rep in range(args.reps if "throughput" not in skip else 1):
                order = setups if rep % 2 == 0 else setups[::-1]
                for name in order:
                    master, spark_conf, settings = setup(name)
                    ms = []
                    if "throughput" not in skip:
                        for b in backends:
                            st = {**settings, "state.backend.type": b}
                            ms += [
                                {"kind": "throughput", "workload": "keyed-id", "key": "id", "events": args.events, "epochs": 10, "backend": b, "settings": st},
                                {"kind": "throughput", "workload": "keyed-28keys", "key": "channel_behavior", "events": args.events, "epochs": 10, "backend": b, "settings": st},
                                {"kind": "throughput", "workload": "windowed", "data": data, "events": args.windowed_events, "epochs": 20, "backend": b, "settings": st},
                            ]
                    if "tiny" not in skip and rep == 0:
                        for b in backends:
                            for par in (2, 4) if name == "cluster, S3" else (2,):
                                ms.append({"kind": "tiny", "per_epoch": args.tiny_events, "epochs": 100, "parallelism": par,
                                           "backend": b, "settings": {**settings, "state.backend.type": b}})
                    if not ms:
                        continue
                    ms[0]["warmup"] = True
                    print(f"[{time.strftime('%H:%M:%S')}] rep {rep + 1}: {name}: {len(ms)} measurements", flush=True)
                    for r in run_child({"master": master, "spark_conf": spark_conf, "conf_root": conf_root, "measurements": ms}, tmp):
                        r["setup"] = name
                        r["rep"] = rep
                        out["tiny" if r["kind"] == "tiny" else "throughput"].append(r)
                        what = r.get("workload") or f"tiny p={r.get('parallelism')}"
                        val = f"{r['events_per_s']:,.0f} ev/s" if r["kind"] == "throughput" else (
                            f"{r['median_epoch_s']:.3f} s/epoch, in memory {r['stateTasksInMemory']}/{r['stateTasks']}")
                        print(f"    {name:<22}{r['backend']:<9}{what:<16}{val}", flush=True)
            # -- 4: recovery after a worker loss --------------------------------------------------
            if "recovery" not in skip:
                for b in backends:
                    master = cluster.master_url
                    spark_conf = {k: v for k, v in cluster.driver_conf().items() if k != "spark.master"}
                    prefix = f"s3://{BUCKET}/{uuid.uuid4().hex[:8]}"
                    settings = {"state.working.dir": cluster.working_dir, "state.checkpoints.dir": f"{prefix}/ck",
                                "state.backend.type": b, **s3.settings()}
                    n = int(args.recovery_rate * args.recovery_seconds)
                    m = {"kind": "recovery", "events": n, "rate": args.recovery_rate, "users": args.recovery_users,
                         "per_epoch": int(args.recovery_rate * 5), "parallelism": 2, "checkpoint_ms": 2000,
                         "backend": b, "settings": settings, "warmup": True,
                         # the warm-up job has no checkpoints: its durable state needs a shared place too
                         "warmup_settings": {**settings, "state.working.remote-dir": f"{prefix}/warmup"}}
                    epochs: list[dict] = []
                    statuses: list[dict] = []
                    killed: dict = {}

                    def on_line(tag, obj, epochs=epochs, statuses=statuses, killed=killed):
                        if tag == "EPOCH":
                            epochs.append(obj)
                            if not killed and epochs[0]["t"] + args.kill_after <= obj["t"]:
                                killed["t"] = time.time()
                                cluster.kill_worker(1)
                                killed["kill_s"] = time.time() - killed["t"]
                                if args.restart_worker:
                                    cluster.restart_worker(1)
                                    killed["restarted_after_s"] = time.time() - killed["t"]
                        elif tag == "STATUS":
                            statuses.append(obj)

                    print(f"[{time.strftime('%H:%M:%S')}] recovery ({b}): {n:,} events at {args.recovery_rate:,.0f}/s, "
                          f"kill worker 1 after {args.kill_after:.0f} s", flush=True)
                    try:
                        res = run_child({"master": master, "spark_conf": spark_conf, "conf_root": conf_root,
                                         "measurements": [m]}, tmp, on_line=on_line)
                    finally:
                        cluster.ensure_workers()
                    r = res[-1]
                    r.update(recovery_summary(epochs, killed["t"]) if killed else {"error": "no kill"})
                    r.update({"kill": killed, "statuses": [(round(s["t"] - killed.get("t", 0), 2), s["status"]) for s in statuses],
                              "epoch_times": [(round(e["t"] - killed.get("t", 0), 2), e["epoch"], e["records"], round(e["seconds"], 3)) for e in epochs]})
                    out["recovery"].append(r)
                    print(f"    {b}: first commit {r.get('first_commit_after_kill_s')} s after the kill, full rate after "
                          f"{r.get('back_at_full_rate_after_s')} s, restarts {r.get('restarts')}, exact state "
                          f"{r['exact_state']}, exact outputs {r['exact_outputs']}", flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    out["minutes"] = (time.time() - started) / 60
    loads = [r["load"] for k in ("throughput", "tiny", "recovery") for r in out[k] if "load" in r]
    out["load_avg_1m"] = [min(loads, default=0), max(loads, default=0)]
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump(out, f, indent=2)
    print_tables(out)
    return 0


def print_tables(out: dict) -> None:
    print(f"\n{out['date']}, {out['minutes']:.0f} min, load average {out['load_avg_1m'][0]:.1f}-{out['load_avg_1m'][1]:.1f}")
    if out["throughput"]:
        print("\nThroughput, events/s (best of reps; all reps in brackets)")
        setups = list(dict.fromkeys(r["setup"] for r in out["throughput"]))
        keys = list(dict.fromkeys((r["workload"], r["backend"]) for r in out["throughput"]))
        print(f"{'workload':<14}{'backend':<9}" + "".join(f"{s:>24}" for s in setups) + f"{'cluster / local disk':>22}")
        for w, b in keys:
            best = {}
            cells = ""
            for s in setups:
                vals = [r["events_per_s"] for r in out["throughput"] if (r["workload"], r["backend"], r["setup"]) == (w, b, s)]
                best[s] = max(vals) if vals else float("nan")
                cells += f"{best[s]:>24,.0f}"
            ratio = best.get("cluster, S3", float("nan")) / best.get("local[2], local disk", float("nan"))
            print(f"{w:<14}{b:<9}{cells}{ratio:>22.2f}")
        for w, b in keys:
            for s in setups:
                vals = [r["events_per_s"] for r in out["throughput"] if (r["workload"], r["backend"], r["setup"]) == (w, b, s)]
                print(f"    {w:<14}{b:<9}{s:<22}" + " ".join(f"{v:,.0f}" for v in vals))
    if out["tiny"]:
        print("\nPer-epoch overhead and state found in memory (100 epochs of a keyed count)")
        print(f"{'set-up':<22}{'backend':<9}{'p':>3}{'events/epoch':>14}{'median s/epoch':>16}{'wall s/epoch':>14}{'in memory':>18}{'exact':>7}")
        for r in out["tiny"]:
            frac = r["stateTasksInMemory"] / r["stateTasks"] if r["stateTasks"] else float("nan")
            print(f"{r['setup']:<22}{r['backend']:<9}{r['parallelism']:>3}{r['per_epoch']:>14}{r['median_epoch_s']:>16.3f}"
                  f"{r['wall_per_epoch_s']:>14.3f}{r['stateTasksInMemory']:>8}/{r['stateTasks']:<4}{frac:>6.1%}{r['exact']!s:>7}")
    if out["recovery"]:
        print("\nRecovery after kill -9 of worker 1 (cluster, checkpoints every 2 s on S3)")
        print(f"{'backend':<9}{'keys':>8}{'epoch interval s':>17}{'first commit s':>15}{'full rate s':>12}{'restarts':>9}"
              f"{'rebuilt tasks':>14}{'exact state':>12}{'exact outputs':>14}")
        for r in out["recovery"]:
            def f(x):
                return f"{x:.1f}" if isinstance(x, (int, float)) else str(x)
            met = r.get("metrics", {})
            rebuilt = f"{met.get('stateTasks', 0) - met.get('stateTasksInMemory', 0)}/{met.get('stateTasks', 0)}"
            print(f"{r['backend']:<9}{r.get('keys', 0):>8,}{f(r.get('normal_epoch_interval_s')):>17}{f(r.get('first_commit_after_kill_s')):>15}"
                  f"{f(r.get('back_at_full_rate_after_s')):>12}{r.get('restarts')!s:>9}{rebuilt:>14}{r['exact_state']!s:>12}{r['exact_outputs']!s:>14}")


if __name__ == "__main__":
    with contextlib.suppress(BrokenPipeError):
        sys.exit(main())
