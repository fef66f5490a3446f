"""PyFlink baseline for the click-count benchmark.

Two roles in one file:

* Run with the PyFlink virtualenv's python (made by ``setup_pyflink.sh``), it executes the count
  job and prints one JSON line::

      benchmarks/.venv-pyflink/bin/python benchmarks/baselines/pyflink_baseline.py \
          --n-events 200000 --num-users 200000 --key id

  Job (local MiniCluster, parallelism 2 or ``--parallelism``, streaming mode, default heap state
  backend, ``--mode process`` (Flink's default) or ``--mode thread`` for
  ``python.execution-mode: thread``, PyFlink's fastest on 1,000,000 distinct keys, at parallelism 1):
  ``NumberSequenceSource(0, n-1)`` -> Python ``map`` index -> click event (the same splitmix64
  generator as ``flowpoint.connectors.clicks.ClickEventGenerator``, copied here because the venv
  does not have flowpoint's dependencies) -> ``key_by(id)`` (or ``channel/behavior``) ->
  ``KeyedProcessFunction`` keeping the count in a ``ValueState`` and emitting ``(key, count)``
  per event -> ``DiscardingSink``. Rate = events / the job's net runtime (JobManager's
  submission-to-finish time: includes task deployment and Python worker start, not MiniCluster
  start). With ``--verify`` (default) a second, untimed run of the same counting emits each key's
  final count once (event-time timer fired by the end-of-input watermark), adds them up in one
  more keyed operator (one key) and checks that they sum to ``n``.

* Imported from the main interpreter, :func:`measure_pyflink` runs the above as a subprocess and
  returns the parsed dict, or ``None`` when the venv does not exist.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_VENV = os.path.abspath(os.path.join(HERE, "..", ".venv-pyflink"))

CHANNELS = ("a", "b", "c", "d")
BEHAVIORS = ("INSTALL", "OPEN", "BROWSE", "CLICK", "PURCHASE", "CLOSE", "UNINSTALL")
DEFAULT_START_TS = 1_700_000_000_000
_M64 = (1 << 64) - 1
# Event-time timers at this time fire only on the final watermark a bounded source emits when done.
_END_OF_INPUT_TS = (1 << 62)


def _mix(x: int) -> int:
    """splitmix64 finalizer; identical to ``flowpoint.connectors.clicks._mix``."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def make_event(index: int, num_users: int | None, seed: int = 0, start_ts: int = DEFAULT_START_TS,
               interval_ms: int = 5) -> tuple[int, str, str, str]:
    """Event ``index`` as ``(ts, channel, id, behavior)``; equals ``ClickEventGenerator(num_users)(index)``
    (seed 0, interval 5 ms, no lateness)."""
    h = _mix((seed * 0x100000001B3 + index) & _M64)
    uid = f"{_mix(h):016x}{h:016x}" if num_users is None else f"user-{(h >> 32) % num_users}"
    return (start_ts + index * interval_ms, CHANNELS[h & 3], uid, BEHAVIORS[(h >> 2) % 7])


# --------------------------------------------------------------------------------------------
# caller side (main interpreter)
# --------------------------------------------------------------------------------------------


def venv_python(venv: str | None = None) -> str | None:
    py = os.path.join(venv or os.environ.get("PYFLINK_VENV", DEFAULT_VENV), "bin", "python")
    return py if os.path.exists(py) else None


def measure_pyflink(
    n_events: int,
    num_users: int | None,
    key: str = "id",
    *,
    parallelism: int = 2,
    mode: str = "process",
    verify: bool = True,
    venv: str | None = None,
    timeout: float | None = 3600,
    conf: dict[str, str] | None = None,
) -> dict | None:
    """Run the PyFlink count job in the PyFlink venv; ``None`` if the venv is missing.

    ``mode`` is ``python.execution-mode``: ``process`` (Beam's Python workers, Flink's default) or
    ``thread`` (the Python functions run in the TaskManager's JVM process through pemja); ``conf``
    are more Flink config entries.

    Returns ``{"engine": "pyflink", "events": n, "seconds": s, "events_per_s": n/s, ...}``;
    raises ``RuntimeError`` if the job fails.
    """
    py = venv_python(venv)
    if py is None:
        return None
    cmd = [py, os.path.abspath(__file__), "--n-events", str(n_events), "--key", key,
           "--num-users", "none" if num_users is None else str(num_users),
           "--parallelism", str(parallelism), "--mode", mode]
    cmd += [f"--conf={k}={v}" for k, v in (conf or {}).items()]
    if not verify:
        cmd.append("--no-verify")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            result = json.loads(line)
            if proc.returncode == 0:
                return result
    msg = f"pyflink baseline failed (rc={proc.returncode}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    raise RuntimeError(msg)


