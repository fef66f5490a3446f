"""The ``flowpoint`` command line.

``flowpoint run [options] job.py [args...]`` runs a job script like ``python job.py args``
(``sys.argv``, the job's folder first on ``sys.path``, ``__name__ == "__main__"``), with the
options as defaults for every ``StreamExecutionEnvironment`` the script creates.

``flowpoint checkpoints DIR/JOB-ID`` lists a job's checkpoints (exit 1 if there is none complete).

Running jobs, through the job registry and each job's loopback control endpoint
(``docs/control.md``): ``flowpoint list [--all]``, ``flowpoint savepoint JOB-ID [DIR]``,
``flowpoint savepoint --dispose PATH``, ``flowpoint stop [--savepoint-path DIR] [--drain] JOB-ID``,
``flowpoint cancel JOB-ID``; ``flowpoint inspect PATH`` summarizes a savepoint or checkpoint.
Job ids may be given as a unique prefix. ``flowpoint ui [--port 8081]`` serves the dashboard and
Flink's REST API for every job of the registry, running and ended (``docs/rest.md``).
"""

from __future__ import annotations

import argparse
import os
import re
import runpy
import sys
from typing import Any

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
        help="a configuration setting, e.g. -D execution.epoch.max-records=50000, -D spark.executor.memory=4g "
        "(spark.* keys go to the Spark session) or -D s3.endpoint=http://minio:9000 (repeatable)",
    )
    run.add_argument(
        "-s", "--fromSavepoint", dest="from_path", metavar="PATH",
        help="restore from a retained checkpoint or savepoint: its directory (chk-<n>) or its _metadata file",
    )
    run.add_argument(
        "--resume", nargs="?", const="", metavar="JOB-ID",
        help="restore the newest retained checkpoint of this job's previous run under state.checkpoints.dir: the run with "
        "this job's name and operators (uids, max parallelism) that no later run has resumed; or of the run JOB-ID "
        "(an id or a unique prefix). Ambiguous or mismatching runs are refused with a list of them",
    )
    run.add_argument(
        "--resume-fallback", action="store_true",
        help="with --resume: if the newest retained checkpoint does not verify (checksum or size mismatch), restore the "
        "newest one that does (execution.state-recovery.fallback-on-corruption)",
    )
    run.add_argument(
        "-n", "--allow-non-restored-state", action="store_true",
        help="when restoring, drop state of operators (uids) the job no longer has instead of failing",
    )
    run.add_argument("--conf", metavar="FILE_OR_DIR", help="a flowpoint.yaml file (or the directory holding it)")
    run.add_argument("script", nargs="?", help="the job's Python file")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the job")
    checkpoints = sub.add_parser(
        "checkpoints", help="list a job's checkpoints",
        description="List the checkpoints in a job's checkpoint directory (<state.checkpoints.dir>/<job-id>): "
        "id, completion time, size, whether complete, path to restore from.",
    )
    checkpoints.add_argument("job_dir", metavar="DIR/JOB-ID", help="the job's checkpoint directory (a path or URI: file://, s3://, hdfs://)")
    _control_commands(sub)
    return parser


