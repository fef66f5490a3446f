"""Keyed ValueState count: flowpoint vs Spark's transformWithStateInPandas (and PyFlink if set up).

Workload (issue 2): click events of seed 000's shape, keyed by user id (200,000 distinct ids),
a KeyedProcessFunction keeping a per-user ValueState count, 10 epochs, local[2]. The same for the
small-key workload keyed by (channel, behavior). All engines run in this one process/run, so the
ratios compare like with like on a shared, noisy machine.

    python benchmarks/keyed_count.py [--events 1000000] [--tws-events 20000] [--skip-pyflink]

``--flowpoint-only`` runs only flowpoint (issue 29): ``--users 0`` gives every event its own user
id (1,000,000 distinct keys), ``--runtime continuous``, ``--backends hashmap,rocksdb``,
``--checkpoint-ms 10000``; it prints events/s per backend and, measured in the same run, the rate
of a Python dict get+set over the same keys on one core::

    python benchmarks/keyed_count.py --flowpoint-only --users 0 --runtime continuous \
        --backends hashmap,rocksdb --checkpoint-ms 10000 [--rounds 3] [--key field|lambda]

``keyed_versus.py`` runs the same flowpoint jobs against PyFlink, Bytewax and the dict in one run.

``--slot`` times the slots' per-record work without Spark (one thread, HashMap state)::

    python benchmarks/keyed_count.py --slot --events 1000000
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.baselines.pyflink_baseline import measure_pyflink  # noqa: E402
from benchmarks.baselines.spark_tws import make_session, measure_tws  # noqa: E402
from flowpoint import (  # noqa: E402
    ClickEventGenerator,
    DataGeneratorSource,
    KeyedProcessFunction,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
)

USERS = 200_000


class CountPerKey(KeyedProcessFunction):
    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, event, ctx):
        self.count.update((self.count.value() or 0) + 1)


class CountPerKeyEmitting(KeyedProcessFunction):
    """``CountPerKey`` that also emits ``(key, count)`` per event, as the PyFlink and Bytewax
    baselines do (``keyed_versus.py``)."""

    def open(self, ctx):
        self.count = ctx.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, event, ctx):
        c = (self.count.value() or 0) + 1
        self.count.update(c)
        yield ctx.get_current_key(), c


def discard(value):
    pass


def by_channel_behavior(e):
    return e.channel, e.behavior


def by_id(e):
    return e.id


def measure_flowpoint(spark, n_events: int, key: str, epochs: int = 10, config: dict | None = None,
                      users: int | None = USERS, checkpoint_ms: int = 0, emit: bool = False) -> dict:
    """One job; ``emit``: the function emits ``(key, count)`` per event into a sink that drops them."""
    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.progress.interval": -1, "parallelism.default": 2, **(config or {})}, spark_session=spark
    )
    env.set_epoch_max_records(max(1, n_events // epochs))
    if checkpoint_ms:
        env.enable_checkpointing(checkpoint_ms)
    source = DataGeneratorSource(ClickEventGenerator(num_users=users), count=n_events)
    stream = env.from_source(source, source_name="clicks")
    if key == "id":
        keyed = stream.key_by("id")
    elif key == "id_lambda":
        keyed = stream.key_by(by_id)
    else:
        keyed = stream.key_by(by_channel_behavior)
    if emit:
        counts = keyed.process(CountPerKeyEmitting(), output_type=Types.TUPLE([Types.STRING(), Types.LONG()]))
        counts.uid("count").add_sink(discard).uid("discard")
    else:
        keyed.process(CountPerKey()).uid("count")
    t0 = time.perf_counter()
    result = env.execute(f"bench-{key}")
    seconds = time.perf_counter() - t0
    counts = result.get_keyed_state("count", "count")
    assert sum(counts.values()) == n_events, "flowpoint lost or duplicated events"
    return {"engine": "flowpoint", "events": n_events, "keys": len(counts), "epochs": result.epochs,
            "seconds": seconds, "events_per_s": n_events / seconds}


def dict_rate(n_events: int, users: int | None, rounds: int = 3) -> float:
    """A Python dict's get+set per second over the workload's keys, on one core (best of ``rounds``)."""
    keys = ClickEventGenerator(num_users=users).batch(0, n_events).column("id").to_pylist()
    best = 0.0
    for _ in range(rounds):
        d: dict = {}
        get = d.get
        t0 = time.perf_counter()
        for k in keys:
            d[k] = get(k, 0) + 1
        best = max(best, len(keys) / (time.perf_counter() - t0))
    return best


def measure_slot(n_events: int) -> dict:
    """The per-record work of keyed_count's slots without Spark, in one thread, for all
    ``n_events`` (one user id each): generate, route by key group and encode the batches (the
    source side), decode, build the records and run ``CountPerKey`` over HashMap state (the
    keyed side). Nanoseconds an event, per side."""
    from flowpoint.api.functions import FieldKeySelector
    from flowpoint.connectors.clicks import CLICK_EVENT_TYPE
    from flowpoint.state.heap import HeapKeyedStateBackend
    from flowpoint.tasks.batches import decode
    from flowpoint.tasks.context import TaskRuntimeContext
    from flowpoint.tasks.keyed_process import KeyedProcessOp
    from flowpoint.tasks.operators import KeyedWriter
    from flowpoint.tasks.plan import EdgeSpec, OpSpec

    gen = ClickEventGenerator(num_users=None)
    writer = KeyedWriter(EdgeSpec(1, 0, "keyed", FieldKeySelector("id"), 2, 128, None, "count"), 0)
    spec = OpSpec(1, "process", "count", "count", CountPerKey(), {}, CLICK_EVENT_TYPE, None, None, 2, 128, [], [], True)
    backend = HeapKeyedStateBackend("count", "count")
    op = KeyedProcessOp(spec, backend)
    ctx = TaskRuntimeContext("count", 0, 2, 128, {}, backend)
    ctx.clock = op
    op.open(ctx)
    process_keyed = getattr(op, "process_keyed", None)  # absent before issue 29
    send = receive = 0.0
    for i, a in enumerate(range(0, n_events, 16384)):
        t0 = time.perf_counter()
        writer.process((0, 0, i), gen.batch(a, min(n_events, a + 16384)))
        out, writer.out = writer.out, []
        t1 = time.perf_counter()
        for _, (_, origin, blob) in out:
            if blob[0] == "wm":
                continue
            data, ts = decode(blob)
            if hasattr(data, "keys_and_row_iter"):  # the records built as the loop takes them
                keys, rows = data.keys_and_row_iter(CLICK_EVENT_TYPE)
                process_keyed(origin, keys, rows, ts, len(data))
            elif process_keyed is not None:
                keys, rows = data.keys_and_rows(CLICK_EVENT_TYPE)
                process_keyed(origin, keys, rows, ts)
            else:
                op.process(origin, data.pairs(CLICK_EVENT_TYPE), ts)
        receive += time.perf_counter() - t1
        send += t1 - t0
    assert sum(backend.tables["count"].values()) == n_events
    return {"what": "slot path", "send_ns": send / n_events * 1e9, "receive_ns": receive / n_events * 1e9,
            "total_ns": (send + receive) / n_events * 1e9}


def backend_config(runtime: str, backend: str, workdir: str, tag: object) -> dict:
    """flowpoint's config for one job of ``--flowpoint-only`` (and ``keyed_versus.py``): the
    runtime, the state backend, and fresh checkpoint and working directories under ``workdir``."""
    return {
        "execution.runtime": runtime, "state.backend.type": backend,
        "state.checkpoints.dir": "file://" + os.path.join(workdir, f"chk-{backend}-{tag}"),
        "state.working.dir": os.path.join(workdir, f"working-{backend}-{tag}"),
    }


def main_flowpoint_only(args) -> int:
    """Issue 29: flowpoint alone, per backend, with the dict rate of the same keys in the same run."""
    spark = make_session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    users = args.users or None
    workdir = tempfile.mkdtemp(prefix="flowpoint-bench-")
    key = "id" if args.key == "field" else "id_lambda"
    backends = args.backends.split(",")

    def config(backend: str, i: int) -> dict:
        return backend_config(args.runtime, backend, workdir, i)

    for backend in backends:  # warm the Python workers and the imports of each backend
        measure_flowpoint(spark, 20_000, key, epochs=2, config=config(backend, -1), users=users, checkpoint_ms=args.checkpoint_ms)
    rows = []
    for r in range(args.rounds):
        rate = dict_rate(args.events, users)
        rows.append({"round": r, "what": "dict get+set", "events_per_s": rate})
        print(json.dumps(rows[-1]), flush=True)
        for backend in backends:
            fp = measure_flowpoint(spark, args.events, key, config=config(backend, r), users=users, checkpoint_ms=args.checkpoint_ms)
            rows.append({"round": r, "what": backend, **fp, "vs_dict": fp["events_per_s"] / rate})
            print(json.dumps(rows[-1]), flush=True)
    for what in dict.fromkeys(row["what"] for row in rows):
        rates = sorted(row["events_per_s"] for row in rows if row["what"] == what)
        print(f"{what:<14} median {rates[len(rates) // 2]:>12,.0f} ev/s  range {rates[0]:,.0f}-{rates[-1]:,.0f}")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--tws-events", type=int, default=20_000, help="TWS is slow with many keys: a smaller run gives its rate")
    parser.add_argument("--tws-small-key-events", type=int, default=200_000)
    parser.add_argument("--pyflink-events", type=int, default=50_000, help="PyFlink manages ~600 events/s per user id: a smaller run gives its rate")
    parser.add_argument("--skip-pyflink", action="store_true")
    parser.add_argument("--flowpoint-only", action="store_true", help="flowpoint alone, per backend, with the dict rate (issue 29)")
    parser.add_argument("--users", type=int, default=USERS, help="--flowpoint-only: distinct user ids; 0: one per event")
    parser.add_argument("--runtime", default="continuous", help="--flowpoint-only: execution.runtime")
    parser.add_argument("--backends", default="hashmap,rocksdb", help="--flowpoint-only: state.backend.type values")
    parser.add_argument("--checkpoint-ms", type=int, default=10_000, help="--flowpoint-only: checkpoint interval (0: none)")
    parser.add_argument("--rounds", type=int, default=1, help="--flowpoint-only: rounds of all backends")
    parser.add_argument("--slot", action="store_true", help="the per-record work of the slots without Spark, in one thread (issue 29)")
    parser.add_argument("--key", choices=("field", "lambda"), default="field", help="--flowpoint-only: key_by('id') or key_by(lambda e: e.id)")
    args = parser.parse_args()
    if args.slot:
        print(json.dumps(measure_slot(args.events)), flush=True)
        return 0
    if args.flowpoint_only:
        return main_flowpoint_only(args)

    spark = make_session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    workdir = tempfile.mkdtemp(prefix="flowpoint-bench-")
    measure_flowpoint(spark, 20_000, "id", epochs=2)  # warm the Python workers
    rows = []
    for key, tws_n in (("id", args.tws_events), ("channel_behavior", args.tws_small_key_events)):
        fp = measure_flowpoint(spark, args.events, key)
        tws = measure_tws(spark, tws_n, USERS, key, epochs=10, workdir=workdir)
        pf_n = args.pyflink_events if key == "id" else min(args.events, 200_000)
        pf = None if args.skip_pyflink else measure_pyflink(pf_n, USERS, key, verify=False)
        row = {
            "workload": key, "flowpoint": fp, "spark_tws": tws, "pyflink": pf,
            "ratio_vs_tws": fp["events_per_s"] / tws["events_per_s"],
            "ratio_vs_pyflink": (fp["events_per_s"] / pf["events_per_s"]) if pf else None,
        }
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items()}, default=str), flush=True)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "keyed_count.json"), "w") as f:
        json.dump(rows, f, indent=2, default=str)
    print()
    print(f"{'workload':<18}{'flowpoint ev/s':>16}{'TWS ev/s':>12}{'ratio':>8}{'PyFlink ev/s':>14}{'ratio':>8}")
    for r in rows:
        pf = r["pyflink"]
        print(f"{r['workload']:<18}{r['flowpoint']['events_per_s']:>16,.0f}{r['spark_tws']['events_per_s']:>12,.0f}"
              f"{r['ratio_vs_tws']:>8.1f}{(pf['events_per_s'] if pf else float('nan')):>14,.0f}"
              f"{(r['ratio_vs_pyflink'] or float('nan')):>8.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