# --------------------------------------------------------------------------------------------
# job side (PyFlink venv)
# --------------------------------------------------------------------------------------------


def _build(env, n_events: int, num_users: int | None, key: str, final_only: bool = False):  # type: ignore[no-untyped-def]
    """The count pipeline. ``final_only`` (verification): instead of ``(key, count)`` per event,
    emit each key's final count once, from an event-time timer that fires at end of input."""
    from pyflink.common import Types, WatermarkStrategy
    from pyflink.datastream import KeyedProcessFunction
    from pyflink.datastream.connectors.number_seq import NumberSequenceSource
    from pyflink.datastream.state import ValueStateDescriptor

    event_type = Types.TUPLE([Types.LONG(), Types.STRING(), Types.STRING(), Types.STRING()])
    out_type = Types.TUPLE([Types.STRING(), Types.LONG()])

    class Count(KeyedProcessFunction):
        def open(self, runtime_context):  # type: ignore[no-untyped-def]
            self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

        def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
            c = (self.count.value() or 0) + 1
            self.count.update(c)
            if not final_only:
                yield ctx.get_current_key(), c
            elif c == 1:
                ctx.timer_service().register_event_time_timer(_END_OF_INPUT_TS)

        def on_timer(self, timestamp, ctx):  # type: ignore[no-untyped-def]
            yield ctx.get_current_key(), self.count.value()

    users = num_users
    events = (
        env.from_source(NumberSequenceSource(0, n_events - 1), WatermarkStrategy.no_watermarks(), "indices")
        .map(lambda i: make_event(i, users), output_type=event_type)
    )
    if key == "id":
        keyed = events.key_by(lambda e: e[2], key_type=Types.STRING())
    elif key == "channel_behavior":
        keyed = events.key_by(lambda e: e[1] + "/" + e[3], key_type=Types.STRING())
    else:
        msg = f"unknown key {key!r}"
        raise ValueError(msg)
    return keyed.process(Count(), output_type=out_type)


def _summed(finals):  # type: ignore[no-untyped-def]
    """One record at the end of input, ``(keys, sum of their final counts)``: the check collects it
    rather than a record per key (a million records through py4j's iterator take minutes)."""
    from pyflink.common import Types
    from pyflink.datastream import KeyedProcessFunction
    from pyflink.datastream.state import ValueStateDescriptor

    class Sum(KeyedProcessFunction):
        def open(self, runtime_context):  # type: ignore[no-untyped-def]
            self.keys = runtime_context.get_state(ValueStateDescriptor("keys", Types.LONG()))
            self.total = runtime_context.get_state(ValueStateDescriptor("total", Types.LONG()))

        def process_element(self, value, ctx):  # type: ignore[no-untyped-def]
            if self.keys.value() is None:  # after the per-key timers, which fire at _END_OF_INPUT_TS
                ctx.timer_service().register_event_time_timer(_END_OF_INPUT_TS + 1)
            self.keys.update((self.keys.value() or 0) + 1)
            self.total.update((self.total.value() or 0) + value[1])

        def on_timer(self, timestamp, ctx):  # type: ignore[no-untyped-def]
            yield self.keys.value(), self.total.value()

    out_type = Types.TUPLE([Types.LONG(), Types.LONG()])
    return finals.key_by(lambda kc: 0, key_type=Types.INT()).process(Sum(), output_type=out_type)


