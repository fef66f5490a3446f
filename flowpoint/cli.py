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

from flowpoint.api.cli_context import CliContext, cli_context
from flowpoint.api.config import STRICT_KEY, check_key, parse_option
from flowpoint.api.environment import PlanPrinted
from flowpoint.api.storage_options import storage_options
from flowpoint.checkpoint.directory import list_checkpoints
from flowpoint.checkpoint.filesystem import CheckpointStorageAccess
from flowpoint.control import commands
from flowpoint.control.detached import run_detached
from flowpoint.control.state_command import state_command
from flowpoint.control.ui import ui_command
from flowpoint.driver.failure_report import failure_lines
from flowpoint.errors import (
    CheckpointError,
    ConfigurationError,
    FlowpointError,
    JobScriptSyntaxError,
)
from flowpoint.python_deps import DRIVER_ONLY_PATHS, prepare_python_dependencies
from flowpoint.version import __version__

MAIN_EXAMPLES = """examples:
  flowpoint run job.py --input in.txt          # run a job script (its own arguments follow it)
  flowpoint run -d -p 4 job.py                 # detached: print the job id once it runs, and return
  flowpoint run -s /tmp/sp/savepoint-0f4e9a-1a2b3c4d5e6f job.py   # restore from a savepoint
  flowpoint info job.py                        # the job's execution plan as JSON, without running it
  flowpoint list                               # running and scheduled jobs (-r, -s, -a)
  flowpoint checkpoint 0f4e9a6b                # trigger a checkpoint now
  flowpoint savepoint 0f4e9a6b /tmp/sp         # take a savepoint
  flowpoint stop 0f4e9a6b                      # savepoint, then stop
  flowpoint cancel 0f4e9a6b                    # cancel
  flowpoint ui                                 # dashboard and REST API of every job

`flowpoint COMMAND --help` shows each command's options and examples."""

RUN_EXAMPLES = """examples:
  flowpoint run job.py --input in.txt                  # job.py's own arguments follow it
  flowpoint run -p 4 -m local[4] job.py                # parallelism 4 on a local Spark with 4 cores
  flowpoint run --remote sc://host:15002 job.py        # on a Spark Connect server (in epochs)
  flowpoint run -d job.py                              # detached: prints `Job has been submitted with JobID ...`
  flowpoint run -D execution.runtime=epoch job.py      # any configuration setting
  flowpoint run -s /tmp/sp/savepoint-0f4e9a-1a2b3c4d5e6f job.py   # restore a savepoint or checkpoint
  flowpoint run --resume job.py                        # restore the newest checkpoint of the job's last run
  flowpoint run --resume --as-of "2026-11-26 10:00" job.py  # the job's newest checkpoint completed by then
  flowpoint run -pyfs util.py,lib/ -pyreq requirements.txt -pyarch venv.zip#venv job.py
  flowpoint run -pyfs src/ -pym mypackage.job          # run a module (found in src/) instead of a script"""


