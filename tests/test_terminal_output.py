"""What a user sees on the terminal (issue 19, parts 4 and 5): a progress bar on a terminal and
plain lines elsewhere, one line per completed checkpoint, a final rate of this run only, one line
for operators without a uid, no Java or Spark noise; and for a user function's error one short
report naming the operator, uid, file:line and record, with the user code's traceback, no
Spark retries, and no restarts without end."""

from __future__ import annotations

import io
import logging
import os
import pty
import re
import subprocess
import sys
import textwrap
import threading
import time

import pytest
from checkpoint_jobs import Counting, build, expected_outputs, expected_state, record
from conftest import MASTER

from flowpoint import CollectSink, DataGeneratorSource, ProcessFunction, RestartStrategies
from flowpoint.driver.checkpoint_coordinator import CheckpointStats
from flowpoint.driver.coordinator import _warn_missing_uids
from flowpoint.driver.progress import Progress
from flowpoint.driver.progress_bar import bar_line
from flowpoint.errors import UserFunctionError

EVENTS = 1_500
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def count_call(path: str) -> None:
    with open(path, "a") as f:  # one character per call
        f.write("x")


def calls(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


class Config(dict):
    def get(self, key, default=None):  # the Configuration's interface Progress uses
        return super().get(key, default)


# -- lines, unit -------------------------------------------------------------------------------


def test_missing_uids_are_one_line_naming_the_operators(make_env, caplog):
    env = make_env()
    (env.from_source(DataGeneratorSource(record, count=10), source_name="numbers")
     .key_by(lambda v: v % 3).reduce(lambda a, b: a + b).name("sums")
     .key_by(lambda v: v % 2).reduce(lambda a, b: a + b).name("more sums").uid("more")
     .sink_to(CollectSink()))
    with caplog.at_level(logging.WARNING, logger="flowpoint"):
        _warn_missing_uids(env.get_stream_graph())
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert "'numbers'" in lines[0] and "'sums'" in lines[0] and "'more sums'" not in lines[0] and ".uid(" in lines[0]


def test_the_final_rate_counts_this_run_only_and_a_checkpoint_is_one_line():
    out = io.StringIO()
    progress = Progress(Config({"execution.progress.interval": 0}), stream=out)
    progress.start(total=200_000, read=150_000, terminal=False)  # restored: 150,000 read before
    progress.committed(8, 30_000, 1.0, 180_000)
    progress.checkpoint_completed(CheckpointStats(3, 8, 0, status="COMPLETED", end_to_end_ms=85.4, state_size=1_234_567, incremental_size=300_000))
    progress.committed(9, 20_000, 1.0, 200_000)
    progress.ended("job", "abc", "FINISHED", 10.0, 200_000)
    lines = out.getvalue().splitlines()
    assert lines[1] == "[flowpoint] checkpoint 3 completed (epoch 8): 1.2 MB (300.0 KB new) in 85 ms"
    assert lines[-1] == (
        "[flowpoint] job 'job' (abc) FINISHED: 2 epochs, 50,000 records in 10.0 s (5,000 records/s); "
        "200,000 in all with the 150,000 read before the restore"
    )


def test_a_negative_interval_prints_nothing():
    out = io.StringIO()
    progress = Progress(Config({"execution.progress.interval": -1}), stream=out)
    progress.start(total=10, read=0, terminal=True)
    progress.say("running")
    progress.committed(1, 10, 0.1, 10)
    progress.checkpoint_completed(CheckpointStats(1, 1, 0, state_size=10))
    progress.ended("job", "abc", "FINISHED", 1.0, 10)
    assert out.getvalue() == "" and not progress.bar


def test_the_bar_line():
    line = bar_line(90_000, 200_000, 16_777.0, 3.0, 4, width=100)
    assert line.startswith("[flowpoint]  45% |") and "90,000/200,000 records" in line and "16,777 records/s" in line
    assert line.endswith("ETA 7 s") and len(line) < 100
    assert "epoch 1 running for 4 s" in bar_line(0, 10, None, 4.2, 1, width=100)
    assert len(bar_line(5, 10, 1.0, 0, 1, width=30)) < 30  # a narrow terminal: the line still fits


def test_flowpoint_list_advises_a_checkpoint_only_to_a_lost_job_that_has_one(tmp_path, capsys):
    import socket

    from flowpoint.control.commands import list_command
    from flowpoint.driver.registry import JobEntry, JobRegistry

    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait(timeout=30)  # a pid that is gone: its jobs are LOST
    registry = JobRegistry(tmp_path / "jobs")
    host = socket.gethostname()
    chk = tmp_path / "ck" / ("a" * 32) / "chk-4"
    chk.mkdir(parents=True)
    (chk / "_metadata").write_text("{}")
    registry.write(JobEntry("a" * 32, "with one", "RUNNING", 1, proc.pid, host, None, last_checkpoint_id=4, last_checkpoint_path=str(chk)))
    registry.write(JobEntry("b" * 32, "without", "RUNNING", 1, proc.pid, host, None))
    registry.write(JobEntry("c" * 32, "resumed", "RUNNING", 1, proc.pid, host, None, resumed_from="d" * 32, resumed_checkpoint_id=2))
    # killed while it finished (issue 25): its checkpoints are deleted, its entry still says RUNNING
    gone = f"file://{tmp_path}/ck/{'e' * 32}/chk-7"
    registry.write(JobEntry("e" * 32, "finished", "RUNNING", 1, proc.pid, host, None, last_checkpoint_id=7, last_checkpoint_path=gone))
    assert list_command(False, registry) == 0
    err = {ln[4:36]: ln for ln in capsys.readouterr().err.splitlines()}
    assert f"from its last checkpoint, 4 ({chk}), with `flowpoint run --resume` or `-s {chk}`" in err["a" * 32]
    assert f"its last checkpoint, 7 ({gone}), no longer exists" in err["e" * 32] and "--resume" not in err["e" * 32]
    assert f"-s {gone}" not in err["e" * 32]  # names no checkpoint to restore
    assert "last checkpoint" not in err["b" * 32] and "completed no checkpoint" in err["b" * 32] and "from the beginning" in err["b" * 32]
    assert "last checkpoint" not in err["c" * 32] and f"savepoint 2 of job {'d' * 32}" in err["c" * 32]


# -- the terminal, end to end ------------------------------------------------------------------


@pytest.mark.parametrize("where", ["the job", "a module it imports", "flowpoint info"])
def test_a_syntax_error_in_the_job_is_one_line_with_its_source_and_caret(tmp_path, where):
    """Issue 25: a syntax error printed Python's traceback through cli.py and runpy."""
    (tmp_path / "job.py").write_text("from flowpoint import StreamExecutionEnvironment\n\nx = = 1\n")
    (tmp_path / "imports.py").write_text("import helper\n")
    (tmp_path / "helper.py").write_text("def f(:\n    pass\n")
    script, command = ("imports.py", "run") if where == "a module it imports" else ("job.py", "info" if where == "flowpoint info" else "run")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([sys.executable, "-m", "flowpoint.cli", command, script], capture_output=True, text=True, timeout=120, cwd=tmp_path, env=env)
    assert r.returncode == 1
    if where == "a module it imports":
        assert r.stderr.splitlines() == ["helper.py:1: SyntaxError: invalid syntax", "    def f(:", "          ^"], r.stderr
    else:
        assert r.stderr.splitlines() == ["job.py:3: SyntaxError: invalid syntax", "    x = = 1", "        ^"], r.stderr


def test_the_final_rate_after_a_restore_counts_this_run_and_checkpoints_are_announced(make_env, tmp_path, capsys):
    """A run that fails for good after checkpoints, then a run restored from its latest one: the
    final line counts the records the second run read in its own time."""
    first = make_env(parallelism=2, max_records=200, state_checkpoints_dir=str(tmp_path / "ck"))
    first.enable_checkpointing(1)
    first.set_restart_strategy(RestartStrategies.no_restart())
    build(first, EVENTS, function=Counting(fail_value=record(1_100), flag=str(tmp_path / "never"), fail_times=10**9))
    client = first.execute_async("rate")
    with pytest.raises(UserFunctionError):
        client.wait(300)
    job_dir = tmp_path / "ck" / client.get_job_id()
    latest = max((p for p in job_dir.iterdir() if p.name.startswith("chk-")), key=lambda p: int(p.name[4:]))
    capsys.readouterr()

    second = make_env(parallelism=2, max_records=200, state_checkpoints_dir=str(tmp_path / "ck"), execution_progress_interval=0)
    second.get_configuration().set("execution.savepoint.path", str(latest))
    second.enable_checkpointing(1)
    sink = build(second, EVENTS)
    result = second.execute("rate")
    err = capsys.readouterr().err
    assert result.get_keyed_state("counting")["count"] == expected_state(EVENTS)["count"]
    assert len(sink.results) < len(expected_outputs(EVENTS))  # the first run's output came before the restore
    assert re.search(r"\[flowpoint\] restoring checkpoint \d+ \(epoch \d+\)", err), err
    restored = EVENTS - len(sink.results)  # Counting outputs one record per record it counts
    final = err.strip().splitlines()[-1]
    m = re.search(r"FINISHED: (\d+) epochs, ([\d,]+) records in ([\d.]+) s \(([\d,]+) records/s\); ([\d,]+) in all with the ([\d,]+) read before", final)
    assert m, final
    run_records, seconds, rate = int(m[2].replace(",", "")), float(m[3]), int(m[4].replace(",", ""))
    assert run_records == len(sink.results) == EVENTS - restored  # this run's records only
    assert int(m[5].replace(",", "")) == EVENTS and int(m[6].replace(",", "")) == restored
    assert abs(rate - run_records / seconds) <= max(2, 0.06 * rate)  # (the seconds are rounded)
    checkpoints = re.findall(r"\[flowpoint\] checkpoint (\d+) completed \(epoch \d+\): [\d.]+ [KM]?B.* in [\d,]+ ms", err)
    assert checkpoints and len(checkpoints) == len(set(checkpoints)), err


def _run_with_stderr(make_env, stderr, events: int = 3_000):
    """Run a bounded job (progress every epoch) with ``sys.stderr`` replaced by ``stderr``."""
    env = make_env(parallelism=2, max_records=500, execution_progress_interval=0)
    env.from_source(DataGeneratorSource(record, count=events), source_name="numbers").uid("numbers") \
        .key_by(lambda v: v % 5).reduce(lambda a, b: a + b).uid("sums").sink_to(CollectSink())
    saved = sys.stderr
    sys.stderr = stderr
    try:
        env.execute("progress")
    finally:
        sys.stderr = saved


def test_a_bounded_job_shows_a_progress_bar_on_a_terminal(make_env):
    master, slave = pty.openpty()
    chunks: list[bytes] = []

    def read() -> None:
        while True:
            try:
                data = os.read(master, 4096)
            except OSError:
                return
            if not data:
                return
            chunks.append(data)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    terminal = os.fdopen(slave, "w", encoding="utf-8")
    try:
        _run_with_stderr(make_env, terminal)
        terminal.flush()
        time.sleep(0.2)
    finally:
        terminal.close()
        reader.join(5)
        os.close(master)
    text = b"".join(chunks).decode("utf-8", "replace")
    bars = [b for b in text.split("\r\x1b[K") if "records" in b and "%" in b]
    assert bars, text
    assert re.search(r"\[flowpoint\] +100% \|█+\| 3,000/3,000 records", text), text
    assert not re.search(r"\[flowpoint\] epoch \d+:", text)  # the bar, not a line per epoch
    assert "FINISHED: 6 epochs, 3,000 records" in text.splitlines()[-1]  # the final line replaces the bar


def test_elsewhere_a_bounded_job_prints_plain_lines(make_env, tmp_path):
    with open(tmp_path / "stderr", "w+", encoding="utf-8") as f:
        _run_with_stderr(make_env, f)
        f.seek(0)
        text = f.read()
    assert "\x1b[K" not in text and "\r" not in text
    assert len(re.findall(r"^\[flowpoint\] epoch \d+: [\d,]+ records in ", text, re.M)) == 6, text
    assert text.splitlines()[-1].startswith("[flowpoint] job 'progress'") and "FINISHED" in text


# -- a user function's error -------------------------------------------------------------------

KEY_JOB = '''
import sys
from flowpoint import CollectSink, DataGeneratorSource, StreamExecutionEnvironment


def event(i):
    return {"user": f"u{i % 7}", "n": i} if i != 120 else {"n": i}


def user_of(e):
    return e["user"]  # the failing line


env = StreamExecutionEnvironment.get_execution_environment()
env.set_parallelism(2)
env.enable_checkpointing(100)
(env.from_source(DataGeneratorSource(event, count=500), source_name="events")
    .key_by(user_of)
    .reduce(lambda a, b: {"user": a["user"], "n": a["n"] + b["n"]}).name("totals")
    .sink_to(CollectSink()))
env.execute("bad key")
'''


@pytest.mark.slow
def test_the_error_output_of_a_failing_key_selector_is_under_40_lines_and_names_the_users_file_line(tmp_path):
    """As a user runs it: `flowpoint run`, checkpointing on (the default restart strategy then
    restarts without limit), a key selector reading a missing field."""
    job = tmp_path / "bad_key.py"
    job.write_text(textwrap.dedent(KEY_JOB))
    line = KEY_JOB.splitlines().index('    return e["user"]  # the failing line') + 1
    cmd = [sys.executable, "-m", "flowpoint.cli", "run", "-m", MASTER, "-D", f"state.checkpoints.dir={tmp_path / 'ck'}",
           "-D", f"state.working.dir={tmp_path / 'w'}", str(job)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=str(tmp_path))
    output = proc.stdout + proc.stderr
    lines = output.splitlines()
    assert proc.returncode == 1, output[-3000:]
    assert len(lines) < 40, output
    assert f'File "{job}", line {line}, in user_of' in output  # the user's file:line
    assert 'return e["user"]' in output and "KeyError: 'user'" in output
    errors = [ln for ln in lines if ln.startswith("flowpoint: error:")]
    assert len(errors) == 1 and f"user_of at {job}:" in errors[0] and "operator 'totals'" in errors[0], output
    assert "{'n': 120}" in errors[0] and "(uid 'reduce-" in errors[0]
    # not Spark's or Java's traces, nor the incubator warning; no restarts without end
    assert "WARNING: Using incubator modules" not in output and "ERROR Executor" not in output and "\tat " not in output
    assert "pyspark" not in output and "flowpoint/tasks" not in output
    assert len([ln for ln in lines if "Restarting" in ln]) == 1 and "failed again" in output
    # without a restart strategy set, a repeated KeyError fails fast; the line says how to change it
    assert "restart-strategy.repeated-failure.fail-fast is data-errors (the default when no restart strategy is set)" in output
    assert len([ln for ln in lines if "no uid" in ln]) == 1  # one line for the two operators
    log_path = re.search(r"The full report \(every traceback\): (\S+)", output)[1]
    report = open(log_path).read()
    assert "-- the task's traceback --" in report and "flowpoint/tasks/operators.py" in report
    assert f'File "{job}", line {line}, in user_of' in report


class FailsAt(ProcessFunction):
    """Raises ``error`` on ``value`` (``times`` times), counting the calls that raised."""

    def __init__(self, value: int, calls_file: str, error: type = ValueError, times: int = 10**9):
        self.value, self.calls_file, self.error, self.times = value, calls_file, error, times

    def process_element(self, v, ctx):
        if v == self.value and calls(self.calls_file) < self.times:
            count_call(self.calls_file)
            msg = f"cannot take {v}"
            raise self.error(msg)
        yield v


@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_a_deterministic_error_does_not_restart_without_end_when_the_user_chose_to_fail_fast(make_env, tmp_path, runtime):
    """Checkpointing on, a restart strategy of a million attempts and
    ``restart-strategy.repeated-failure.fail-fast: data-errors``: the user function fails on the
    same record twice (once, then once after the restart), and the job fails with its error."""
    failures = str(tmp_path / "failures")
    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"), execution_runtime=runtime)
    env.enable_checkpointing(50)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(1_000_000, 10))
    env.get_configuration().set("restart-strategy.repeated-failure.fail-fast", "data-errors")
    env.from_source(DataGeneratorSource(lambda i: i, count=400), source_name="numbers").uid("numbers") \
        .process(FailsAt(250, failures)).name("picky").uid("picky").key_by(lambda v: v % 3).reduce(lambda a, b: a + b).uid("sum") \
        .sink_to(CollectSink())
    started = time.monotonic()
    client = env.execute_async("deterministic")
    with pytest.raises(UserFunctionError) as info:
        client.wait(300)
    assert time.monotonic() - started < 120
    assert calls(failures) == 2 and client.progress().restarts == 1  # one attempt (no Spark retry), one restart, failed
    error = info.value
    assert "operator 'picky' (uid 'picky'" in str(error) and "cannot take 250" in str(error) and "while processing 250" in str(error)
    assert error.record == "250" and error.exception == "ValueError: cannot take 250"
    assert error.frames and error.frames[-1][0] == __file__ and error.frames[-1][3] == "raise self.error(msg)"