def _env(parallelism: int, options: dict[str, str] | None = None):  # type: ignore[no-untyped-def]
    from pyflink.common import Configuration
    from pyflink.datastream import RuntimeExecutionMode, StreamExecutionEnvironment

    conf = Configuration()
    conf.set_string("rest.bind-port", "0")  # random port, so concurrent runs don't collide
    for k, v in (options or {}).items():
        conf.set_string(k, str(v))
    env = StreamExecutionEnvironment.get_execution_environment(conf)
    env.set_parallelism(parallelism)
    env.set_runtime_mode(RuntimeExecutionMode.STREAMING)
    # Python workers must run in this venv (the default is whatever `python` is on PATH).
    env.set_python_executable(sys.executable)
    # The module holding make_event must be importable by the Python workers.
    env.add_python_file(os.path.abspath(__file__))
    return env


def _embedded_python_path() -> None:
    """Thread mode: the interpreter pemja embeds in the JVM is the base Python (the libpython of
    this venv's interpreter), whose ``sys.path`` lacks this venv's site-packages ("No module named
    'pemja'"). The JVM, launched from here, passes ``PYTHONPATH`` on to it."""
    import site

    paths = [*site.getsitepackages(), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))


def run_job(n_events: int, num_users: int | None, key: str, parallelism: int = 2, verify: bool = True,
            options: dict[str, str] | None = None) -> dict:
    """Run the count job in this interpreter (needs pyflink); ``options`` are Flink config entries
    (e.g. ``{"python.state.cache-size": "262144"}``)."""
    import importlib.metadata

    from pyflink.datastream.connectors.base import Sink
    from pyflink.java_gateway import get_gateway

    if (options or {}).get("python.execution-mode") == "thread":
        _embedded_python_path()
    env = _env(parallelism, options)
    counts = _build(env, n_events, num_users, key)
    jvm = get_gateway().jvm
    counts.sink_to(Sink(jvm.org.apache.flink.streaming.api.functions.sink.v2.DiscardingSink()))
    t0 = time.perf_counter()
    job = env.execute(f"pyflink-count-{key}")
    wall = time.perf_counter() - t0
    net = job.get_net_runtime() / 1000.0
    result: dict = {
        "engine": "pyflink",
        "flink_version": importlib.metadata.version("apache-flink"),
        "key": key,
        "num_users": num_users,
        "events": n_events,
        "load_avg_1m": os.getloadavg()[0],
        "parallelism": parallelism,
        "mode": (options or {}).get("python.execution-mode", "process"),
        "options": options or {},
        "seconds": net,
        "events_per_s": n_events / net,
        "wall_seconds": wall,
        "wall_events_per_s": n_events / wall,
    }
    if verify:
        env2 = _env(parallelism, options)
        finals = _build(env2, n_events, num_users, key, final_only=True)
        with _summed(finals).execute_and_collect("pyflink-count-verify") as it:
            ((keys, total),) = list(it)
        if total != n_events:
            msg = f"pyflink counts sum to {total}, expected {n_events}"
            raise RuntimeError(msg)
        result["keys"] = keys
        result["verified"] = True
    return result


def main(argv: list[str] | None = None) -> int:
    import argparse

    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-events", type=int, default=200_000)
    p.add_argument("--num-users", default="200000", help="int or 'none' (unique ids)")
    p.add_argument("--key", default="id", choices=["id", "channel_behavior"])
    p.add_argument("--parallelism", type=int, default=2)
    p.add_argument("--mode", choices=("process", "thread"), default="process",
                   help="python.execution-mode (thread: the functions run in the JVM's process, through pemja)")
    p.add_argument("--no-verify", dest="verify", action="store_false")
    p.add_argument("--conf", action="append", default=[], metavar="KEY=VALUE",
                   help="extra Flink config, e.g. python.state.cache-size=262144 (repeatable)")
    args = p.parse_args(argv)
    num_users = None if args.num_users.lower() == "none" else int(args.num_users)
    options = {"python.execution-mode": args.mode, **dict(kv.split("=", 1) for kv in args.conf)}
    result = run_job(args.n_events, num_users, args.key, args.parallelism, args.verify, options)
    print(json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
