"""The dashboard (flowpoint/control/web) in a real browser, against ``flowpoint ui``.

One job (tests/dashboard_job.py: checkpoints every second, one injected failure and so one
restart, event-time windows that drop late events) runs in a process of its own; ``flowpoint ui``
serves the dashboard for it from another; headless Debian chromium, driven by Playwright, signs in
with the printed URL and opens each page. The tests assert on the rendered DOM: the job graph's
boxes and labelled arrows, the operators, the charts, checkpoint rows, the restart's root cause
with the user function's file:line, a savepoint triggered with the button (its path is shown and
exists on disk), and a cancel. A job name with markup in it shows as text.

Needs chromium (``bash scripts/install-test-deps.sh``, the README's test command runs it) and
playwright (the test extras). Without them the tests skip, naming what to install; under CI
(``CI`` set) they fail instead.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest
from dashboard_helpers import (
    JOB_SCRIPT,
    UiServer,
    launch_browser,
    require_browser,
    start_job,
    stop_job,
    wait_for,
)

from flowpoint.driver.registry import JobRegistry

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # require_browser() says what to install
    expect = sync_playwright = None

pytestmark = pytest.mark.slow

NAME = 'dashboard <img src=x onerror="alert(1)"> test'
UIDS = ["clicks", "timestamps", "channels", "counting", "windows", "format", "print"]


class Dashboard:
    """The running job, the ui server and one browser page signed in to it."""

    def __init__(self, tmp: Path, playwright):
        self.home = tmp / "home"
        self.home.mkdir(mode=0o700)
        self.workdir = tmp / "job"
        self.proc = start_job(self.home, self.workdir, NAME)
        self.job_id = None
        self.ui = None
        self.browser = None
        self.page_errors: list[str] = []
        self.dialogs: list[str] = []
        try:
            registry = JobRegistry(self.home / "jobs")

            def running():
                assert self.proc.poll() is None, f"the job exited {self.proc.returncode}: {self.job_log()}"
                return next((e.job_id for e in registry.entries() if e.job_name == NAME and e.status == "RUNNING"), None)

            self.job_id = wait_for(running, 180, "the job to run")
            self.ui = UiServer(self.home, tmp / "ui.log")
            self.browser = launch_browser(playwright)
            self.context = self.browser.new_context(viewport={"width": 1280, "height": 800})
            self.page = self.context.new_page()
            self.page.on("pageerror", lambda e: self.page_errors.append(str(e)))
            self.page.on("dialog", lambda d: (self.dialogs.append(d.message), d.dismiss()))
            self.page.goto(self.ui.url)  # sets the session cookie and redirects to /
        except BaseException:
            self.close()
            raise

    def job_log(self) -> str:
        return (self.workdir / "job.err").read_text()[-3000:] if (self.workdir / "job.err").exists() else ""

    def get(self, path: str) -> dict:
        """A REST route, with the browser's session cookie."""
        r = self.page.request.get(self.ui.base + path)
        assert r.ok, f"GET {path}: {r.status} {r.text()[:500]}"
        return json.loads(r.text())

    def open(self, route: str) -> None:
        self.page.goto(f"{self.ui.base}/#{route}")

    def close(self) -> None:
        if self.browser is not None:
            self.browser.close()
        if self.ui is not None:
            self.ui.stop()
        stop_job(self.home, self.job_id, self.proc)


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    require_browser()
    with sync_playwright() as playwright:
        d = Dashboard(tmp_path_factory.mktemp("dashboard"), playwright)
        try:
            yield d
        finally:
            d.close()
    assert not d.dialogs, f"the page opened dialogs (a name ran as markup?): {d.dialogs}"
    assert not d.page_errors, f"JavaScript errors on the page: {d.page_errors}"


def test_overview_lists_the_job_with_its_name_as_text(dash):
    page = dash.page
    expect(page).to_have_url(re.compile(r"/#/overview$"), timeout=30_000)
    row = page.locator(f'tr.job-row[data-jid="{dash.job_id}"]')
    expect(row).to_have_count(1, timeout=30_000)
    expect(row.locator(".job-link")).to_have_text(NAME)
    expect(row.locator(".badge")).to_have_text("RUNNING")
    assert page.locator("img").count() == 0  # the name's <img> is text, not an element
    # records in and out are counted (the job's details, fetched per job)
    expect(row.locator("td.num").first).not_to_have_text("–", timeout=30_000)
    expect(page.locator("#nav-running a")).to_contain_text([NAME])