def test_an_os_error_is_restarted_as_the_strategy_says(make_env, tmp_path):
    """An OSError (I/O, network) may pass: the same one again after a restart restarts again."""
    failures = str(tmp_path / "failures")
    env = make_env(parallelism=1, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(5, 10))
    sink = CollectSink()
    env.from_source(DataGeneratorSource(lambda i: i, count=300), source_name="numbers").uid("numbers") \
        .process(FailsAt(250, failures, ConnectionError, times=3)).uid("calls").sink_to(sink)
    client = env.execute_async("flaky service")
    client.wait(300)
    assert calls(failures) == 3 and client.progress().restarts == 3
    assert sorted(sink.results) == list(range(300))


def test_an_injected_once_only_failure_restarts_and_the_job_succeeds(make_env, tmp_path):
    flag = str(tmp_path / "failed")
    env = make_env(parallelism=2, max_records=200, state_checkpoints_dir=str(tmp_path / "ck"))
    env.enable_checkpointing(1)
    env.set_restart_strategy(RestartStrategies.fixed_delay_restart(2, 10))
    sink = build(env, EVENTS, function=Counting(fail_value=record(1_100), flag=flag))
    client = env.execute_async("once")
    result = client.wait(300)
    assert calls(flag + ".failures") == 1 and client.progress().restarts == 1  # Spark did not retry it
    assert result.get_keyed_state("counting")["count"] == expected_state(EVENTS)["count"]
    assert sorted(sink.results) == expected_outputs(EVENTS)


