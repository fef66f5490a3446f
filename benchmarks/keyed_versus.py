"""Keyed count over 1,000,000 distinct keys: flowpoint vs PyFlink vs Bytewax, in one run (issue 29).

Workload: 1,000,000 click events, every event its own user id (``ClickEventGenerator(num_users=None)``,
the same splitmix64 events in all engines), keyed by user id, a per-key count in keyed state,
``(key, count)`` per event for PyFlink and Bytewax (discarded), flowpoint's ``KeyedProcessFunction``
updating its ``ValueState``. Measured in this one run, engine after engine in every round (the
order reversed every other round, so drift of the machine's load spreads over all of them):

- flowpoint, ``execution.runtime: continuous``, parallelism 2, ``local[2]``, checkpoints every
  ``--checkpoint-ms``, one job per backend (``keyed_count.py --flowpoint-only --users 0`` does the
  same: the function updates its state and emits nothing), and one per ``--emit-backends`` whose
  function also emits ``(key, count)`` per event into a sink that drops it, as the baselines do;
- PyFlink (``baselines/pyflink_baseline.py``, its venv made by ``baselines/setup_pyflink.sh``) in
  ``--pyflink-mode`` at ``--pyflink-parallelism`` (default thread mode, parallelism 1: its best here);
- Bytewax (``baselines/bytewax_baseline.py``, venv by ``baselines/setup_bytewax.sh``), each of
  ``--bytewax-modes`` (one worker; two worker threads; two processes); the best is compared;
- a Python dict's ``d[k] = d.get(k, 0) + 1`` over the same keys, on one core (best of 3).

An engine whose venv is missing is reported as not set up, with the script that sets it up.
The baselines verify their counts (an untimed second run) in the first round only; flowpoint
checks its state's counts after every job.

    python benchmarks/keyed_versus.py [--events 1000000] [--rounds 3]

Writes every measurement to ``benchmarks/results/keyed_versus.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from benchmarks.baselines.bytewax_baseline import measure_bytewax  # noqa: E402
from benchmarks.baselines.pyflink_baseline import measure_pyflink  # noqa: E402
from benchmarks.baselines.spark_tws import make_session  # noqa: E402
from benchmarks.keyed_count import backend_config, dict_rate, measure_flowpoint  # noqa: E402

NOT_SET_UP = "not set up (run benchmarks/baselines/setup_{}.sh)"


def engines(args) -> list[tuple[str, str]]:  # type: ignore[no-untyped-def]
    """``(engine, configuration)`` of every measurement a round makes, in the round's order."""
    return ([("dict", "get+set, 1 core")]
            + [("flowpoint", b) for b in args.backends.split(",")]
            + [("flowpoint", f"{b}, emits (key, count)") for b in args.emit_backends.split(",") if b]
            + [("pyflink", f"{args.pyflink_mode} mode, parallelism {args.pyflink_parallelism}")]
            + [("bytewax", m) for m in args.bytewax_modes.split(",")])


def measure(args, spark, workdir: str, engine: str, config: str, r: int) -> dict:  # type: ignore[no-untyped-def]
    """One measurement: ``{"events_per_s": ...}`` and what the engine reported, or ``{"status": why not}``."""
    n, verify = args.events, r == 0 and args.verify
    try:
        if engine == "dict":
            return {"events_per_s": dict_rate(n, None)}
        if engine == "flowpoint":
            backend = config.split(",")[0]
            return measure_flowpoint(spark, n, "id", config=backend_config("continuous", backend, workdir, r),
                                     users=None, checkpoint_ms=args.checkpoint_ms, emit="emits" in config)
        if engine == "pyflink":
            result = measure_pyflink(n, None, "id", parallelism=args.pyflink_parallelism, mode=args.pyflink_mode,
                                     verify=verify)
        else:
            result = measure_bytewax(n, None, mode=config, batch_size=args.bytewax_batch_size, verify=verify)
    except (RuntimeError, OSError, AssertionError) as e:  # a failed engine is reported, the others go on
        return {"status": f"failed: {str(e).strip().splitlines()[-1][:300]}"}
    return result if result is not None else {"status": NOT_SET_UP.format(engine)}


def run_rounds(args) -> list[dict]:  # type: ignore[no-untyped-def]
    spark = make_session("local[2]")
    spark.sparkContext.setLogLevel("ERROR")
    workdir = tempfile.mkdtemp(prefix="flowpoint-versus-")
    try:
        for backend in args.backends.split(","):  # warm the Python workers and each backend's imports
            measure_flowpoint(spark, 20_000, "id", epochs=2, config=backend_config("continuous", backend, workdir, "warm"),
                              users=None, checkpoint_ms=args.checkpoint_ms)
        rows = []
        for r in range(args.rounds):
            order = engines(args) if r % 2 == 0 else engines(args)[::-1]
            for engine, config in order:
                t0 = time.time()
                result = measure(args, spark, workdir, engine, config, r)
                row = {"round": r, "engine": engine, "config": config, "load_avg": os.getloadavg(),
                       "started": time.strftime("%H:%M:%S", time.gmtime(t0)), **result}
                rows.append(row)
                print(json.dumps(row, default=str), flush=True)
                for name in os.listdir(workdir):  # the job's checkpoints and working files
                    shutil.rmtree(os.path.join(workdir, name), ignore_errors=True)
        return rows
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
        spark.stop()


