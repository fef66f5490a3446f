"""The dashboard shows whatever the server says as text: names, uids, messages and stack traces
with markup in them do not become elements, and a link the server hands over is a link only
when it is http(s). Against a stand-in server (a thread in this process answering the REST
routes with hostile JSON), so it needs no Spark: a few seconds in headless chromium.
"""

from __future__ import annotations

import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from dashboard_helpers import launch_browser, require_browser

import flowpoint.control

try:
    from playwright.sync_api import expect, sync_playwright
except ImportError:  # require_browser() says what to install
    expect = sync_playwright = None

JID = "0123456789abcdef0123456789abcdef"
EVIL = '<img src=x onerror="alert(1)"><script>alert(2)</script>'
NOW = 1_790_000_000_000


def routes() -> dict[str, object]:
    op = {"uid": "op" + EVIL, "name": "Map " + EVIL, "kind": "map" + EVIL, "vertex-id": "v1", "parallelism": 1, "chained-to": None,
          "metrics": {"numRecordsIn": 5, "numRecordsOut": 5, "busyTimeMsPerSecond": 100}}
    details = {
        "jid": JID, "name": "job " + EVIL, "state": "RUNNING", "start-time": NOW, "duration": 1000, "now": NOW + 1000,
        "vertices": [{"id": "v1", "name": "vertex " + EVIL, "parallelism": 1, "metrics": {}}],
        "plan": {"nodes": [{"id": "v1", "parallelism": 1, "description": "vertex " + EVIL}]},
        "flowpoint": {"runtime": "epoch", "epoch": 1, "restarts": 1, "spark-ui": "javascript:alert(3)", "operators": [op]},
    }
    return {
        "/config": {"refresh-interval": 500, "flowpoint-version": EVIL},
        "/overview": {},
        "/jobs/overview": {"jobs": [{"jid": JID, "name": "job " + EVIL, "state": "RUNNING", "start-time": NOW, "duration": 1000}]},
        f"/jobs/{JID}": details,
        f"/jobs/{JID}/throughput": {"samples": []},
        f"/jobs/{JID}/epochs": {"epochs": [{"epoch": 1, "records": 5, "duration": 10, "spark-jobs": [{"id": EVIL, "url": "javascript:alert(4)"}]}]},
        f"/jobs/{JID}/checkpoints": {
            "counts": {"completed": 1, "failed": 1},
            "history": [
                {"id": 2, "status": "FAILED", "failure_message": "failed " + EVIL, "trigger_timestamp": NOW},
                {"id": 1, "status": "COMPLETED", "is_savepoint": True, "external_path": "file:///sp/" + EVIL, "trigger_timestamp": NOW, "state_size": 10},
            ],
        },
        f"/jobs/{JID}/checkpoints/config": {"mode": EVIL, "interval": 1000},
        f"/jobs/{JID}/vertices/v1": {"id": "v1", "name": "vertex " + EVIL, "subtasks": []},
        f"/jobs/{JID}/vertices/v1/state": {
            "checkpoint": {"id": 3, "time": NOW}, "message": None,
            "operators": [{"uid": "op" + EVIL, "name": "Map " + EVIL, "backend": EVIL, "stateSize": 10,
                           "states": [{"name": "s" + EVIL, "kind": EVIL, "keys": 1}],
                           "sample": {"subtask": 0, "subtask-keys": 1, "states": ["s" + EVIL],
                                      "rows": [{"key": "'k" + EVIL + "'", "values": {"s" + EVIL: "'v" + EVIL + "'"}}]},
                           "sample-skipped": None}]},
        f"/jobs/{JID}/exceptions": {
            "root-exception": "RuntimeError: " + EVIL, "timestamp": NOW,
            "exceptionHistory": {"entries": [{"exceptionName": "RuntimeError" + EVIL, "stacktrace": "RuntimeError: " + EVIL,
                                              "timestamp": NOW, "taskName": "task " + EVIL, "location": EVIL,
                                              "flowpoint": {"message": "RuntimeError: " + EVIL, "restarted": True, "repeatedOnSameRecord": 3}}]},
        },
    }


