"""A job started from a Jupyter notebook (issue 26, item 3): ``execute_async()`` returns at once,
the cell shows the job's dashboard link and one status line updated in place (no stream of
``[flowpoint]`` lines), and ``stop_with_savepoint()``/``cancel()`` work from later cells, after
which the display shows the final state.

The end-to-end test runs ``examples/notebook_quickstart.ipynb`` in a fresh IPython kernel through
nbclient; the others run in this process, with a stand-in for IPython's display machinery."""

from __future__ import annotations

import html
import io
import os
import re
import sys
import time
import types

import pytest

from flowpoint import (
    DataGeneratorSource,
    KeyedProcessFunction,
    Types,
    ValueStateDescriptor,
    WatermarkStrategy,
)
from flowpoint.api.config import Configuration
from flowpoint.control import auth, notebook
from flowpoint.control.endpoint import dashboard_url
from flowpoint.driver.job import JobClient
from flowpoint.driver.progress import Progress
from flowpoint.errors import ConfigurationError

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOK = os.path.join(REPO, "examples", "notebook_quickstart.ipynb")


class Config(dict):
    def get(self, key, default=None):  # the Configuration's interface Progress uses
        return super().get(key, default)


class FakeHandle:
    """IPython's DisplayHandle: what was displayed, then every update."""

    def __init__(self, bundle):
        self.bundles = [bundle]

    def update(self, bundle, raw=False):
        assert raw
        self.bundles.append(bundle)


@pytest.fixture
def fake_kernel(monkeypatch):
    """This process looks like an IPython kernel: ``IPython`` and ``ipykernel`` imported, a
    shell with a kernel; ``display(..., display_id=True)`` returns a recording handle."""
    handles: list[FakeHandle] = []
    ipython = types.ModuleType("IPython")
    display_module = types.ModuleType("IPython.display")

    def display(bundle, raw=False, display_id=None):
        assert raw and display_id is True
        handles.append(FakeHandle(bundle))
        return handles[-1]

    display_module.display = display
    ipython.display = display_module
    shell = types.SimpleNamespace(kernel=object())
    ipython.get_ipython = lambda: shell
    monkeypatch.setitem(sys.modules, "IPython", ipython)
    monkeypatch.setitem(sys.modules, "IPython.display", display_module)
    monkeypatch.setitem(sys.modules, "ipykernel", types.ModuleType("ipykernel"))
    return handles


# -- detection, settings, lines ----------------------------------------------------------------


def test_a_notebook_is_an_ipython_kernel_found_without_importing_ipython(monkeypatch, fake_kernel):
    assert notebook.in_ipython_kernel()
    assert notebook.wanted(Configuration())
    # the settings that keep the terminal's lines, or show nothing
    assert not notebook.wanted(Configuration({"execution.progress.display": "terminal"}))
    assert not notebook.wanted(Configuration({"execution.progress.interval": -1}))
    # a terminal IPython: a shell without a kernel
    monkeypatch.setattr(sys.modules["IPython"], "get_ipython", lambda: types.SimpleNamespace())
    assert not notebook.in_ipython_kernel()
    # plain Python: no IPython module, and none is imported to find out
    monkeypatch.delitem(sys.modules, "IPython")
    assert not notebook.in_ipython_kernel()
    assert "IPython" not in sys.modules


def test_the_display_setting_is_checked():
    with pytest.raises(ConfigurationError, match="execution.progress.display"):
        Configuration({"execution.progress.display": "browser"})


def test_with_a_listener_progress_prints_nothing_and_passes_on_what_happens():
    out, heard = io.StringIO(), []
    progress = Progress(Config({"execution.progress.interval": 0}), stream=out)
    progress.listener = heard.append
    progress.start(total=1_000, read=0, terminal=True)  # a bar, were it not for the listener
    assert not progress.bar
    progress.say("job 'x' (abc) running in epochs on Spark local[2]")
    progress.committed(1, 500, 1.0, 500)  # a throughput line elsewhere: the status line shows the rate
    progress.ended("x", "abc", "FINISHED", 2.0, 1_000)
    assert out.getvalue() == ""
    assert heard[0] == "job 'x' (abc) running in epochs on Spark local[2]"
    assert heard[1].startswith("job 'x' (abc) FINISHED: 1 epoch, 500 records") and len(heard) == 2


def test_the_rate_is_over_the_last_seconds():
    sampler = notebook.RateSampler()
    assert sampler.add(0, now=100.0) is None
    assert sampler.add(500, now=100.5) is None  # under a second of samples: no rate yet
    assert sampler.add(1_000, now=101.0) == 1_000
    for t in range(2, 12):
        rate = sampler.add(1_000 + (t - 1) * 100, now=100.0 + t)
    assert rate == pytest.approx(100)  # the first, faster second has left the window


class RecordingCoordinator:
    def __init__(self):
        self.calls = []

    def savepoint(self, target, stop=False, drain=False):
        self.calls.append((target, stop, drain))
        return "file:///sp/savepoint-x"