def _median(xs: list[float]) -> float:
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2


def summarize(rows: list[dict]) -> list[dict]:
    """Per ``(engine, config)``: the rates of the rounds, their median, or the status if it never ran."""
    out = []
    for engine, config in dict.fromkeys((r["engine"], r["config"]) for r in rows):
        mine = [r for r in rows if (r["engine"], r["config"]) == (engine, config)]
        rates = [r["events_per_s"] for r in mine if "events_per_s" in r]
        statuses = sorted({r["status"] for r in mine if "status" in r})
        out.append({"engine": engine, "config": config, "rates": rates,
                    "median": _median(rates) if rates else None, "status": "; ".join(statuses)})
    return out


def best(summary: list[dict], engine: str) -> dict | None:
    ran = [s for s in summary if s["engine"] == engine and s["median"]]
    return max(ran, key=lambda s: s["median"]) if ran else None


def _ratio(x: float) -> str:
    return f"{x:.3f}x" if x < 0.1 else f"{x:.2f}x" if x < 10 else f"{x:.1f}x"


def ratio_cell(s: dict, ref: dict | None, rows: list[dict]) -> str:
    """flowpoint's median over the reference's, and the range of the same ratio round by round."""
    if ref is None or s["engine"] != "flowpoint":
        return ""
    by_round = {r["round"]: r["events_per_s"] for r in rows
                if (r["engine"], r["config"]) == (ref["engine"], ref["config"]) and "events_per_s" in r}
    per_round = [r["events_per_s"] / by_round[r["round"]] for r in rows
                 if (r["engine"], r["config"]) == ("flowpoint", s["config"]) and "events_per_s" in r and r["round"] in by_round]
    spread = f" ({_ratio(min(per_round))}-{_ratio(max(per_round))})" if len(per_round) > 1 else ""
    return _ratio(s["median"] / ref["median"]) + spread


def print_table(summary: list[dict], rows: list[dict]) -> None:
    """Markdown: events/s (median and range over the rounds) and flowpoint's ratios to PyFlink, to
    Bytewax's best configuration and to the dict: of the medians, and (in brackets) round by round."""
    refs = {"PyFlink": best(summary, "pyflink"), "Bytewax": best(summary, "bytewax"), "dict": best(summary, "dict")}
    print("| engine | configuration | events/s (median) | range over rounds | / PyFlink | / Bytewax | / dict |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for s in summary:
        if s["median"] is None:
            print(f"| {s['engine']} | {s['config']} | {s['status']} | | | | |")
            continue
        ratios = [ratio_cell(s, ref, rows) for ref in refs.values()]
        rng = f"{min(s['rates']):,.0f}-{max(s['rates']):,.0f}"
        note = f" ({s['status']})" if s["status"] else ""
        print(f"| {s['engine']} | {s['config']}{note} | {s['median']:,.0f} | {rng} | " + " | ".join(ratios) + " |")
    for name, ref in refs.items():
        print(f"{name}: {'not measured' if ref is None else ref['config']}" + (" (best)" if ref and name == "Bytewax" else ""))
    loads = [r["load_avg"][0] for r in rows]
    print(f"rounds: {max(r['round'] for r in rows) + 1}; load average (1 min) during the run: {min(loads):.1f}-{max(loads):.1f}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--events", type=int, default=1_000_000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--backends", default="hashmap,rocksdb", help="flowpoint's state.backend.type values")
    p.add_argument("--emit-backends", default="hashmap",
                   help="backends also measured with the function emitting (key, count) per event to a "
                        "discarding sink, as the baselines do ('': none)")
    p.add_argument("--checkpoint-ms", type=int, default=10_000, help="flowpoint's checkpoint interval (0: none)")
    p.add_argument("--pyflink-mode", choices=("thread", "process"), default="thread")
    p.add_argument("--pyflink-parallelism", type=int, default=1)
    p.add_argument("--bytewax-modes", default="single,threads2,procs2")
    p.add_argument("--bytewax-batch-size", type=int, default=1000)
    p.add_argument("--no-verify", dest="verify", action="store_false", help="skip the baselines' check runs")
    args = p.parse_args()
    rows = run_rounds(args)
    os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
    with open(os.path.join(HERE, "results", "keyed_versus.json"), "w") as f:
        json.dump({"args": vars(args), "rows": rows}, f, indent=2, default=str)
    print()
    print_table(summarize(rows), rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