class StandIn(BaseHTTPRequestHandler):
    answers: dict[str, object] = {}

    def log_message(self, *args):
        pass

    def do_GET(self):
        path = self.path.split("?", 1)[0]
        web = Path(flowpoint.control.__file__).with_name("web")
        if path == "/" or path.startswith("/web/"):
            name = "index.html" if path == "/" else path.removeprefix("/web/")
            kind = {"html": "text/html", "js": "text/javascript", "css": "text/css"}.get(name.rsplit(".", 1)[-1], "text/plain")
            return self.send(200, (web / name).read_bytes(), kind)
        if path in self.answers:
            return self.send(200, json.dumps(self.answers[path]).encode(), "application/json")
        return self.send(404, json.dumps({"errors": [f"no route {path}"]}).encode(), "application/json")

    def send(self, status, data, kind):
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture(scope="module")
def page():
    require_browser()
    StandIn.answers = routes()
    server = ThreadingHTTPServer(("127.0.0.1", 0), StandIn)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dialogs, errors = [], []
    try:
        with sync_playwright() as p:
            browser = launch_browser(p)
            pg = browser.new_page(viewport={"width": 1280, "height": 800})
            pg.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            pg.on("pageerror", lambda e: errors.append(str(e)))
            pg.base = f"http://127.0.0.1:{server.server_address[1]}"
            yield pg
            browser.close()
    finally:
        server.shutdown()
    assert not dialogs, f"markup from the server ran: {dialogs}"
    assert not errors, f"JavaScript errors on the page: {errors}"


def no_elements_from_the_server(pg):
    assert pg.locator("img").count() == 0
    assert pg.locator("#view script, #sidebar script").count() == 0
    assert pg.locator('a[href^="javascript:"]').count() == 0


def test_overview_shows_a_hostile_name_as_text(page):
    page.goto(page.base + "/#/overview")
    expect(page.locator("#ov-running .job-link")).to_have_text("job " + EVIL)
    expect(page.locator("#nav-running .side-job-name")).to_have_text("job " + EVIL)
    no_elements_from_the_server(page)


def test_job_page_shows_hostile_names_uids_and_links_as_text(page):
    page.goto(f"{page.base}/#/jobs/{JID}")
    expect(page.locator("#job-name")).to_have_text("job " + EVIL)
    expect(page.locator("g.vertex .op-uid")).to_have_text(re.compile(r"^op<img src=x"))  # clipped to the box
    expect(page.locator("tr.op-row .op-name")).to_have_text("Map " + EVIL)
    expect(page.locator("#job-epochs .spark-job")).to_have_text(f"job {EVIL}")
    expect(page.locator("#job-title")).not_to_contain_text("Spark UI")  # a javascript: URL is no link
    no_elements_from_the_server(page)


def test_the_state_panel_shows_keys_and_values_as_text(page):
    page.goto(f"{page.base}/#/jobs/{JID}")
    page.locator('g.vertex[data-vertex-id="v1"]').click()
    panel = page.locator("#vertex-state .state-op")
    expect(panel.locator(".state-table td").first).to_have_text("s" + EVIL)
    expect(panel.locator(".state-sample tbody td").first).to_have_text("'k" + EVIL + "'")
    expect(panel.locator(".state-sample tbody td").nth(1)).to_have_text("'v" + EVIL + "'")
    expect(panel.locator(".state-sample th").nth(1)).to_have_text("s" + EVIL)
    no_elements_from_the_server(page)


def test_checkpoints_and_exceptions_show_hostile_messages_as_text(page):
    page.goto(f"{page.base}/#/jobs/{JID}/checkpoints")
    expect(page.locator(".fail-reason")).to_contain_text("failed <img")
    expect(page.locator("code.savepoint-location")).to_have_text("file:///sp/" + EVIL)
    page.goto(f"{page.base}/#/jobs/{JID}/checkpoints/config")
    expect(page.locator(".config-table")).to_contain_text(EVIL.replace("_", " "))
    page.goto(f"{page.base}/#/jobs/{JID}/exceptions")
    expect(page.locator("#ex-root .exception-message")).to_have_text("RuntimeError: " + EVIL)
    page.locator("#ex-root [data-toggle]").click()
    expect(page.locator("#ex-root pre.trace")).to_have_text("RuntimeError: " + EVIL)
    expect(page.locator("#ex-history .exception-name")).to_have_text("RuntimeError" + EVIL)
    # a failure that recurred on the same record says so, with its count
    expect(page.locator("#ex-history")).to_contain_text("failed the same way on the same record 3 times in a row")
    no_elements_from_the_server(page)
