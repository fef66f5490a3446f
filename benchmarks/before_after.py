"""flowpoint before vs after a change, on local[2], in one run: keyed_count and windowed_count.

Runs the flowpoint part of ``benchmarks/keyed_count.py`` (per user id, 200,000 keys; per
channel x behaviour, 28 keys; 1,000,000 events in 10 epochs) and of
``benchmarks/windowed_count.py`` (10,000,000 events: ``aggregate`` and ``process`` in 20 epochs,
``aggregate`` in 100 epochs) with two versions of the code, alternating, ``--reps`` times, each
version in its own Python process (and Spark JVM) so that nothing of one version is loaded in
the other. Both processes start (and warm up, as the scripts do) once, then take turns: every
measurement runs on one version and at once on the other (the order flips every time), so both
see nearly the same load on a shared machine. Each version's own copy of the two benchmark
scripts is used (their ``measure_flowpoint`` functions and warm-ups), so both sides run exactly
the code of their tree; both use keyed_count.py's Spark session (local[2]).

A version is a directory holding a ``flowpoint`` package (a git worktree) or a git revision of
this repository, extracted with ``git archive`` into a temporary directory. The child process
runs with its working directory and ``PYTHONPATH`` at that tree (setuptools' editable finder
comes after ``sys.path`` in ``sys.meta_path``, and Spark's Python workers start with the working
directory first on their path), and checks that ``flowpoint`` comes from that tree in the driver
AND in Spark's Python workers before measuring; it aborts otherwise.

Backends: the benchmarks use the default (HashMap); ``--backends hashmap,rocksdb`` also runs them
with ``state.backend.type: rocksdb`` through ``$FLOWPOINT_CONF_DIR/flowpoint.yaml``.

    python benchmarks/before_after.py --old 57b8d4e --new HEAD            # about 1 h on 2 cores
    python benchmarks/before_after.py --old /work/baseline --new . --reps 1 --quick

Prints one table: best-of-reps events/s per version and the ratio new/old (and the ratio of
medians and the spread of the per-rep ratios, to show the noise); writes
``benchmarks/results/before_after.json``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)

KEYED = ("keyed-id", "keyed-28keys")
WINDOWED = ("windowed-aggregate-e20", "windowed-process-e20", "windowed-aggregate-e100")


# -- the child: one version, serving measurements ----------------------------------------------------


def _emit(obj: dict) -> None:
    print("RESULT " + json.dumps(obj), flush=True)


def _check_imports(tree: str, spark) -> dict:
    """flowpoint must come from ``tree`` in the driver and in every Python worker."""
    import flowpoint

    want = os.path.join(os.path.realpath(tree), "flowpoint", "__init__.py")
    driver = os.path.realpath(flowpoint.__file__)

    def where(_):
        import os as _os
        import sys as _sys

        import flowpoint as _fp

        return [(_os.getpid(), _os.path.realpath(_fp.__file__), _os.getcwd(), _sys.path[:2])]

    workers = spark.sparkContext.parallelize(range(8), 8).mapPartitions(where).collect()
    bad = [w for w in workers if w[1] != want]
    if driver != want or bad:
        msg = f"flowpoint imported from the wrong tree: want {want}, driver {driver}, workers {bad}"
        raise SystemExit(msg)
    return {"driver": driver, "workers": sorted({w[1] for w in workers}), "worker_pids": sorted({w[0] for w in workers})}


def child(args: argparse.Namespace) -> int:
    """Serve measurements of one tree: a JSON command per stdin line, a RESULT line per command."""
    tree = os.path.realpath(args.tree)
    # nothing of this script's own folder: only the tree's modules
    sys.path[:] = [tree] + [p for p in sys.path if p and os.path.realpath(p) not in (HERE, os.path.realpath(REPO))]
    os.chdir(tree)
    import importlib

    kc = importlib.import_module("benchmarks.keyed_count")
    wc = importlib.import_module("benchmarks.windowed_count")
    from benchmarks.baselines.spark_tws import make_session

    spark = make_session("local[2]")  # keyed_count.py's session; windowed_count's make_session adopts it
    wc.make_session()
    spark.sparkContext.setLogLevel("ERROR")
    info = _check_imports(tree, spark)
    # warm-ups, as the two scripts do: Python workers, then the windowed job once on 200,000 events
    kc.measure_flowpoint(spark, 20_000, "id", epochs=2)
    small = wc.write_events(os.path.join(args.workdir, "warmup"), 200_000, 4, 30_000)
    wc.measure_flowpoint(spark, small, 200_000, 4, wc.expected_counts(small), "aggregate")
    _emit({"ready": True, "imports": info})
    expected: dict[str, dict] = {}
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd.get("conf_dir"):
            os.environ["FLOWPOINT_CONF_DIR"] = cmd["conf_dir"]
        else:
            os.environ.pop("FLOWPOINT_CONF_DIR", None)
        w = cmd["workload"]
        if w.startswith("keyed"):
            r = kc.measure_flowpoint(spark, cmd["events"], "id" if w == "keyed-id" else "channel_behavior")
        else:
            _, fn, e = w.split("-")
            epochs = int(e[1:])
            data = wc.write_events(os.path.join(args.workdir, f"events-{cmd['events']}-{epochs}-30000"), cmd["events"], epochs, 30_000)
            if data not in expected:
                expected[data] = wc.expected_counts(data)
            r = wc.measure_flowpoint(spark, data, cmd["events"], epochs, expected[data], fn)
        _emit({"workload": w, "backend": _backend(), "events_per_s": r["events_per_s"], "seconds": r["seconds"], "load": os.getloadavg()[0]})
    return 0


def _backend() -> str:
    from flowpoint.api.config_file import load_config_file

    return str(load_config_file(None, None).get("state.backend.type", "hashmap"))


# -- the parent ----------------------------------------------------------------------------------


def resolve_tree(spec: str, tmp: str) -> tuple[str, str]:
    """(directory, label): a directory with a flowpoint package, or a git revision extracted."""
    if os.path.isdir(os.path.join(spec, "flowpoint")):
        path = os.path.realpath(spec)
        rev = subprocess.run(["git", "-C", path, "rev-parse", "--short", "HEAD"], capture_output=True, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", path, "status", "--porcelain", "--", "flowpoint"], capture_output=True, text=True).stdout.strip()
        return path, f"{path} ({rev}{', flowpoint/ modified' if dirty else ''})"
    rev = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", spec], capture_output=True, text=True, check=True).stdout.strip()
    path = os.path.join(tmp, f"tree-{rev}")
    if not os.path.isdir(path):
        os.makedirs(path)
        archive = subprocess.run(["git", "-C", REPO, "archive", rev], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", path], input=archive, check=True)
    return path, f"{spec} = {rev} (git archive)"


class Child:
    """One tree's measuring process (its own Python and Spark JVM), fed commands on stdin."""

    def __init__(self, label: str, tree: str, args: argparse.Namespace):
        self.label, self.tree = label, tree
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "FLOWPOINT_CONF_DIR")}
        env["PYTHONPATH"] = tree
        self.log = open(os.path.join(args.tmp, f"{label}.stderr"), "w")  # noqa: SIM115
        cmd = [sys.executable, os.path.abspath(__file__), "--child", "--tree", tree, "--workdir", args.workdir]
        self.proc = subprocess.Popen(cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        head = self._read()
        imp = head["imports"]
        print(f"  {label}: flowpoint from {imp['driver']} (driver) and {imp['workers']} "
              f"({len(imp['worker_pids'])} Python worker pids)", flush=True)

    def _read(self) -> dict:
        for line in self.proc.stdout:
            if line.startswith("RESULT "):
                return json.loads(line[7:])
        self.log.flush()
        with open(self.log.name) as f:
            sys.stderr.write(f.read()[-4000:])
        msg = f"the {self.label} process ended (exit {self.proc.wait()})"
        raise RuntimeError(msg)

    def run(self, cmd: dict) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.proc.stdin.close()
            self.proc.wait(60)
        if self.proc.poll() is None:
            self.proc.kill()
        self.log.close()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--old", default="57b8d4e", help="directory or git revision (default 57b8d4e, before the state rewrite)")
    p.add_argument("--new", default=REPO, help="directory or git revision (default: this working tree)")
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--extra", action="append", default=[], help="another version to measure beside old and new (a candidate fix)")
    p.add_argument("--backends", default="hashmap,rocksdb")
    p.add_argument("--workloads", default=",".join(KEYED + WINDOWED))
    p.add_argument("--rocksdb-workloads", default="keyed-id,keyed-28keys,windowed-aggregate-e20,windowed-aggregate-e100",
                   help="RocksDB's list (process over 10M buffered elements in RocksDB is left out by default)")
    p.add_argument("--events", type=int, default=1_000_000, help="keyed_count events")
    p.add_argument("--windowed-events", type=int, default=10_000_000)
    p.add_argument("--quick", action="store_true", help="100,000 keyed and 1,000,000 windowed events (a smoke run)")
    p.add_argument("--workdir", default=None, help="input files of windowed_count (kept between runs when given)")
    p.add_argument("--keep", action="store_true", help="keep the temporary directory (trees, data, logs)")
    p.add_argument("--results", default=os.path.join(HERE, "results", "before_after.json"))
    # child mode
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--tree", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args)
    if args.quick:
        args.events, args.windowed_events = 100_000, 1_000_000

    tmp = tempfile.mkdtemp(prefix="flowpoint-before-after-")
    args.workdir = args.workdir or os.path.join(tmp, "data")
    os.makedirs(args.workdir, exist_ok=True)
    conf_dirs = {}
    for b in ("rocksdb",):
        d = os.path.join(tmp, f"conf-{b}")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "flowpoint.yaml"), "w") as f:
            f.write(f"state.backend.type: {b}\n")
        conf_dirs[b] = d
    old, old_label = resolve_tree(args.old, tmp)
    new, new_label = resolve_tree(args.new, tmp)
    print(f"reps {args.reps}, backends {args.backends}, "
          f"keyed events {args.events:,}, windowed events {args.windowed_events:,}; load {os.getloadavg()}", flush=True)
    workloads = args.workloads.split(",")
    plan = []
    for backend in args.backends.split(","):
        wl = workloads if backend == "hashmap" else [w for w in workloads if w in args.rocksdb_workloads.split(",")]
        plan += [(w, backend) for w in wl]
    versions = [("old", old, old_label), ("new", new, new_label)]
    for i, spec in enumerate(args.extra):
        path, label = resolve_tree(spec, tmp)
        versions.append((f"extra{i + 1}", path, label))
    names = [v[0] for v in versions]
    samples: dict[tuple[str, str], dict[str, list[float]]] = {}
    pairs: dict[tuple[str, str], dict[str, list[float]]] = {}
    loads = []
    started = time.time()
    args.tmp = tmp
    children = {}
    try:
        for name, path, label in versions:  # one after the other: their warm-ups write the same files
            print(f"{name}: {label}", flush=True)
            children[name] = Child(name, path, args)
        for rep in range(args.reps):
            print(f"rep {rep + 1}/{args.reps}", flush=True)
            for i, (w, backend) in enumerate(plan):
                k = (rep * len(plan) + i) % len(names)
                order = names[k:] + names[:k]  # rotate, so no version always runs first
                if (rep + i) % 2:
                    order = order[::-1]
                got = {}
                for name in order:
                    cmd = {"workload": w, "events": args.windowed_events if w.startswith("windowed") else args.events,
                           "conf_dir": conf_dirs.get(backend)}
                    r = children[name].run(cmd)
                    if r["backend"] != backend:
                        msg = f"{name} ran backend {r['backend']}, wanted {backend}"
                        raise RuntimeError(msg)
                    got[name] = r["events_per_s"]
                    samples.setdefault((w, backend), {n: [] for n in names})[name].append(r["events_per_s"])
                    loads.append(r["load"])
                for name in names[1:]:
                    pairs.setdefault((w, backend), {n: [] for n in names[1:]})[name].append(got[name] / got["old"])
                cells = "  ".join(f"{n} {got[n]:>10,.0f}" for n in names)
                rel = "  ".join(f"{n}/old {got[n] / got['old']:.3f}" for n in names[1:])
                print(f"  [{time.strftime('%H:%M:%S')}] {w:<24}{backend:<8} {cells}  {rel}  (load {loads[-1]:.1f})", flush=True)
    finally:
        for c in children.values():
            c.close()
        if not args.keep:
            shutil.rmtree(tmp, ignore_errors=True)
    rows = []
    for (w, backend), s in samples.items():
        row = {"workload": w, "backend": backend, "samples": s, "best": {n: max(v) for n, v in s.items()},
               "pair_ratios": pairs[(w, backend)]}
        row["ratio_best"] = {n: row["best"][n] / row["best"]["old"] for n in names[1:]}
        row["ratio_median"] = {n: statistics.median(s[n]) / statistics.median(s["old"]) for n in names[1:]}
        rows.append(row)
    os.makedirs(os.path.dirname(os.path.abspath(args.results)), exist_ok=True)
    with open(args.results, "w") as f:
        json.dump({"versions": {n: lab for n, _, lab in versions}, "args": {k: v for k, v in vars(args).items() if k != "tmp"},
                   "rows": rows, "load_avg_1m": [min(loads, default=0), max(loads, default=0)],
                   "date": time.strftime("%Y-%m-%d"), "minutes": (time.time() - started) / 60}, f, indent=2)
    print()
    for n, _, lab in versions:
        print(f"{n} = {lab}")
    print(f"{args.reps} reps, versions alternating per measurement; load average {min(loads, default=0):.1f}-"
          f"{max(loads, default=0):.1f}; {(time.time() - started) / 60:.0f} min\n")
    head = f"{'workload':<26}{'backend':<9}" + "".join(f"{n + ' ev/s':>14}" for n in names)
    head += "".join(f"{n + '/old best':>15}{'median':>8}{'per-rep':>24}" for n in names[1:])
    print(head)
    for r in rows:
        line = f"{r['workload']:<26}{r['backend']:<9}" + "".join(f"{r['best'][n]:>14,.0f}" for n in names)
        for n in names[1:]:
            per = " ".join(f"{x:.2f}" for x in r["pair_ratios"][n])
            line += f"{r['ratio_best'][n]:>15.3f}{r['ratio_median'][n]:>8.3f}{per:>24}"
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
