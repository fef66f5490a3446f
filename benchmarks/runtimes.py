"""Throughput of the two runtimes on the same workloads, in one run (issue 18).

The keyed count of benchmarks/keyed_count.py (200,000 user ids, and the small key (channel,
behavior)) and the windowed count of benchmarks/windowed_count.py (one-minute tumbling event-time
windows, aggregate), each on the epoch runtime and on the continuous runtime, alternately, so the
ratio compares like with like on a shared, noisy machine. ``execution.epoch.max-records`` is the
read budget of an epoch on the first and of one read assignment on the second.

    python benchmarks/runtimes.py [--events 1000000] [--window-events 2000000] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks import keyed_count, windowed_count  # noqa: E402

RUNTIMES = {"epoch": {"execution.runtime": "epoch"}, "continuous": {"execution.runtime": "continuous", "execution.buffer-timeout": 100}}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=1_000_000)
    parser.add_argument("--window-events", type=int, default=2_000_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--results", default=os.path.join(HERE, "results", f"runtimes-{time.strftime('%Y%m%d-%H%M%S')}.json"))
    args = parser.parse_args()
    spark = windowed_count.make_session()
    workdir = tempfile.mkdtemp(prefix="runtimes-")
    rows: list[dict] = []
    try:
        small = windowed_count.write_events(os.path.join(workdir, "warmup"), 100_000, 4, 30_000)
        for config in RUNTIMES.values():  # start-up costs (Python workers, imports) outside the measured runs
            windowed_count.measure_flowpoint(spark, small, 100_000, 4, windowed_count.expected_counts(small), "aggregate", config)
        data = windowed_count.write_events(os.path.join(workdir, "events"), args.window_events, 20, 30_000)
        expected = windowed_count.expected_counts(data)
        for r in range(args.rounds):
            for runtime, config in RUNTIMES.items():
                for key in ("id", "channel_behavior"):
                    row = keyed_count.measure_flowpoint(spark, args.events, key, config=config)
                    rows.append({"workload": f"keyed count ({key})", "runtime": runtime, "round": r, **row})
                    print(json.dumps(rows[-1]), flush=True)
                row = windowed_count.measure_flowpoint(spark, data, args.window_events, 20, expected, "aggregate", config)
                rows.append({"workload": "windowed count (aggregate)", "runtime": runtime, "round": r, **row})
                print(json.dumps(rows[-1]), flush=True)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    print(f"\n{'workload':<30}{'epoch ev/s':>14}{'continuous ev/s':>18}{'continuous/epoch':>18}")
    for workload in dict.fromkeys(r["workload"] for r in rows):
        rate = {rt: statistics.median(r["events_per_s"] for r in rows if r["workload"] == workload and r["runtime"] == rt) for rt in RUNTIMES}
        print(f"{workload:<30}{rate['epoch']:>14,.0f}{rate['continuous']:>18,.0f}{rate['continuous'] / rate['epoch']:>18.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
