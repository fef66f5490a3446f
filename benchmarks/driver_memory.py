"""Driver memory vs keyed state size: checkpoints and savepoints must not pass state through the driver.

    python benchmarks/driver_memory.py                          # 1M, 5M, 20M keys x HashMap, RocksDB
    python benchmarks/driver_memory.py --keys 1000000,5000000 --backends hashmap
    python benchmarks/driver_memory.py --keys 5000000 --backends hashmap --tracemalloc   # what the driver holds

For every (backend, N) a fresh driver process (local[2], keyed operator parallelism 2) runs a job
whose unbounded source emits ``(k, v) = (i % N, i)`` as Arrow batches (``--epoch-records``
per epoch, default 500,000) into a ``KeyedProcessFunction`` keeping one ``ValueState`` per key:
after N records the state holds N keys (and keeps being updated). Checkpointing is on (every 10 s, filesystem
storage in a temporary directory, HashMap full / RocksDB incremental). Once all N keys are in
state the driver waits for two more completed checkpoints, takes a savepoint
(``JobClient.trigger_savepoint``, from ``env.execute_async``), then ``stop_with_savepoint``,
and checks the savepoint: ``flowpoint.state_reader(spark, path).keyed_state(...).count() == N``
(Spark tasks read it). Only at the smallest N it also calls ``result.get_keyed_state`` (which
returns the whole state to the driver by definition; its memory is reported in its own column).

A thread samples the driver's ``VmRSS`` (``/proc/self/status``) every 20 ms and keeps the peak per
phase (load, checkpoints, savepoint, stop, state_reader, get_keyed_state), plus ``VmHWM`` (the
process's peak) at the end; the same for the driver JVM (in local mode the JVM is also the
executor: its shuffle and block manager memory are counted there, not state). Python workers,
which hold the state, are not the driver.

Savepoint time is reported twice: from the request (it waits for the epoch under way) and the
write itself (``_metadata``'s completed minus trigger time: the Spark job in which every
partition writes its part, and ``_metadata``).

Prints a table N -> driver peak RSS, checkpoint size, savepoint time; writes
``benchmarks/results/driver_memory.json``. ``--tracemalloc`` runs the driver under tracemalloc
and prints its largest allocation sites at the end of each phase.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)


# -- sampling --------------------------------------------------------------------------------------


def _status(pid: int | str, field: str) -> int:
    """``field`` of /proc/<pid>/status in bytes (0 if gone)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def _java_child() -> int | None:
    """The driver JVM: the ``java ... SparkSubmit`` process below this one (spark-submit's shell
    first runs a short-lived ``java`` launcher, which is not it)."""
    todo = [os.getpid()]
    while todo:
        p = todo.pop()
        try:
            with open(f"/proc/{p}/task/{p}/children") as f:
                kids = [int(x) for x in f.read().split()]
        except OSError:
            kids = []
        for k in kids:
            try:
                with open(f"/proc/{k}/cmdline", "rb") as f:
                    cmd = f.read()
            except OSError:
                continue
            if b"java" in cmd.split(b"\0")[0] and b"SparkSubmit" in cmd:
                return k
            todo.append(k)
    return None


class Sampler:
    def __init__(self, interval: float = 0.02):
        self.interval = interval
        self.phase = "start"
        self.peaks: dict[str, dict[str, int]] = {}
        self.jvm: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Sampler:
        self._thread.start()
        return self

    def set_phase(self, phase: str) -> None:
        self.sample()
        self.phase = phase
        self.sample()

    def sample(self) -> None:
        if self.jvm is None or not os.path.exists(f"/proc/{self.jvm}"):
            self.jvm = _java_child()
        p = self.peaks.setdefault(self.phase, {"python": 0, "jvm": 0})
        p["python"] = max(p["python"], _status("self", "VmRSS"))
        if self.jvm:
            p["jvm"] = max(p["jvm"], _status(self.jvm, "VmRSS"))

    def _run(self) -> None:
        while not self._stop.is_set():
            self.sample()
            time.sleep(self.interval)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()


# -- the child: one driver -------------------------------------------------------------------------


def _du(path: str) -> int:
    total = 0
    for root, _dirs, files in os.walk(path):
        for f in files:
            try:
                total += os.path.getsize(os.path.join(root, f))
            except OSError:
                pass
    return total


