"""Keyed ValueState count: flowpoint vs Spark's transformWithStateInPandas (and PyFlink if set up).

Workload (issue 2): click events of seed 000's shape, keyed by user id (200,000 distinct ids),
a KeyedProcessFunction keeping a per-user ValueState count, 10 epochs, local[2]. The same for the
small-key workload keyed by (channel, behavior). All engines run in this one process/run, so the
ratios compare like with like on a shared, noisy machine.

    python benchmarks/keyed_count.py [--events 1000000] [--tws-events 20000] [--skip-pyflink]
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


def by_channel_behavior(e):
    return e.channel, e.behavior


def measure_flowpoint(spark, n_events: int, key: str, epochs: int = 10, config: dict | None = None) -> dict:
    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.progress.interval": -1, "parallelism.default": 2, **(config or {})}, spark_session=spark
    )
    env.set_epoch_max_records(max(1, n_events // epochs))
    source = DataGeneratorSource(ClickEventGenerator(num_users=USERS), count=n_events)
    stream = env.from_source(source, source_name="clicks")
    keyed = stream.key_by("id") if key == "id" else stream.key_by(by_channel_behavior)
    keyed.process(CountPerKey()).uid("count")
    t0 = time.perf_counter()
    result = env.execute(f"bench-{key}")
    seconds = time.perf_counter() - t0
    counts = result.get_keyed_state("count", "count")
    assert sum(counts.values()) == n_events, "flowpoint lost or duplicated events"
    return {"engine": "flowpoint", "events": n_events, "keys": len(counts), "epochs": result.epochs,
            "seconds": seconds, "events_per_s": n_events / seconds}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--tws-events", type=int, default=20_000, help="TWS is slow with many keys: a smaller run gives its rate")
    parser.add_argument("--tws-small-key-events", type=int, default=200_000)
    parser.add_argument("--pyflink-events", type=int, default=50_000, help="PyFlink manages ~600 events/s per user id: a smaller run gives its rate")
    parser.add_argument("--skip-pyflink", action="store_true")
    args = parser.parse_args()

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
