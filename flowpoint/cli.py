"""The ``flowpoint`` command line.

``flowpoint run [options] job.py [args...]`` runs a job script like ``python job.py args``
(``sys.argv``, the job's folder first on ``sys.path``, ``__name__ == "__main__"``), with the
options as defaults for every ``StreamExecutionEnvironment`` the script creates.
"""

from __future__ import annotations

import argparse
import os
import runpy
import sys

from flowpoint import __version__
from flowpoint.errors import FlowpointError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="flowpoint", description="Flink-style stateful stream processing on Apache Spark")
    parser.add_argument("--version", action="version", version=f"flowpoint {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="run a job script", description="Run a job script as `python job.py args` would.")
    run.add_argument("-p", "--parallelism", type=int, help="default parallelism of the job's operators")
    run.add_argument("-m", "--master", help="Spark master URL (default local[*,4])")
    run.add_argument(
        "-D", dest="dynamic", action="append", default=[], metavar="key=value",
        help="a configuration setting, e.g. -D execution.epoch.max-records=50000 (repeatable)",
    )
    run.add_argument("script", help="the job's Python file")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the job")
    return parser


def _settings(args: argparse.Namespace) -> dict:
    settings: dict = {}
    for item in args.dynamic:
        key, sep, value = item.partition("=")
        if not sep or not key:
            msg = f"-D takes key=value; got {item!r}"
            raise FlowpointError(msg)
        settings[key.strip()] = value.strip()
    if args.parallelism is not None:
        if args.parallelism < 1:
            msg = f"-p/--parallelism must be >= 1; got {args.parallelism}"
            raise FlowpointError(msg)
        settings["parallelism.default"] = args.parallelism
    if args.master:
        settings["spark.master"] = args.master
    return settings


def run_script(script: str, argv: list[str], settings: dict) -> None:
    from flowpoint.api.environment import set_cli_defaults

    path = os.path.abspath(script)
    if not os.path.isfile(path):
        msg = f"job file {script!r} not found"
        raise FlowpointError(msg)
    set_cli_defaults(settings)
    sys.argv = [script, *argv]
    sys.path.insert(0, os.path.dirname(path))
    runpy.run_path(path, run_name="__main__")


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "run":
            run_script(args.script, args.args, _settings(args))
    except FlowpointError as e:
        print(f"flowpoint: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