KIND_JOB = textwrap.dedent(
    """
    import sys
    from flowpoint import (DataGeneratorSource, KeyedProcessFunction, ListStateDescriptor, RestartStrategies,
                           StreamExecutionEnvironment, ValueStateDescriptor)

    KIND, RUNTIME, CHECKPOINTS = sys.argv[1:4]

    class Keep(KeyedProcessFunction):
        def open(self, ctx):
            self.s = ctx.get_state(ValueStateDescriptor("s")) if KIND == "value" else ctx.get_list_state(ListStateDescriptor("s"))

        def process_element(self, v, ctx):
            if KIND == "value":
                self.s.update(v)
                if v == 150:
                    raise RuntimeError("stop here")  # fails for good: its checkpoints stay
            else:
                self.s.add(v)
            yield v

    env = StreamExecutionEnvironment.get_execution_environment(
        {"execution.epoch.interval": 50, "execution.runtime": RUNTIME, "state.backend.type": "rocksdb"})
    env.set_parallelism(1)
    env.enable_checkpointing(1)
    env.get_checkpoint_config().set_checkpoint_storage(CHECKPOINTS)
    env.set_restart_strategy(RestartStrategies.no_restart())
    source = DataGeneratorSource(lambda i: i, count=200, rate_limit_per_second=100)
    env.from_source(source, source_name="n").uid("n").key_by(lambda x: x % 3).process(Keep()).uid("keep")
    env.execute("kinds")
    """
)