def test_stop_with_savepoint_takes_pyflink_s_arguments_too():
    coordinator = RecordingCoordinator()
    client = JobClient(coordinator)
    client.stop_with_savepoint("/sp")
    client.stop_with_savepoint("/sp", drain=True)
    client.stop_with_savepoint(False, "/sp")  # PyFlink: (advance_to_end_of_event_time, savepoint_directory)
    client.stop_with_savepoint(True)
    client.stop_with_savepoint(advance_to_end_of_event_time=True, savepoint_directory="/sp")
    assert coordinator.calls == [("/sp", True, False), ("/sp", True, True), ("/sp", True, False), (None, True, True), ("/sp", True, True)]
    with pytest.raises(ConfigurationError, match="savepoint directory"):
        client.stop_with_savepoint("/sp", "/other")


def test_a_failed_job_s_display_names_the_error_and_escapes_what_the_user_named():
    import threading

    from flowpoint.driver.checkpoint_coordinator import CheckpointStats
    from flowpoint.driver.job_status import JobProgress, JobStatus
    from flowpoint.errors import UserFunctionError

    error = UserFunctionError("map 'parse' (uid p) failed on record 7: <b>ValueError</b>\nmore")
    error.log_path = "/home/me/.flowpoint/logs/x.log"
    done = threading.Event()
    done.set()
    name = "<script>alert(1)</script>"
    coordinator = types.SimpleNamespace(
        job_id="a" * 32, job_name=name, status=JobStatus.FAILED, failure=error, done=done, ended_ms=None,
        view=lambda: JobProgress("a" * 32, name, JobStatus.FAILED, 3, 1_234, 2, (), None, "", (), "epoch"),
        checkpoint_stats=lambda: [CheckpointStats(5, 2, 0, status="COMPLETED"), CheckpointStats(6, 3, 0, status="FAILED")],
        savepoint_stats=lambda: [],
    )
    client = JobClient(coordinator)
    client._attach_dashboard(lambda signed_in: dashboard_url("127.0.0.1:1234", "secret-token" if signed_in else None, "a" * 32))
    coordinator.ended_ms = client.get_start_time_ms() + 65_000
    bundle = notebook.render(client, rate=99.0, events=["job restarted <twice>"])
    text = bundle["text/plain"].splitlines()
    assert text[0] == (
        f"[flowpoint] job {name!r} ({'a' * 32}) FAILED in epochs for 1 min 05 s, 1,234 records read, epoch 3, "
        "checkpoint 5, 2 restarts, UserFunctionError: map 'parse' (uid p) failed on record 7: <b>ValueError</b>, "
        "every traceback in /home/me/.flowpoint/logs/x.log"
    )
    assert text[1] == "[flowpoint] job restarted <twice>"  # the dashboard is gone: the job ended
    page = bundle["text/html"]
    assert "<script>" not in page and "<b>ValueError" not in page and "&lt;twice&gt;" in page
    assert "secret-token" not in page + bundle["text/plain"] and "dashboard closed" in page


# -- a job in this process, with the display machinery stood in --------------------------------


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        self.count.update((self.count.value() or 0) + 1)
        return iter(())


@pytest.mark.slow
def test_a_job_shows_one_display_updated_in_place_and_cancel_shows_the_final_state(make_env, fake_kernel, capfd):
    env = make_env(execution_progress_interval=500)
    source = DataGeneratorSource(lambda i: i, count=None, rate_limit_per_second=2_000)
    env.from_source(source, WatermarkStrategy.no_watermarks(), "numbers").uid("numbers") \
        .key_by(lambda v: v % 7).process(Count()).uid("counts")
    started = time.monotonic()
    client = env.execute_async("notebook cancel")
    submitted = time.monotonic() - started
    try:
        assert submitted < 5, f"execute_async took {submitted:.1f} s"
        assert len(fake_kernel) == 1, "one display per job"
        handle = fake_kernel[0]
        first = handle.bundles[0]
        token = auth.load_or_create_token()
        signed = client.get_dashboard_url(signed_in=True)
        assert signed == client.get_dashboard_url().replace("/#/", f"/?token={token}#/")
        assert f'href="{html.escape(signed)}"' in first["text/html"]
        assert f"job 'notebook cancel' ({client.get_job_id()})" in first["text/plain"]
        assert token not in first["text/plain"] and token not in repr(client)
        assert signed in client._repr_html_()
        deadline = time.monotonic() + 60
        while not any(re.search(r"RUNNING .*[1-9][\d,]* records read", b["text/plain"]) for b in handle.bundles):
            assert time.monotonic() < deadline, handle.bundles[-1]
            time.sleep(0.2)
        running_since = time.monotonic()
        time.sleep(2)
        updates = len(handle.bundles)
        client.cancel()
        assert client.wait_until_done(60)
        final = handle.bundles[-1]
        assert "CANCELED" in final["text/plain"] and "CANCELED" in final["text/html"]
        assert "dashboard closed" in final["text/html"] and token not in final["text/html"]
        assert final["text/plain"].splitlines()[-1].startswith(f"[flowpoint] job 'notebook cancel' ({client.get_job_id()}) CANCELED")
        # throttled: at most one update per 0.5 s while running (the content changes every second)
        assert updates - 1 <= (running_since + 2 - started) / 0.5 + 2
        time.sleep(1)
        assert handle.bundles[-1] is final, "nothing after the final state"
        assert client.get_dashboard_url() is None and client.get_dashboard_url(signed_in=True) is None
    finally:
        client.cancel()
        client.wait_until_done(60)
    err = capfd.readouterr().err
    assert "[flowpoint]" not in err, err  # no lines on stderr: the display says it all


