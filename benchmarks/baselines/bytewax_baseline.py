"""Bytewax baseline for the keyed count (issue 29: 1,000,000 distinct keys).

Two roles in one file, like ``pyflink_baseline.py``:

* Run with the Bytewax virtualenv's python (made by ``setup_bytewax.sh``), it executes the count
  job and prints one JSON line::

      benchmarks/.venv-bytewax/bin/python benchmarks/baselines/bytewax_baseline.py \
          --n-events 1000000 --num-users none --mode single

  Job: a ``DynamicSource`` in which each worker makes its share of the event indices (a
  contiguous range, ``--batch-size`` events a batch) into click events with the same splitmix64
  generator as ``flowpoint.connectors.clicks.ClickEventGenerator`` (``make_event``, imported from
  ``pyflink_baseline.py``, so all engines see the same data) -> ``op.key_on`` the user id ->
  ``op.stateful_map`` keeping the per-key count and emitting ``(key, count)`` per event -> a sink
  that discards the items (it only counts them, one ``len`` a batch). Modes:

  - ``single``: one worker, ``bytewax.testing.run_main`` in this process;
  - ``threads2``: two workers in this process (``cli_main(workers_per_process=2)``, what
    ``python -m bytewax.run -w 2`` does);
  - ``procs2``: two processes of one worker each (``-i 0/1 -a host:port;host:port``, what
    ``python -m bytewax.testing -p 2`` spawns), started by this process.

  Rate = events / the run's time: from just before ``run_main``/``cli_main`` to its return
  (``procs2``: from the first process's start of ``cli_main`` to the last one's return, wall clock;
  interpreter start and imports excluded in every mode). Every mode checks that the sink got one
  item per event. With ``--verify`` (default) a second, untimed run of the same mode keeps each
  key's last count in the sink and checks that they sum to ``n`` over ``n`` keys' worth of events.

* Imported from the main interpreter, :func:`measure_bytewax` runs the above as a subprocess and
  returns the parsed dict, or ``None`` when the venv does not exist.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VENV = os.path.abspath(os.path.join(HERE, "..", ".venv-bytewax"))
MODES = ("single", "threads2", "procs2")


# --------------------------------------------------------------------------------------------
# caller side (main interpreter)
# --------------------------------------------------------------------------------------------


def venv_python(venv: str | None = None) -> str | None:
    py = os.path.join(venv or os.environ.get("BYTEWAX_VENV", DEFAULT_VENV), "bin", "python")
    return py if os.path.exists(py) else None


def measure_bytewax(
    n_events: int,
    num_users: int | None,
    *,
    mode: str = "single",
    batch_size: int = 1000,
    verify: bool = True,
    venv: str | None = None,
    timeout: float | None = 3600,
) -> dict | None:
    """Run the Bytewax count job in the Bytewax venv; ``None`` if the venv is missing.

    Returns ``{"engine": "bytewax", "mode": mode, "events": n, "seconds": s, "events_per_s": n/s, ...}``;
    raises ``RuntimeError`` if the job fails or its counts are wrong.
    """
    py = venv_python(venv)
    if py is None:
        return None
    cmd = [py, os.path.abspath(__file__), "--n-events", str(n_events), "--mode", mode,
           "--num-users", "none" if num_users is None else str(num_users), "--batch-size", str(batch_size)]
    if not verify:
        cmd.append("--no-verify")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{") and proc.returncode == 0:
            return json.loads(line)
    msg = f"bytewax baseline failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    raise RuntimeError(msg)


# --------------------------------------------------------------------------------------------
# job side (Bytewax venv)
# --------------------------------------------------------------------------------------------


def build_flow(n_events: int, num_users: int | None, batch_size: int, out_dir: str, keep_final: bool):  # type: ignore[no-untyped-def]
    """The count dataflow. Each worker's source writes the wall-clock time it was built to
    ``out_dir/start-<i>.json``; its sink writes ``out_dir/worker-<i>.json`` when it closes: the time,
    the items it got and, with ``keep_final`` (verification), the number of keys and the sum of
    their last counts."""
    import bytewax.operators as op
    from bytewax.dataflow import Dataflow
    from bytewax.inputs import DynamicSource, StatelessSourcePartition
    from bytewax.outputs import DynamicSink, StatelessSinkPartition

    sys.path.insert(0, HERE)
    from pyflink_baseline import make_event

    class Indices(StatelessSourcePartition):
        def __init__(self, lo: int, hi: int) -> None:
            self.next, self.hi = lo, hi

        def next_batch(self):  # type: ignore[no-untyped-def]
            lo = self.next
            if lo >= self.hi:
                raise StopIteration
            self.next = min(self.hi, lo + batch_size)
            return [make_event(i, num_users) for i in range(lo, self.next)]

    class Clicks(DynamicSource):
        def build(self, step_id, worker_index, worker_count):  # type: ignore[no-untyped-def]
            with open(os.path.join(out_dir, f"start-{worker_index}.json"), "w") as f:
                json.dump(time.time(), f)
            return Indices(n_events * worker_index // worker_count, n_events * (worker_index + 1) // worker_count)

    class Counted(StatelessSinkPartition):
        def __init__(self, worker_index: int) -> None:
            self.worker_index, self.items, self.final = worker_index, 0, {}

        def write_batch(self, items):  # type: ignore[no-untyped-def]
            self.items += len(items)
            if keep_final:
                self.final.update(items)

        def close(self) -> None:
            summary = {"items": self.items, "keys": len(self.final), "final_sum": sum(self.final.values()),
                       "end": time.time()}
            with open(os.path.join(out_dir, f"worker-{self.worker_index}.json"), "w") as f:
                json.dump(summary, f)

    class Discard(DynamicSink):
        def build(self, step_id, worker_index, worker_count):  # type: ignore[no-untyped-def]
            return Counted(worker_index)

    def count(state, _event):  # type: ignore[no-untyped-def]
        c = (state or 0) + 1
        return c, c

    flow = Dataflow("bytewax_count")
    events = op.input("clicks", flow, Clicks())
    keyed = op.key_on("by_id", events, lambda e: e[2])
    op.output("discard", op.stateful_map("count", keyed, count), Discard())
    return flow


def _free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def _run_procs2(args, out_dir: str, keep_final: bool) -> None:  # type: ignore[no-untyped-def]
    """Two processes of this script, one worker each, connected over local ports."""
    addresses = ";".join(f"127.0.0.1:{p}" for p in _free_ports(2))
    procs = [
        subprocess.Popen([sys.executable, os.path.abspath(__file__), "--n-events", str(args.n_events),
                          "--num-users", args.num_users, "--batch-size", str(args.batch_size),
                          "--process-id", str(i), "--addresses", addresses, "--out-dir", out_dir]
                         + (["--keep-final"] if keep_final else []))
        for i in range(2)
    ]
    if any(p.wait() != 0 for p in procs):
        msg = "a bytewax process failed"
        raise RuntimeError(msg)


def _collect(out_dir: str) -> dict:
    """The workers' sink summaries added up; ``seconds`` from the first source's build to the last
    sink's close (wall clock, so it spans processes)."""
    total = {"items": 0, "keys": 0, "final_sum": 0, "workers": 0}
    starts, ends = [], []
    for name in os.listdir(out_dir):
        with open(os.path.join(out_dir, name)) as f:
            data = json.load(f)
        if name.startswith("start-"):
            starts.append(data)
            continue
        ends.append(data.pop("end"))
        for k, v in data.items():
            total[k] += v
        total["workers"] += 1
    total["seconds"] = max(ends) - min(starts)
    return total