def test_job_page_draws_the_graph_operators_and_charts(dash):
    details = wait_for(lambda: (d := dash.get(f"/jobs/{dash.job_id}")).get("vertices") and d, 60, "the job's vertices")
    dash.open(f"/jobs/{dash.job_id}")
    page = dash.page
    expect(page.locator("#job-name")).to_have_text(NAME, timeout=30_000)
    vertices = page.locator("svg.job-graph g.vertex")
    expect(vertices).to_have_count(len(details["vertices"]), timeout=30_000)
    for v in details["vertices"]:
        expect(page.locator(f'g.vertex[data-vertex-id="{v["id"]}"]')).to_have_count(1)
    assert len(details["vertices"]) == 4  # [clicks timestamps channels] [counting] [windows format] [print]
    labels = page.locator("g.edge")
    expect(labels).to_have_count(3)
    assert sorted(labels.nth(i).get_attribute("data-partitioning") for i in range(3)) == ["HASH", "HASH", "REBALANCE"]
    for uid in UIDS:  # each operator in its box and in the table
        expect(page.locator("g.vertex .op-uid", has_text=re.compile(f"^{uid}$"))).to_have_count(1)
        expect(page.locator(f'tr.op-row[data-uid="{uid}"]')).to_have_count(1)
    # the windows count late events they drop; the source's records are counted
    expect(page.locator('tr.op-row[data-uid="clicks"] td.num').nth(2)).not_to_have_text(re.compile(r"^(–|0)$"), timeout=30_000)
    expect(page.locator("#throughput-chart canvas").first).to_be_visible(timeout=30_000)
    expect(page.locator("#job-epochs tr.epoch-row").first).to_be_visible(timeout=30_000)
    expect(page.locator("svg.epoch-timeline rect.epoch-bar").first).to_be_attached()
    # a box opens its subtasks
    counting = next(v for v in details["vertices"] if "counting" in v["name"])
    page.locator(f'g.vertex[data-vertex-id="{counting["id"]}"]').click()
    expect(page.locator("tr.subtask-row")).to_have_count(counting["parallelism"], timeout=30_000)


def test_vertex_view_shows_its_keyed_state(dash):
    """The vertex view's State panel (GET /jobs/:jid/vertices/:vid/state): per state its kind and
    keys, the operator's size and a sample of keys, as of the latest completed checkpoint."""
    details = wait_for(lambda: (d := dash.get(f"/jobs/{dash.job_id}")).get("vertices") and d, 60, "the job's vertices")
    counting = next(v for v in details["vertices"] if "counting" in v["name"])
    answer = wait_for(lambda: (a := dash.get(f"/jobs/{dash.job_id}/vertices/{counting['id']}/state")).get("checkpoint") and a,
                      120, "a completed checkpoint's state")
    (op,) = answer["operators"]
    assert op["uid"] == "counting" and [s["name"] for s in op["states"]] == ["count"] and op["states"][0]["kind"] == "value"
    dash.open(f"/jobs/{dash.job_id}")
    page = dash.page
    expect(page.locator(f'g.vertex[data-vertex-id="{counting["id"]}"]')).to_have_count(1, timeout=30_000)
    if page.locator("#vertex-detail .vertex-detail-head").count() == 0:  # the previous test may have left it open
        page.locator(f'g.vertex[data-vertex-id="{counting["id"]}"]').click()
    panel = page.locator('#vertex-state .state-op[data-state-uid="counting"]')
    expect(panel).to_have_count(1, timeout=30_000)
    expect(page.locator("#vertex-state h3")).to_contain_text(re.compile(r"as of checkpoint \d+"))
    expect(panel.locator(".state-table tbody tr")).to_have_count(1)
    expect(panel.locator(".state-table tbody tr td").nth(1)).to_have_text("value")
    expect(panel.locator(".state-sample tbody tr").first).to_be_visible(timeout=30_000)
    assert 1 <= panel.locator(".state-sample tbody tr").count() <= 10
    panel.scroll_into_view_if_needed()
    page.screenshot(path=str(dash.workdir.parent / "state-panel.png"), full_page=True)