# -- the example notebook in a fresh kernel ------------------------------------------------------


@pytest.mark.slow
def test_the_example_notebook_starts_watches_and_stops_a_job(tmp_path):
    import nbformat
    from nbclient import NotebookClient

    updates: list[tuple[int, dict]] = []  # (cell index, data) of every update_display_data

    class Client(NotebookClient):
        def process_message(self, msg, cell, cell_index):
            if msg["msg_type"] == "update_display_data":
                updates.append((cell_index, msg["content"]["data"]))
            return super().process_message(msg, cell, cell_index)

    nb = nbformat.read(NOTEBOOK, as_version=4)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO, os.environ.get("PYTHONPATH", "")]))
    started = time.monotonic()
    Client(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute(env=env)
    took = time.monotonic() - started
    token = auth.load_or_create_token()  # the kernel shares this process's FLOWPOINT_HOME

    cells = [c for c in nb.cells if c.cell_type == "code"]
    source_of = {i: c.source for i, c in enumerate(nb.cells)}
    (start,) = [c for c in cells if "execute_async(" in c.source]
    (watch,) = [c for c in cells if c.source.rstrip().endswith("job_client")]
    (stop,) = [c for c in cells if "stop_with_savepoint(" in c.source]
    (read,) = [c for c in cells if "state_reader(" in c.source]

    def stdout(cell):
        return "".join(o.get("text", "") for o in cell.outputs if o.output_type == "stream" and o.name == "stdout")

    # execute_async returned at once, and its cell holds the job's one display
    seconds = float(re.search(r"execute_async returned in ([\d.]+) s", stdout(start)).group(1))
    assert seconds < 5
    (shown,) = [o for o in start.outputs if o.output_type == "display_data"]
    job_id = re.search(r"\(([0-9a-f]{32})\)", shown.data["text/plain"]).group(1)

    # the next cell: RUNNING, the dashboard's address, and the job client's own HTML with the signed-in link
    assert "status: RUNNING" in stdout(watch)
    url = re.search(r"dashboard: (http://127\.0\.0\.1:\d+/#/jobs/[0-9a-f]{32})", stdout(watch)).group(1)
    assert url.endswith(job_id)
    signed = url.replace("/#/", f"/?token={token}#/")
    (result,) = [o for o in watch.outputs if o.output_type == "execute_result"]
    assert f'href="{html.escape(signed)}"' in result.data["text/html"] and "RUNNING" in result.data["text/html"]
    assert token not in result.data["text/plain"]

    # the status line was updated in place while the job ran (while later cells ran), links
    # signed in, text without the token
    running = [d["text/plain"] for _, d in updates if "RUNNING" in d["text/plain"].splitlines()[0]]
    assert len(set(running)) >= 2, [d["text/plain"] for _, d in updates]
    assert any(source_of[i] in (watch.source, stop.source) for i, _ in updates)
    assert all(f'href="{html.escape(signed)}"' in d["text/html"] for _, d in updates if "RUNNING" in d["text/plain"])
    assert all(token not in d["text/plain"] for _, d in updates)

    # stopped with a savepoint from a later cell: the savepoint exists, the job FINISHED
    out = stdout(stop)
    path = re.search(r"savepoint: (file://\S+)", out).group(1)
    assert "written: True" in out and "final status: FINISHED" in out
    assert os.path.isfile(os.path.join(path.removeprefix("file://"), "_metadata"))
    # ... and the display in the starting cell shows the final state (an update nbclient applied)
    final = shown.data
    assert updates[-1][1] == final
    assert re.search(r"FINISHED .*[1-9][\d,]* records read", final["text/plain"]) and f"savepoint {path}" in final["text/plain"]
    assert "dashboard closed" in final["text/html"] and token not in final["text/html"]

    # the savepoint's state read back
    assert re.search(r"\('[a-z]', '[A-Z]+'\) \d+", stdout(read))

    # no stream of flowpoint's lines in any cell, and the token in no stream
    for cell in cells:
        for o in cell.outputs:
            if o.output_type == "stream":
                assert "[flowpoint]" not in o.text and token not in o.text, o.text
    assert took < 120, f"the notebook took {took:.0f} s"
