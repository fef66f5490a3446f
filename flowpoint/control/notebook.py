"""A job's status in a Jupyter notebook: its dashboard link and one status line, updated in place.

When a job starts in an IPython kernel (Jupyter, JupyterLab, VS Code's notebooks: found through
``sys.modules``, flowpoint never imports IPython itself) and ``execution.progress.display`` is
``auto`` (the default), ``execute_async()`` (and ``execute()``) show one display in the cell that
started the job, instead of printing lines on standard error:

- the job's name and id, a link to its page on the dashboard, signed in (the URL carries the
  installation's control token, like the link ``flowpoint list`` prints to its owner: it is the
  owner's own output; it is never written to a log or the display's ``text/plain`` form), and a
  link to Spark's UI;
- a status line: the status, how long the job has run, the records its sources read (committed)
  and the rate over the last seconds, the epoch or segment, the last completed checkpoint, the
  last savepoint, restarts;
- the last few lines that say what happened to the job (it runs, a checkpoint completed, a
  savepoint was written, it restarted), which a terminal shows as ``[flowpoint]`` lines.

A daemon thread re-renders the display every ``execution.progress.interval`` ms (at least every
half second, at most once a second by default) and sends an update (``update_display_data``)
only when its content changed. When the job ends the display shows its final state: the
thread does it, and so do ``JobClient.wait()`` and ``wait_until_done()`` before they return, so
a cell that waits for the job ends with the final state shown. The dashboard's link is then
gone (the job's endpoint stops serving it; ``flowpoint ui`` shows ended jobs).

``execution.progress.display: terminal`` keeps the terminal's lines in a notebook too; a negative
``execution.progress.interval`` shows nothing at all, in a notebook or not.
"""

from __future__ import annotations

import html
import logging
import sys
import threading
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from flowpoint.driver.progress_bar import duration

if TYPE_CHECKING:
    from flowpoint.driver.job import JobClient

log = logging.getLogger("flowpoint")

EVENTS = 4  # lines of what happened to the job kept in the display
MIN_PERIOD_S = 0.5  # the display is re-rendered at most this often
RATE_WINDOW_S = 5.0  # the rate is taken over the last seconds

STATUS_COLOURS = {
    "CREATED": "#6c757d", "RUNNING": "#1a7f37", "FINISHED": "#0969da", "FAILING": "#cf222e",
    "RESTARTING": "#9a6700", "FAILED": "#cf222e", "CANCELLING": "#9a6700", "CANCELED": "#6c757d",
}


def in_ipython_kernel() -> bool:
    """Whether this process is an IPython kernel (a notebook's), without importing IPython: a
    terminal ``ipython`` is not (its output is a terminal's)."""
    ipython = sys.modules.get("IPython")
    if ipython is None or "ipykernel" not in sys.modules:
        return False
    try:
        shell = ipython.get_ipython()
    except Exception:  # noqa: BLE001 - an IPython that cannot say: not a notebook
        return False
    return shell is not None and getattr(shell, "kernel", None) is not None


def wanted(config: Any) -> bool:
    """Whether the job shows its status as a notebook display (see the module's doc)."""
    interval = config.get("execution.progress.interval")
    if interval is not None and int(interval) < 0:
        return False
    if str(config.get("execution.progress.display") or "auto").lower() != "auto":
        return False
    return in_ipython_kernel()


class RateSampler:
    """Records per second over the last :data:`RATE_WINDOW_S` seconds of samples."""

    def __init__(self) -> None:
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, records: int, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        self._samples.append((now, records))
        while len(self._samples) > 2 and now - self._samples[1][0] >= RATE_WINDOW_S:
            self._samples.popleft()
        (t0, r0), (t1, r1) = self._samples[0], self._samples[-1]
        return (r1 - r0) / (t1 - t0) if t1 - t0 >= 1.0 else None


def _last(stats: list, status: str = "COMPLETED") -> Any:
    return next((s for s in reversed(stats) if s.status == status), None)


def status_parts(client: JobClient, rate: float | None) -> tuple[str, list[str]]:
    """The job's status and the rest of its status line, as plain text pieces."""
    status = client.get_job_status().value
    progress = client.progress()
    parts: list[str] = []
    runtime = {"continuous": "continuously", "epoch": "in epochs"}.get(progress.runtime)
    end_ms = client.get_end_time_ms()
    ran = duration(((end_ms or time.time() * 1000) - client.get_start_time_ms()) / 1000)
    parts.append(f"{runtime} for {ran}" if runtime and status != "CREATED" else f"for {ran}")
    read = f"{progress.records_read:,} records read"
    if rate is not None and status in ("RUNNING", "RESTARTING"):
        read += f" ({rate:,.0f} records/s)"
    parts.append(read)
    if progress.epoch:
        parts.append(f"{'segment' if progress.runtime == 'continuous' else 'epoch'} {progress.epoch}")
    checkpoint = _last(client.get_checkpoint_stats())
    if checkpoint is not None:
        parts.append(f"checkpoint {checkpoint.checkpoint_id}")
    savepoint = _last(client.get_savepoint_stats())
    if savepoint is not None and savepoint.path:
        parts.append(f"savepoint {savepoint.path}")
    if progress.restarts:
        parts.append(f"{progress.restarts} restart{'' if progress.restarts == 1 else 's'}")
    failure = client.get_failure()
    if failure is not None:
        first = (str(failure).strip().splitlines() or [type(failure).__name__])[0]
        parts.append(f"{type(failure).__name__}: {first}")
        log_path = getattr(failure, "log_path", None)
        if log_path:
            parts.append(f"every traceback in {log_path}")
    return status, parts