@pytest.mark.slow
def test_a_state_whose_kind_changed_shows_the_message_and_leaves_the_trace_to_the_log(tmp_path):
    """Issue 25: restoring a ValueState as a ListState on the continuous runtime printed Spark's
    74 lines (the task's Python traceback and Java's) and then, as the error, "slot 0 ... lost its
    control channel": the slot failed its Spark task before its report of the error was sent."""
    (tmp_path / "kinds.py").write_text(KIND_JOB)
    env = dict(os.environ, FLOWPOINT_HOME=str(tmp_path / "home"), PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))

    def run(*args):
        return subprocess.run([sys.executable, "-m", "flowpoint.cli", "run", *args], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path, env=env)

    first = run("kinds.py", "value", "epoch", f"file://{tmp_path}/ck")
    assert first.returncode == 1 and "stop here" in first.stderr, first.stderr[-3000:]
    chk = max((tmp_path / "ck").glob("*/chk-*"), key=lambda p: int(p.name.split("-")[1]))
    r = run("-s", str(chk), "kinds.py", "list", "continuous", f"file://{tmp_path}/ck2")
    assert r.returncode == 1
    lines = r.stderr.splitlines()
    errors = [i for i, line in enumerate(lines) if line.startswith("flowpoint: error: ")]
    assert errors and "declares state 's' as list state, but the checkpoint or savepoint it was restored from holds 's' as value state" in lines[errors[0]], r.stderr[-4000:]
    assert len(lines) < 12 and not any("Traceback" in line or line.startswith("\tat ") for line in lines), r.stderr[-4000:]
    log = re.search(r"^The full report \(every traceback\): (\S+)$", r.stderr, re.M).group(1)
    text = open(log).read()
    assert "-- the task's traceback --" in text and "check_restored_kind" in text  # the trace went to the log file


def test_a_slot_signals_its_failure_only_once_the_report_is_sent():
    """The race behind the test above: the slot's run loop, seeing ``failed`` set while the report
    was still being sent, failed the Spark task and closed the control channel under the send."""
    from types import SimpleNamespace

    from flowpoint.tasks.slot import Slot

    seen = []
    slot = SimpleNamespace(failed=threading.Event(), reported=threading.Event())
    slot.control = SimpleNamespace(send=lambda message: seen.append((slot.failed.is_set(), slot.reported.is_set())))
    Slot._report(slot, ("failed", 0, 0, RuntimeError("x")))
    assert seen == [(False, False)] and slot.failed.is_set() and slot.reported.is_set()
    Slot._report(slot, ("metrics", 0, []))  # other messages do not fail the slot
    assert seen[-1] == (True, True)