def child(args: argparse.Namespace) -> int:
    sys.path.insert(0, REPO)
    import tracemalloc

    if args.tracemalloc:
        tracemalloc.start(8)
    sampler = Sampler().start()
    import pyarrow as pa

    import flowpoint
    from flowpoint import (
        KeyedProcessFunction,
        StreamExecutionEnvironment,
        Types,
        ValueStateDescriptor,
    )
    from flowpoint.connectors.datagen import DataGeneratorSource

    n_keys = args.keys
    work = args.workdir

    class KeyGen:
        """Record i: (i % N, i); vectorized for the source."""

        output_type = Types.ROW_NAMED(["k", "v"], [Types.LONG(), Types.LONG()])

        def __init__(self, n):
            self.n = n

        def __call__(self, i):
            from flowpoint import Row

            return Row(k=i % self.n, v=i)

        def batch(self, start, end):
            import numpy as np

            idx = np.arange(start, end, dtype=np.int64)
            return pa.RecordBatch.from_arrays([pa.array(idx % self.n), pa.array(idx)], names=["k", "v"])

    class Keep(KeyedProcessFunction):
        def open(self, ctx):
            self.value = ctx.get_state(ValueStateDescriptor("v", Types.LONG()))

        def process_element(self, e, ctx):
            self.value.update(e.v)

    conf = {
        "execution.progress.interval": -1, "parallelism.default": 2, "spark.master": "local[2]",
        "state.backend.type": args.backend, "state.backend.incremental": args.backend == "rocksdb",
        "state.checkpoints.dir": "file://" + os.path.join(work, "checkpoints"),
        "state.working.dir": os.path.join(work, "working"),
    }
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_epoch_max_records(args.epoch_records)
    env.enable_checkpointing(args.checkpoint_ms)
    env.from_source(DataGeneratorSource(KeyGen(n_keys), count=None), source_name="keys").uid("keys") \
        .key_by("k").process(Keep()).uid("value")

    out: dict = {"backend": args.backend, "keys": n_keys, "flowpoint": os.path.dirname(flowpoint.__file__)}
    snaps: dict[str, list] = {}

    def phase(name: str) -> None:
        if args.tracemalloc:
            snaps[sampler.phase] = [(str(s.traceback), s.size, s.count) for s in
                                    tracemalloc.take_snapshot().statistics("traceback")[:8]]
        sampler.set_phase(name)

    t0 = time.perf_counter()
    phase("load")
    client = env.execute_async("driver-memory")

    def wait_for(cond, what: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not cond():
            if client.is_done():
                client.wait()  # raises the job's failure
                msg = f"the job ended before {what}"
                raise RuntimeError(msg)
            if time.monotonic() > deadline:
                msg = f"timed out waiting for {what}"
                raise RuntimeError(msg)
            time.sleep(0.05)

    wait_for(lambda: client.progress().records_read >= n_keys, f"{n_keys} records", args.timeout)
    out["load_s"] = time.perf_counter() - t0
    out["load_epochs"] = client.progress().epoch
    phase("checkpoints")
    t1 = time.perf_counter()
    done_before = {s.checkpoint_id for s in client.get_checkpoint_stats() if s.status == "COMPLETED"}

    def completed_after():
        return [s for s in client.get_checkpoint_stats() if s.status == "COMPLETED" and s.checkpoint_id not in done_before]

    # a checkpoint triggered after the load holds all N keys: wait for two of them
    wait_for(lambda: len(completed_after()) >= 2, "two checkpoints after the load", args.timeout)
    out["checkpoints_s"] = time.perf_counter() - t1
    last = completed_after()[-1]
    out["checkpoint"] = {"id": last.checkpoint_id, "state_size": last.state_size, "incremental_size": last.incremental_size,
                         "duration_ms": last.duration_ms, "sync_ms": last.sync_ms, "async_ms": last.async_ms,
                         "dir_bytes": _du(os.path.join(work, "checkpoints"))}
    phase("savepoint")
    t2 = time.perf_counter()
    sp = client.trigger_savepoint("file://" + os.path.join(work, "savepoints"))
    out["savepoint_s"] = time.perf_counter() - t2  # from the request: waits for the epoch under way
    sp_dir = sp[len("file://"):] if sp.startswith("file://") else sp
    out["savepoint_bytes"] = _du(sp_dir)
    with open(os.path.join(sp_dir, "_metadata")) as f:
        meta = json.load(f)
    out["savepoint_write_s"] = (meta["completed_time_ms"] - meta["trigger_time_ms"]) / 1000  # the parts and _metadata
    phase("stop")
    t3 = time.perf_counter()
    final = client.stop_with_savepoint("file://" + os.path.join(work, "savepoints"))
    result = client.wait()
    out["stop_with_savepoint_s"] = time.perf_counter() - t3
    out["epochs"] = result.epochs
    out["records"] = result.records_read
    phase("state_reader")
    from pyspark.sql import SparkSession

    spark = SparkSession.getActiveSession()
    t4 = time.perf_counter()
    rows = flowpoint.state_reader(spark, final).keyed_state("value", "v").count()
    out["state_reader_s"] = time.perf_counter() - t4
    out["savepoint_rows"] = rows
    if args.query:
        phase("get_keyed_state")
        t5 = time.perf_counter()
        state = result.get_keyed_state("value", "v")
        out["get_keyed_state_s"] = time.perf_counter() - t5
        out["get_keyed_state_keys"] = len(state)
        del state
    phase("end")
    sampler.stop()
    out["peaks"] = sampler.peaks
    out["python_hwm"] = _status("self", "VmHWM")
    out["jvm_hwm"] = _status(sampler.jvm, "VmHWM") if sampler.jvm else 0
    out["tracemalloc"] = snaps
    print("RESULT " + json.dumps(out), flush=True)
    spark.stop()
    return 0


# -- the parent --------------------------------------------------------------------------------------


def mb(x: int) -> str:
    return f"{x / 2**20:,.0f}"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--keys", default="1000000,5000000,20000000")
    p.add_argument("--backends", default="hashmap,rocksdb")
    p.add_argument("--epoch-records", type=int, default=500_000)
    p.add_argument("--checkpoint-ms", type=int, default=10_000)
    p.add_argument("--timeout", type=float, default=3600)
    p.add_argument("--tracemalloc", action="store_true")
    p.add_argument("--results", default=os.path.join(HERE, "results", "driver_memory.json"))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workdir", help=argparse.SUPPRESS)
    p.add_argument("--backend", help=argparse.SUPPRESS)
    p.add_argument("--query", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        args.keys = int(args.keys)
        return child(args)
    sizes = [int(x) for x in args.keys.split(",")]
    rows = []
    started = time.time()
    for backend in args.backends.split(","):
        for n in sizes:
            work = tempfile.mkdtemp(prefix=f"flowpoint-drivermem-{backend}-{n}-")
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--keys", str(n), "--backend", backend,
                   "--workdir", work, "--epoch-records", str(args.epoch_records), "--checkpoint-ms", str(args.checkpoint_ms),
                   "--timeout", str(args.timeout)]
            if n == min(sizes):
                cmd.append("--query")
            if args.tracemalloc:
                cmd.append("--tracemalloc")
            print(f"[{time.strftime('%H:%M:%S')}] {backend}, {n:,} keys (free memory {_status_meminfo() / 2**30:.1f} GiB, "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
            t0 = time.time()
            proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
            shutil.rmtree(work, ignore_errors=True)
            res = [json.loads(line[7:]) for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
            if proc.returncode != 0 or not res:
                sys.stderr.write(proc.stderr[-3000:])
                print(f"    failed (exit {proc.returncode}) after {time.time() - t0:.0f} s", flush=True)
                rows.append({"backend": backend, "keys": n, "error": proc.stderr[-2000:]})
                continue
            r = res[0]
            r["load_avg_1m"] = os.getloadavg()[0]
            rows.append(r)
            pk = r["peaks"]
            print(f"    {time.time() - t0:.0f} s: driver Python peak {mb(max(v['python'] for v in pk.values()))} MB "
                  f"(load {mb(pk['load']['python'])}, checkpoints {mb(pk['checkpoints']['python'])}, savepoint "
                  f"{mb(pk['savepoint']['python'])}), JVM {mb(max(v['jvm'] for v in pk.values()))} MB; checkpoint "
                  f"{mb(r['checkpoint']['state_size'])} MB; savepoint {r['savepoint_s']:.1f} s (write {r['savepoint_write_s']:.1f} s); "
                  f"rows {r['savepoint_rows']:,}", flush=True)
            if r.get("tracemalloc"):
                for ph, stats in r["tracemalloc"].items():
                    print(f"      tracemalloc at the end of {ph}:")
                    for tb, size, count in stats[:5]:
                        print(f"        {size / 2**20:8.1f} MB {count:>9} blocks  {tb.splitlines()[-1] if tb else ''}")
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump({"date": time.strftime("%Y-%m-%d %H:%M"), "args": vars(args), "rows": rows,
                   "minutes": (time.time() - started) / 60}, f, indent=2)
    print_table(rows)
    return 0


def _status_meminfo() -> int:
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def print_table(rows: list[dict]) -> None:
    print("\nDriver memory (MB) vs keyed state size, local[2]; peaks sampled every 20 ms")
    print(f"{'backend':<9}{'keys':>12}{'Python: load':>13}{'checkpoints':>12}{'savepoint':>10}{'stop+sp':>8}{'reader':>8}"
          f"{'VmHWM':>7}{'JVM peak':>9}{'chk MB':>8}{'chk s':>7}{'savepoint s':>12}{'write s':>8}{'sp MB':>7}{'get_keyed_state':>17}")
    for r in rows:
        if "error" in r:
            print(f"{r['backend']:<9}{r['keys']:>12,}  failed")
            continue
        pk = r["peaks"]
        gks = f"{mb(pk['get_keyed_state']['python'])} MB, {r['get_keyed_state_s']:.1f} s" if "get_keyed_state" in pk else "-"
        print(f"{r['backend']:<9}{r['keys']:>12,}{mb(pk['load']['python']):>13}{mb(pk['checkpoints']['python']):>12}"
              f"{mb(pk['savepoint']['python']):>10}{mb(pk['stop']['python']):>8}{mb(pk['state_reader']['python']):>8}"
              f"{mb(r['python_hwm']):>7}{mb(max(v['jvm'] for v in pk.values())):>9}{mb(r['checkpoint']['state_size']):>8}"
              f"{r['checkpoint']['duration_ms'] / 1000:>7.1f}{r['savepoint_s']:>12.1f}{r['savepoint_write_s']:>8.1f}"
              f"{mb(r['savepoint_bytes']):>7}{gks:>17}")


if __name__ == "__main__":
    sys.exit(main())