def render(client: JobClient, rate: float | None = None, events: list[str] | tuple[str, ...] = (),
           spark_ui: str | None = None) -> dict[str, str]:
    """The display's content now: ``text/html`` (with the signed-in dashboard link while the job
    is served, and ``spark_ui``'s) and ``text/plain`` (never with the token)."""
    progress = client.progress()
    status, parts = status_parts(client, rate)
    job = f"job {progress.job_name!r} ({progress.job_id})"
    plain_url = client.get_dashboard_url()
    text = [f"[flowpoint] {job} {status} " + ", ".join(parts)]
    if plain_url:
        text.append(f"[flowpoint] dashboard: {plain_url}")
    text.extend(f"[flowpoint] {line}" for line in events)

    e = html.escape
    links = []
    signed = client.get_dashboard_url(signed_in=True)
    if signed:
        links.append(f'<a href="{e(signed)}" target="_blank" rel="noopener noreferrer">dashboard</a>')
    elif client.is_done():
        links.append('<span title="the job\'s endpoint no longer serves it">dashboard closed: <code>flowpoint ui</code> shows ended jobs</span>')
    if spark_ui and not client.is_done():
        links.append(f'<a href="{e(spark_ui)}" target="_blank" rel="noopener noreferrer">Spark UI</a>')
    colour = STATUS_COLOURS.get(status, "#6c757d")
    lines = [
        '<div class="flowpoint-job" style="font-family: var(--jp-ui-font-family, sans-serif); font-size: 13px; line-height: 1.6">',
        f"<div><b>flowpoint</b> job <b>{e(progress.job_name)}</b> <code>{e(progress.job_id)}</code>"
        + (" &middot; " + " &middot; ".join(links) if links else "") + "</div>",
        f'<div class="flowpoint-status"><b style="color: {colour}">{e(status)}</b> ' + e(", ".join(parts)) + "</div>",
    ]
    if events:
        lines.append('<div class="flowpoint-events" style="opacity: 0.7; font-family: var(--jp-code-font-family, monospace); font-size: 12px">')
        lines.extend(f"<div>{e(line)}</div>" for line in events)
        lines.append("</div>")
    lines.append("</div>")
    return {"text/html": "\n".join(lines), "text/plain": "\n".join(text)}


def html_status(client: JobClient) -> str:
    """What ``job_client`` alone in a notebook cell shows (``JobClient._repr_html_``)."""
    display = client.status_display
    rate = display._last_rate if display is not None else None
    return render(client, rate, spark_ui=None if client.is_done() else client.get_spark_ui_url())["text/html"]


class StatusDisplay:
    """One job's display in the notebook cell that started it (see the module's doc)."""

    def __init__(self, client: JobClient, config: Any):
        self.client = client
        interval = int(config.get("execution.progress.interval") or 0)
        self.period = max(MIN_PERIOD_S, interval / 1000)
        self._events: deque[str] = deque(maxlen=EVENTS)
        self._rate = RateSampler()
        self._last_rate: float | None = None
        self._lock = threading.Lock()
        self._handle: Any = None
        self._spark_ui = client.get_spark_ui_url()  # asked once, not every second
        self._shown: dict[str, str] | None = None
        self._final = False
        self.updates = 0  # updates sent after the first display
        self._thread = threading.Thread(target=self._run, name=f"flowpoint-notebook-{client.get_job_id()[:8]}", daemon=True)

    def event(self, line: str) -> None:
        """A line that says what happened to the job (Progress's listener): shown at the next update."""
        self._events.append(line)

    def show(self) -> None:
        """Display the job's status in the current cell and keep it current until the job ends."""
        from IPython.display import display  # an IPython kernel runs this process (wanted())

        bundle = self._bundle()
        with self._lock:
            self._handle = display(bundle, raw=True, display_id=True)
            self._shown = bundle
        self._thread.start()

    def _bundle(self) -> dict[str, str]:
        if not self.client.is_done():
            self._last_rate = self._rate.add(self.client.progress().records_read)
        return render(self.client, self._last_rate, tuple(self._events), self._spark_ui)

    def refresh(self) -> None:
        """Re-render; send an update when the content changed."""
        with self._lock:
            if self._final or self._handle is None:
                return
            self._send(self._bundle())

    def finish(self) -> None:
        """The job ended: show its final state, once."""
        with self._lock:
            if self._final or self._handle is None:
                return
            self._final = True
            self._send(self._bundle())

    def _send(self, bundle: dict[str, str]) -> None:
        if bundle == self._shown:
            return
        try:
            self._handle.update(bundle, raw=True)
        except Exception:  # noqa: BLE001 - the kernel is shutting down: the job goes on
            log.debug("could not update the notebook display of job %s", self.client.get_job_id(), exc_info=True)
            return
        self._shown = bundle
        self.updates += 1

    def _run(self) -> None:
        while not self.client.wait_until_done(self.period):
            self.refresh()
        self.finish()