def run_once(args, keep_final: bool) -> dict:  # type: ignore[no-untyped-def]
    """One run of ``args.mode``: :func:`_collect`'s summary, and ``run_seconds``, the time around
    ``run_main``/``cli_main`` (``procs2``: around the two processes, their start included)."""
    from bytewax._bytewax import cli_main
    from bytewax.testing import run_main

    num_users = None if args.num_users.lower() == "none" else int(args.num_users)
    with tempfile.TemporaryDirectory(prefix="bytewax-bench-") as out_dir:
        start = time.perf_counter()
        if args.mode == "procs2":
            _run_procs2(args, out_dir, keep_final)
        else:
            flow = build_flow(args.n_events, num_users, args.batch_size, out_dir, keep_final)
            start = time.perf_counter()
            if args.mode == "single":
                run_main(flow)
            else:
                cli_main(flow, workers_per_process=2)
        run_seconds = time.perf_counter() - start
        total = _collect(out_dir)
    total["run_seconds"] = run_seconds
    return total


def run_process(args) -> None:  # type: ignore[no-untyped-def]
    """One process of ``procs2``: this process's worker of the cluster."""
    from bytewax._bytewax import cli_main

    num_users = None if args.num_users.lower() == "none" else int(args.num_users)
    flow = build_flow(args.n_events, num_users, args.batch_size, args.out_dir, args.keep_final)
    cli_main(flow, workers_per_process=1, process_id=args.process_id, addresses=args.addresses.split(";"))


def run_job(args) -> dict:  # type: ignore[no-untyped-def]
    import importlib.metadata

    n = args.n_events
    timed = run_once(args, keep_final=False)
    if timed["items"] != n:
        msg = f"bytewax emitted {timed['items']} items, expected {n}"
        raise RuntimeError(msg)
    result: dict = {
        "engine": "bytewax", "bytewax_version": importlib.metadata.version("bytewax"), "mode": args.mode,
        "workers": timed["workers"], "batch_size": args.batch_size, "num_users": args.num_users,
        "events": n, "load_avg_1m": os.getloadavg()[0], "seconds": timed["seconds"],
        "events_per_s": n / timed["seconds"], "run_seconds": timed["run_seconds"],
    }
    if args.verify:
        check = run_once(args, keep_final=True)
        if check["items"] != n or check["final_sum"] != n:
            msg = f"bytewax verification: {check['items']} items, final counts sum to {check['final_sum']}, expected {n}"
            raise RuntimeError(msg)
        result["keys"] = check["keys"]
        result["verified"] = True
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-events", type=int, default=1_000_000)
    p.add_argument("--num-users", default="none", help="int or 'none' (unique ids)")
    p.add_argument("--mode", choices=MODES, default="single")
    p.add_argument("--batch-size", type=int, default=1000, help="events a source batch")
    p.add_argument("--no-verify", dest="verify", action="store_false")
    # internal: one process of --mode procs2
    p.add_argument("--process-id", type=int, help=argparse.SUPPRESS)
    p.add_argument("--addresses", help=argparse.SUPPRESS)
    p.add_argument("--out-dir", help=argparse.SUPPRESS)
    p.add_argument("--keep-final", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.process_id is not None:
        run_process(args)
        return 0
    print(json.dumps(run_job(args)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