def _control_commands(sub: Any) -> None:
    job_help = "the job's id (32 hex characters) or a unique prefix of it, as `flowpoint list` shows"
    listing = sub.add_parser(
        "list", help="list running jobs",
        description="List the jobs of this machine's job registry: id, name, status, start time, last checkpoint.",
    )
    listing.add_argument("-a", "--all", action="store_true", help="also list jobs that have ended")
    savepoint = sub.add_parser(
        "savepoint", help="take a savepoint of a running job, or dispose of one",
        description="`flowpoint savepoint JOB-ID [DIR]` takes a savepoint (default DIR: state.savepoints.dir) and prints its path; "
        "`flowpoint savepoint --dispose PATH` deletes a savepoint.",
    )
    savepoint.add_argument("job_id", nargs="?", metavar="JOB-ID", help=job_help)
    savepoint.add_argument("target", nargs="?", metavar="DIR", help="directory to write savepoint-<id[:6]>-<hex> into")
    savepoint.add_argument("-d", "--dispose", metavar="PATH", help="delete the savepoint at PATH (its directory or _metadata)")
    stop = sub.add_parser(
        "stop", help="take a savepoint of a running job and stop it",
        description="Take a savepoint of a running job, then end it (FINISHED); prints the savepoint's path.",
    )
    stop.add_argument(
        "-p", "--savepoint-path", "--savepointPath", dest="target", metavar="DIR",
        help="directory to write the savepoint into (default state.savepoints.dir)",
    )
    stop.add_argument("-d", "--drain", action="store_true", help="first send a final watermark so that every window and event-time timer fires")
    stop.add_argument("job_id", metavar="JOB-ID", help=job_help)
    cancel = sub.add_parser("cancel", help="cancel a running job", description="Cancel a running job (no savepoint).")
    cancel.add_argument("job_id", metavar="JOB-ID", help=job_help)
    inspect = sub.add_parser(
        "inspect", help="summarize a savepoint or checkpoint",
        description="Print a savepoint's or retained checkpoint's operators, state names, key counts and sizes.",
    )
    inspect.add_argument("path", metavar="PATH", help="savepoint or chk-<n> directory, or its _metadata file (path or URI)")
    ui = sub.add_parser(
        "ui", help="serve the dashboard and REST API of every job (running and ended)",
        description="Serve a dashboard and Flink's REST API (docs/rest.md) for every job of the job registry, running\n"
        "and ended, until Ctrl-C. It prints the URL to open, with the token that starts a browser session.\n\n"
        "examples:\n"
        "  flowpoint ui                                # then open the printed http://127.0.0.1:8081/?token=...\n"
        "  flowpoint ui --port 9091                    # when port 8081 is taken\n"
        "  flowpoint ui --bind 0.0.0.0 --allow-remote  # reachable from other machines (prints a warning)",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    ui.add_argument("--port", type=int, default=8081, help="the port to listen on (default 8081, Flink's)")
    ui.add_argument("--bind", default="127.0.0.1", metavar="ADDRESS", help="the IPv4 address to listen on (default 127.0.0.1, this machine only)")
    ui.add_argument(
        "--allow-remote", action="store_true",
        help="with --bind of a non-loopback address (e.g. 0.0.0.0): let other machines reach the dashboard. Anyone who "
        "gets the token controls your jobs, and plain HTTP carries it unencrypted",
    )


def _dynamic_settings(items: list[str]) -> dict:
    """``-D key=value`` settings. Their keys are checked strictly unless ``-D config.strict=false``:
    an unknown key (other than ``spark.*`` and filesystem options) or a misspelt one is an error."""
    from flowpoint.api.config import STRICT_KEY, check_key, parse_option

    settings: dict = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            msg = f"-D takes key=value; got {item!r}"
            raise FlowpointError(msg)
        settings[key.strip()] = value.strip()
    strict = parse_option(STRICT_KEY, settings[STRICT_KEY]) if STRICT_KEY in settings else True
    for key in settings:
        check_key(key, strict, "-D", f"pass -D {STRICT_KEY}=false")
    return settings


def _settings(args: argparse.Namespace) -> dict:
    settings = _dynamic_settings(args.dynamic)
    if args.parallelism is not None:
        if args.parallelism < 1:
            msg = f"-p/--parallelism must be >= 1; got {args.parallelism}"
            raise FlowpointError(msg)
        settings["parallelism.default"] = args.parallelism
    if args.master:
        settings["spark.master"] = args.master
    if args.from_path and args.resume is not None:
        msg = "-s/--fromSavepoint and --resume both say where to restore from: give one"
        raise FlowpointError(msg)
    if args.resume_fallback and args.resume is None:
        msg = "--resume-fallback only applies to --resume (which checkpoint of the previous run to restore); add --resume"
        raise FlowpointError(msg)
    if args.from_path:
        settings["execution.savepoint.path"] = args.from_path
    if args.resume is not None:
        settings["execution.state-recovery.from-latest"] = True
        if args.resume:
            settings["execution.state-recovery.from-job"] = args.resume
    if args.resume_fallback:
        settings["execution.state-recovery.fallback-on-corruption"] = True
    if args.allow_non_restored_state:
        settings["execution.savepoint.ignore-unclaimed-state"] = True
    return settings


_JOB_ID_PREFIX = re.compile(r"[0-9a-fA-F]{1,32}")


def _script_after_resume(args: argparse.Namespace) -> None:
    """``--resume`` takes an optional JOB-ID, so in ``run --resume job.py`` argparse took the
    script for the id: a value that is not a job id (or that is a file) is the script."""
    value = args.resume
    if value and (not _JOB_ID_PREFIX.fullmatch(value) or os.path.isfile(value)):
        if args.script is not None:
            args.args = [args.script, *args.args]
        args.script, args.resume = value, ""
    if args.script is None:
        msg = "flowpoint run needs the job's Python file: flowpoint run [options] job.py [args...]"
        raise FlowpointError(msg)


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


def _human_size(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if size < 1024 or unit == "TiB":
            return f"{int(size)} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{n} B"  # pragma: no cover


def _local_time(ms: int | None) -> str:
    from datetime import datetime

    if ms is None:
        return "-"
    return datetime.fromtimestamp(ms / 1000).astimezone().isoformat(timespec="seconds")


def list_checkpoints_command(job_dir: str) -> int:
    """``flowpoint checkpoints DIR/JOB-ID``: a table of the job's checkpoints."""
    import re

    from flowpoint.checkpoint.storage import CheckpointStorageAccess
    from flowpoint.checkpoint.store import list_checkpoints
    from flowpoint.errors import CheckpointError

    infos = list_checkpoints(job_dir)
    if not infos:
        access = CheckpointStorageAccess(job_dir)
        jobs = [n for n, d, _ in access.list_dir() if d and re.fullmatch(r"[0-9a-f]{32}", n)]
        hint = (
            f"; it looks like a checkpoints directory with job directories ({', '.join(jobs[:5])}{', ...' if len(jobs) > 5 else ''}): "
            f"pass {access.uri(jobs[0])}"
            if jobs
            else "; pass <state.checkpoints.dir>/<job-id>"
        )
        msg = f"no checkpoints in {access.uri()} (no chk-<n> directories){hint}"
        raise CheckpointError(msg)
    rows = [("ID", "TIME", "SIZE", "COMPLETE", "PATH")]
    rows += [(str(i.id), _local_time(i.time_ms), _human_size(i.size_bytes), "yes" if i.complete else "no", i.path) for i in infos]
    widths = [max(len(r[c]) for r in rows) for c in range(4)]
    for r in rows:
        print("  ".join(r[c].rjust(widths[c]) if c in (0, 2) else r[c].ljust(widths[c]) for c in range(4)) + "  " + r[4])
    if not any(i.complete for i in infos):
        print(f"flowpoint: error: {infos[0].path.rsplit('/', 1)[0]} holds no complete checkpoint", file=sys.stderr)
        return 1
    return 0


def _control(args: argparse.Namespace) -> int:
    from flowpoint.control import commands

    if args.command == "list":
        return commands.list_command(args.all)
    if args.command == "savepoint":
        if args.dispose:
            if args.job_id:
                msg = "flowpoint savepoint takes a JOB-ID [DIR] to take a savepoint, or --dispose PATH to delete one: not both"
                raise FlowpointError(msg)
            return commands.dispose_command(args.dispose)
        if not args.job_id:
            msg = "flowpoint savepoint needs a JOB-ID (see `flowpoint list`), or --dispose PATH"
            raise FlowpointError(msg)
        return commands.savepoint_command(args.job_id, args.target)
    if args.command == "stop":
        return commands.stop_command(args.job_id, args.target, args.drain)
    if args.command == "cancel":
        return commands.cancel_command(args.job_id)
    if args.command == "inspect":
        return commands.inspect_command(args.path)
    if args.command == "ui":
        from flowpoint.control.ui import ui_command

        return ui_command(args.port, args.bind, args.allow_remote)
    msg = f"unknown command {args.command!r}"  # pragma: no cover - argparse rejects it first
    raise FlowpointError(msg)


def resume_before_script(argv: list[str]) -> list[str]:
    """``run --resume job.py --its-option x``: argparse would take ``job.py`` for the optional
    JOB-ID and then refuse the script's own options; a ``--resume`` followed by a Python file
    (an existing file, or a name ending in .py) resumes without a JOB-ID."""
    out = list(argv)
    for i, token in enumerate(out[:-1]):
        nxt = out[i + 1]
        if token == "--resume" and (nxt.endswith(".py") or os.path.isfile(nxt)):
            out[i] = "--resume="
            break
    return out


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = _parser().parse_args(resume_before_script(argv) if argv[:1] == ["run"] else argv)
    try:
        if args.command == "run":
            if args.conf:
                from flowpoint.api.config_file import set_conf_path

                set_conf_path(args.conf)
            _script_after_resume(args)
            run_script(args.script, args.args, _settings(args))
        elif args.command == "checkpoints":
            return list_checkpoints_command(args.job_dir)
        else:
            return _control(args)
    except FlowpointError as e:
        from flowpoint.runtime.failure_report import failure_lines

        print(f"flowpoint: error: {e}", file=sys.stderr)
        for line in failure_lines(e):  # a failed job's: the user code's traceback, the log file
            print(line, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