def _python_options(run: Any) -> None:
    """Flink's Python dependency options, stored under Flink's keys (so -D and flowpoint.yaml work too)."""
    run.add_argument(
        "-pyfs", "--pyFiles", dest="py_files", metavar="FILES",
        help="comma-separated Python files, packages (directories) or zips put on the job's Python path, on the driver and "
        "every executor (python.files)",
    )
    run.add_argument(
        "-pyreq", "--pyRequirements", dest="py_requirements", metavar="REQUIREMENTS.TXT",
        help="a requirements file: `pip install --target` into a directory on the driver (pip's own configuration decides "
        "the index: PIP_INDEX_URL, PIP_FIND_LINKS, ...), shipped to every executor and put on its Python path "
        "(python.requirements)",
    )
    run.add_argument(
        "-pyarch", "--pyArchives", dest="py_archives", metavar="ARCHIVES",
        help="comma-separated archives (zip, tar.gz, ...) unpacked on every executor, each in the directory named after "
        "`#`: archive.zip#alias (python.archives; Spark's addArchive)",
    )
    run.add_argument(
        "-pym", "--pyModule", dest="py_module", metavar="MODULE",
        help="run this Python module (as `python -m MODULE`) instead of a script; arguments after it go to the job",
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="flowpoint", description="Flink-style stateful stream processing on Apache Spark",
        epilog=MAIN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"flowpoint {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    _run_command(sub)
    info = sub.add_parser(
        "info", help="print a job's execution plan (JSON) without running it",
        description="Run the job script up to its first execute()/execute_async() and print the job's plan as Flink's\n"
        "JSON (nodes with id, type, pact, contents, parallelism, predecessors and their ship_strategy) instead of\n"
        "running it. No Spark application is started.",
        epilog="examples:\n"
        "  flowpoint info job.py                      # the plan of job.py\n"
        "  flowpoint info -p 4 job.py --input in.txt  # with a default parallelism of 4 and the job's own arguments",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    info.add_argument("-p", "--parallelism", type=int, help="default parallelism of the job's operators")
    info.add_argument("-D", dest="dynamic", action="append", default=[], metavar="key=value", help="a configuration setting (repeatable)")
    info.add_argument("--conf", metavar="FILE_OR_DIR", help="a flowpoint.yaml file (or the directory holding it)")
    info.add_argument("script", help="the job's Python file")
    info.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the job")
    checkpoints = sub.add_parser(
        "checkpoints", help="list a job's checkpoints",
        description="List the checkpoints in a job's checkpoint directory (<state.checkpoints.dir>/<job-id>): "
        "id, completion time, size, whether complete, path to restore from.",
        epilog="examples:\n"
        "  flowpoint checkpoints /tmp/checkpoints/0f4e9a6b2c1d4e5f8a7b6c5d4e3f2a1b\n"
        "  flowpoint checkpoints s3://bucket/checkpoints/0f4e9a6b2c1d4e5f8a7b6c5d4e3f2a1b",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    checkpoints.add_argument("job_dir", metavar="DIR/JOB-ID", help="the job's checkpoint directory (a path or URI: file://, s3://, hdfs://)")
    _control_commands(sub)
    return parser


def _run_command(sub: Any) -> None:
    """`flowpoint run`: Flink's `flink run` options and the job script with its arguments."""
    run = sub.add_parser(
        "run", help="run a job script", description="Run a job script as `python job.py args` would.",
        epilog=RUN_EXAMPLES, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument(
        "-d", "--detached", action="store_true",
        help="start the job in a background process, print its id once it runs and return (its output goes to a log "
        "file under $FLOWPOINT_HOME/logs, printed too)",
    )
    run.add_argument("-p", "--parallelism", type=int, help="default parallelism of the job's operators")
    run.add_argument("-m", "--master", help="Spark master URL (default local[*,4])")
    run.add_argument(
        "--remote", metavar="sc://HOST:PORT",
        help="run on the Spark Connect server at this address (spark.remote; $SPARK_REMOTE does the same): in epochs, "
        "as docs/deployment.md says under Spark Connect",
    )
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
        "--as-of", metavar="TIME",
        help="with --resume: restore the newest retained checkpoint of this job completed at or before TIME "
        "('2026-11-26 10:00' in this machine's time zone, ISO 8601 with an offset, or epoch milliseconds), from any "
        "run of the job that is not running, and say which (execution.state-recovery.as-of)",
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
    run.add_argument(
        "--trust-savepoint-from-others", action="store_true",
        help="restore a checkpoint or savepoint that this installation's key did not sign (another installation's, one "
        "changed after it was signed, or one from before checkpoints were signed): restoring runs whatever code its writer "
        "put in its pickles, as you. Only for files whose every writer you trust (execution.savepoint.trust-from-others)",
    )
    run.add_argument("--conf", metavar="FILE_OR_DIR", help="a flowpoint.yaml file (or the directory holding it)")
    _python_options(run)
    run.add_argument("script", nargs="?", help="the job's Python file")
    run.add_argument("args", nargs=argparse.REMAINDER, help="arguments passed to the job")


def _control_commands(sub: Any) -> None:
    job_help = "the job's id (32 hex characters) or a unique prefix of it, as `flowpoint list` shows"
    raw = argparse.RawDescriptionHelpFormatter
    listing = sub.add_parser(
        "list", help="list running jobs",
        description="List the jobs of this machine's job registry: id, name, status, start time, last checkpoint.\n"
        "Without an option: the running and scheduled jobs (as Flink's `flink list`).",
        epilog="examples:\n"
        "  flowpoint list      # running and scheduled jobs\n"
        "  flowpoint list -r   # running jobs only (RUNNING, RESTARTING, FAILING, CANCELLING)\n"
        "  flowpoint list -s   # scheduled jobs only (registered, not yet RUNNING: CREATED, INITIALIZING)\n"
        "  flowpoint list -a   # every job, also those that ended",
        formatter_class=raw,
    )
    shown = listing.add_mutually_exclusive_group()
    shown.add_argument("-r", "--running", action="store_true", help="only running jobs")
    shown.add_argument("-s", "--scheduled", action="store_true", help="only scheduled jobs (not yet RUNNING)")
    shown.add_argument("-a", "--all", action="store_true", help="also list jobs that have ended")
    checkpoint = sub.add_parser(
        "checkpoint", help="trigger a checkpoint of a running job now",
        description="Trigger a checkpoint of a running job now, wait for it to complete and print its path. The job must\n"
        "have checkpointing enabled. -full makes it a full checkpoint: it references no state of earlier\n"
        "checkpoints (an incremental backend writes all of its state again).",
        epilog="examples:\n"
        "  flowpoint checkpoint 0f4e9a6b              # by a unique prefix of the job id\n"
        "  flowpoint checkpoint -full 0f4e9a6b        # a full (non-incremental) checkpoint",
        formatter_class=raw,
    )
    checkpoint.add_argument("-full", "--full", dest="full", action="store_true", help="a full checkpoint, not an incremental one")
    checkpoint.add_argument("job_id", metavar="JOB-ID", help=job_help)
    savepoint = sub.add_parser(
        "savepoint", help="take a savepoint of a running job, or dispose of one",
        description="`flowpoint savepoint JOB-ID [DIR]` takes a savepoint (default DIR: state.savepoints.dir) and prints its path; "
        "`flowpoint savepoint --dispose PATH` deletes a savepoint.",
        epilog="examples:\n"
        "  flowpoint savepoint 0f4e9a6b /tmp/savepoints               # a canonical savepoint into /tmp/savepoints\n"
        "  flowpoint savepoint -type native 0f4e9a6b /tmp/savepoints  # in the state backend's own (checkpoint) format\n"
        "  flowpoint savepoint --dispose /tmp/savepoints/savepoint-0f4e9a-1a2b3c4d5e6f",
        formatter_class=raw,
    )
    savepoint.add_argument(
        "-type", "--type", dest="format_type", type=str.lower, choices=("canonical", "native"), default="canonical",
        help="canonical (default): flowpoint's backend-independent format; native: the state backend's own format, as a "
        "checkpoint writes it (self-contained in the savepoint's directory)",
    )
    savepoint.add_argument("job_id", nargs="?", metavar="JOB-ID", help=job_help)
    savepoint.add_argument("target", nargs="?", metavar="DIR", help="directory to write savepoint-<id[:6]>-<hex> into")
    savepoint.add_argument("-d", "--dispose", metavar="PATH", help="delete the savepoint at PATH (its directory or _metadata)")
    _stop_cancel_inspect_ui(sub, job_help, raw)


def _stop_cancel_inspect_ui(sub: Any, job_help: str, raw: Any) -> None:
    stop = sub.add_parser(
        "stop", help="take a savepoint of a running job and stop it",
        description="Take a savepoint of a running job, then end it (FINISHED); prints the savepoint's path.",
        epilog="examples:\n"
        "  flowpoint stop 0f4e9a6b                      # savepoint into state.savepoints.dir, then stop\n"
        "  flowpoint stop --drain -p /tmp/sp 0f4e9a6b   # fire every window and timer first, savepoint into /tmp/sp",
        formatter_class=raw,
    )
    stop.add_argument(
        "-p", "--savepoint-path", "--savepointPath", dest="target", metavar="DIR",
        help="directory to write the savepoint into (default state.savepoints.dir)",
    )
    stop.add_argument("-d", "--drain", action="store_true", help="first send a final watermark so that every window and event-time timer fires")
    stop.add_argument("job_id", metavar="JOB-ID", help=job_help)
    cancel = sub.add_parser(
        "cancel", help="cancel a running job", description="Cancel a running job (no savepoint).",
        epilog="examples:\n  flowpoint cancel 0f4e9a6b", formatter_class=raw,
    )
    cancel.add_argument("job_id", metavar="JOB-ID", help=job_help)
    inspect = sub.add_parser(
        "inspect", help="summarize a savepoint or checkpoint",
        description="Print a savepoint's or retained checkpoint's operators, state names, key counts and sizes.",
        epilog="examples:\n"
        "  flowpoint inspect /tmp/savepoints/savepoint-0f4e9a-1a2b3c4d5e6f\n"
        "  flowpoint inspect file:///tmp/checkpoints/0f4e9a6b2c1d4e5f8a7b6c5d4e3f2a1b/chk-12/_metadata",
        formatter_class=raw,
    )
    inspect.add_argument("path", metavar="PATH", help="savepoint or chk-<n> directory, or its _metadata file (path or URI)")
    state = sub.add_parser(
        "state", help="print a running job's keyed state as of its latest completed checkpoint",
        description="Print one keyed state of a running job's operator as of the job's latest completed checkpoint,\n"
        "without stopping the job (the checkpoint is pinned while it is read). For a Spark DataFrame of it:\n"
        "flowpoint.state_reader(spark, job=JOB).keyed_state(UID, NAME).",
        epilog="examples:\n"
        "  flowpoint state 0f4e9a6b counts count            # the first 20 keys and values\n"
        "  flowpoint state 0f4e9a6b counts count --key 42   # one key (a Python literal, or the text itself)\n"
        "  flowpoint state clicks counts count --limit 100  # by the job's name",
        formatter_class=raw,
    )
    state.add_argument("job_id", metavar="JOB", help="the running job's id, a unique prefix of it, or its name")
    state.add_argument("uid", metavar="UID", help="the operator's uid")
    state.add_argument("name", metavar="NAME", help="the keyed state's name (its descriptor's)")
    state.add_argument("--key", help="print only this key's value")
    state.add_argument("--limit", type=int, default=20, help="print at most this many keys (default 20)")
    state.add_argument("-D", dest="dynamic", action="append", default=[], metavar="key=value",
                       help="a filesystem setting for the checkpoint storage (s3.endpoint, s3.access-key, ...; repeatable)")
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
    if args.master and args.remote:
        msg = "-m/--master and --remote both say where Spark runs: give the master to the Spark Connect server, or drop --remote"
        raise FlowpointError(msg)
    if args.master:
        settings["spark.master"] = args.master
    if args.remote:
        settings["spark.remote"] = args.remote
    if args.from_path and args.resume is not None:
        msg = "-s/--fromSavepoint and --resume both say where to restore from: give one"
        raise FlowpointError(msg)
    if args.as_of is not None and args.resume is None:
        msg = "--as-of picks one of the checkpoints --resume restores: add --resume (flowpoint run --resume --as-of TIME job.py)"
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
    if args.as_of is not None:
        settings["execution.state-recovery.as-of"] = args.as_of
    if args.resume_fallback:
        settings["execution.state-recovery.fallback-on-corruption"] = True
    if args.allow_non_restored_state:
        settings["execution.savepoint.ignore-unclaimed-state"] = True
    if args.trust_savepoint_from_others:
        settings["execution.savepoint.trust-from-others"] = True
    for option, key in (("py_files", "python.files"), ("py_requirements", "python.requirements"), ("py_archives", "python.archives")):
        value = getattr(args, option, None)
        if value:
            settings[key] = value
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


def _shown_path(path: str, script: str | None = None) -> str:
    """A file as the user knows it: the script as typed, a file below the working directory
    relative to it, else absolute."""
    if script is not None and os.path.abspath(script) == os.path.abspath(path):
        return script
    rel = os.path.relpath(path)
    return path if rel.startswith(os.pardir) else rel


def syntax_error(error: SyntaxError, script: str | None = None) -> JobScriptSyntaxError:
    """``job.py:LINE: SyntaxError: message``, then the offending line and its caret, as Python
    shows them (``traceback.format_exception_only``), without the traceback that led there."""
    import traceback

    where = _shown_path(error.filename, script) if error.filename else "<job>"
    head = f"{where}:{error.lineno}: {type(error).__name__}: {error.msg}" if error.lineno else f"{where}: {type(error).__name__}: {error.msg}"
    shown = traceback.format_exception_only(type(error), error)
    source = [line.rstrip("\n") for line in "".join(shown[1:-1]).splitlines() if line.strip()]  # the line and caret
    return JobScriptSyntaxError("\n".join([head, *source]))


def _compiles(error: BaseException) -> bool:
    """A SyntaxError of a file (the job's, or one it imports): not one the job's own code
    raised or got from compiling a string."""
    return isinstance(error, SyntaxError) and bool(error.filename) and os.path.isfile(error.filename)


def script_context(settings: dict, conf: str | None, print_plan: bool = False) -> CliContext:
    """What the CLI hands the job script it runs (api/cli_context.py): the settings of its
    options as every environment's defaults, ``--conf``, ``-D config.strict``, ``info``."""
    defaults = {k: v for k, v in settings.items() if v is not None}
    strict = defaults.get(STRICT_KEY)
    return CliContext(defaults, conf, None if strict is None else bool(parse_option(STRICT_KEY, strict)), print_plan)


def run_script(script: str, argv: list[str], settings: dict, conf: str | None = None) -> None:
    path = os.path.abspath(script)
    if not os.path.isfile(path):
        msg = f"job file {script!r} not found"
        raise FlowpointError(msg)
    context = script_context(prepare_python_dependencies(settings), conf)
    sys.argv = [script, *argv]
    _driver_and_executor_path(os.path.dirname(path))
    try:
        with cli_context(context):
            runpy.run_path(path, run_name="__main__")
    except SyntaxError as e:
        if not _compiles(e):
            raise
        raise syntax_error(e, script) from None


def _driver_and_executor_path(path: str) -> None:
    """The script's folder (or the working directory for -pym) goes on the executors' path too,
    even when a -pyfs file made it a driver-only path."""
    sys.path.insert(0, path)
    DRIVER_ONLY_PATHS.discard(path)


def run_module(module: str, argv: list[str], settings: dict, conf: str | None = None) -> None:
    """``run -pym MODULE``: as ``python -m MODULE args`` (the module found on the Python path,
    which -pyfs extends)."""
    context = script_context(prepare_python_dependencies(settings), conf)
    sys.argv = [module, *argv]
    _driver_and_executor_path(os.getcwd())
    import importlib.util

    try:
        found = importlib.util.find_spec(module) is not None
        reason = ""
    except ImportError as e:  # a missing parent package
        found, reason = False, f" ({e})"
    if not found:
        msg = f"-pym {module}: no such module on the Python path{reason}; ship its package with -pyfs"
        raise ConfigurationError(msg)
    try:
        with cli_context(context):
            runpy.run_module(module, run_name="__main__", alter_sys=True)
    except SyntaxError as e:
        if not _compiles(e):
            raise
        raise syntax_error(e) from None


def info_command(args: argparse.Namespace) -> int:
    """``flowpoint info job.py``: the script runs up to its first execute(), which prints the
    plan instead of submitting the job."""
    settings = _dynamic_settings(args.dynamic)
    if args.parallelism is not None:
        if args.parallelism < 1:
            msg = f"-p/--parallelism must be >= 1; got {args.parallelism}"
            raise FlowpointError(msg)
        settings["parallelism.default"] = args.parallelism
    path = os.path.abspath(args.script)
    if not os.path.isfile(path):
        msg = f"job file {args.script!r} not found"
        raise FlowpointError(msg)
    sys.argv = [args.script, *args.args]
    sys.path.insert(0, os.path.dirname(path))
    try:
        with cli_context(script_context(settings, args.conf, print_plan=True)):
            runpy.run_path(path, run_name="__main__")
    except PlanPrinted:
        return 0
    except SyntaxError as e:
        if not _compiles(e):
            raise
        raise syntax_error(e, args.script) from None
    msg = f"{args.script} defined no job: it never called execute() or execute_async()"
    raise FlowpointError(msg)


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
    if args.command == "list":
        return commands.list_command(args.all, which="running" if args.running else "scheduled" if args.scheduled else None)
    if args.command == "checkpoint":
        return commands.checkpoint_command(args.job_id, args.full)
    if args.command == "savepoint":
        if args.dispose:
            if args.job_id:
                msg = "flowpoint savepoint takes a JOB-ID [DIR] to take a savepoint, or --dispose PATH to delete one: not both"
                raise FlowpointError(msg)
            return commands.dispose_command(args.dispose)
        if not args.job_id:
            msg = "flowpoint savepoint needs a JOB-ID (see `flowpoint list`), or --dispose PATH"
            raise FlowpointError(msg)
        return commands.savepoint_command(args.job_id, args.target, args.format_type)
    if args.command == "stop":
        return commands.stop_command(args.job_id, args.target, args.drain)
    if args.command == "cancel":
        return commands.cancel_command(args.job_id)
    if args.command == "inspect":
        return commands.inspect_command(args.path)
    if args.command == "state":
        return state_command(args.job_id, args.uid, args.name, args.key, args.limit, storage_options(_dynamic_settings(args.dynamic)))
    if args.command == "ui":
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
            if args.py_module:
                if args.script is not None:  # with -pym, every word after the options is the module's
                    args.args = [args.script, *args.args]
                    args.script = None
            else:
                _script_after_resume(args)
            settings = _settings(args)
            if args.detached:
                return run_detached(argv, settings)
            if args.py_module:
                run_module(args.py_module, args.args, settings, args.conf)
            else:
                run_script(args.script, args.args, settings, args.conf)
        elif args.command == "info":
            return info_command(args)
        elif args.command == "checkpoints":
            return list_checkpoints_command(args.job_dir)
        else:
            return _control(args)
    except JobScriptSyntaxError as e:
        print(e, file=sys.stderr)  # as a compiler says it: file:line first
        return 1
    except FlowpointError as e:
        print(f"flowpoint: error: {e}", file=sys.stderr)
        for line in failure_lines(e):  # a failed job's: the user code's traceback, the log file
            print(line, file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