def test_checkpoints_page_shows_history_chart_summary_and_configuration(dash):
    wait_for(lambda: dash.get(f"/jobs/{dash.job_id}/checkpoints").get("counts", {}).get("completed", 0) >= 2, 120, "two completed checkpoints")
    dash.open(f"/jobs/{dash.job_id}/checkpoints")
    page = dash.page
    completed = page.locator("tr.ck-row", has=page.locator(".badge", has_text="COMPLETED"))
    expect(completed.first).to_be_visible(timeout=30_000)
    assert completed.count() >= 2
    expect(page.locator("#checkpoint-chart canvas").first).to_be_visible(timeout=30_000)
    expect(page.locator("#ck-counts .card-finished .card-value")).not_to_have_text("–")
    # a row opens to its details, and stays open while the page polls
    completed.first.click()
    expect(page.locator("tr.ck-detail")).to_have_count(1)
    expect(page.locator("tr.ck-detail")).to_contain_text("chk-")
    time.sleep(2.5)
    expect(page.locator("tr.ck-detail")).to_have_count(1)
    dash.open(f"/jobs/{dash.job_id}/checkpoints/summary")
    expect(page.locator(".summary-table")).to_contain_text("End to end duration", timeout=30_000)
    dash.open(f"/jobs/{dash.job_id}/checkpoints/config")
    expect(page.locator(".config-table")).to_contain_text("Checkpoint interval", timeout=30_000)
    expect(page.locator(".config-table")).to_contain_text("1.0s")


def test_exceptions_page_shows_the_restart_with_the_user_function(dash):
    wait_for(lambda: (dash.get(f"/jobs/{dash.job_id}").get("flowpoint") or {}).get("restarts", 0) >= 1, 180, "the job's restart")
    dash.open(f"/jobs/{dash.job_id}/exceptions")
    page = dash.page
    entry = page.locator("#ex-history .exception").first
    expect(entry).to_contain_text("injected failure at click 150", timeout=30_000)
    expect(entry.locator(".user-location")).to_contain_text(re.compile(r"dashboard_job\.py:\d+"))
    raise_line = next(i for i, line in enumerate(JOB_SCRIPT.read_text().splitlines(), 1) if "raise RuntimeError" in line)
    lines = JOB_SCRIPT.read_text().splitlines()
    class_line = next(i for i, line in enumerate(lines, 1) if line.startswith("class CountClicks"))
    # a class instance is named by its earliest method (code objects only; no source is parsed)
    first_method = next(i for i, line in enumerate(lines, 1) if i > class_line and line.lstrip().startswith("def "))
    text = entry.locator(".user-location").inner_text()
    assert f"dashboard_job.py:{raise_line}" in text or f"dashboard_job.py:{first_method}" in text, text
    expect(page.locator("#ex-cards .card").first.locator(".card-value")).to_have_text(re.compile(r"^[1-9]"))
    entry.locator("[data-toggle]").click()
    expect(entry.locator("pre.trace")).to_contain_text("injected failure")


def test_trigger_savepoint_button_writes_a_savepoint(dash):
    dash.open(f"/jobs/{dash.job_id}")
    page = dash.page
    button = page.locator('button[data-action="savepoint"]')
    expect(button).to_be_enabled(timeout=30_000)
    button.click()
    expect(page.locator("#modal-confirm")).to_have_text("Trigger savepoint")
    page.locator("#modal-confirm").click()
    path = page.locator("code.savepoint-path")
    expect(path).to_have_count(1, timeout=180_000)
    location = path.inner_text()
    assert location.startswith("file://"), location
    local = location.removeprefix("file://")
    assert local.startswith(str(dash.workdir / "savepoints")), local
    assert os.path.isfile(os.path.join(local, "_metadata")), local
    # the savepoint is in the checkpoint history, with its path
    dash.open(f"/jobs/{dash.job_id}/checkpoints")
    expect(page.locator("code.savepoint-location", has_text=location)).to_have_count(1, timeout=30_000)


def test_cancel_button_cancels_the_job(dash):
    dash.open(f"/jobs/{dash.job_id}")
    page = dash.page
    page.locator('button[data-action="cancel"]').click()
    expect(page.locator("#modal-confirm")).to_have_text("Cancel job")
    page.locator("#modal-confirm").click()
    expect(page.locator(".job-name-line .badge")).to_have_text("CANCELED", timeout=120_000)
    dash.proc.wait(timeout=120)
    expect(page.locator('button[data-action="savepoint"]')).to_be_disabled()
    dash.open("/overview")
    expect(page.locator(f'#ov-completed tr.job-row[data-jid="{dash.job_id}"] .badge')).to_have_text("CANCELED", timeout=30_000)
