"""Take the dashboard screenshots (docs/rest.md, README): overview.png, job.png, checkpoints.png and
exceptions.png in this directory, 1280 pixels wide (800 high; the checkpoints page 1100, to show
its history).

    python docs/images/capture.py [--out DIR]

Runs tests/dashboard_job.py twice under a temporary FLOWPOINT_HOME (a job that keeps running,
restarts once and gets a savepoint from the dashboard's button; another one cancelled, for the
overview's completed jobs), starts ``flowpoint ui``, and photographs each page with headless
Debian chromium through Playwright (``bash scripts/install-test-deps.sh`` and the test extras).
Takes about two minutes.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent.parent / "tests"))

from dashboard_helpers import (  # noqa: E402
    UiServer,
    browser_unavailable,
    launch_browser,
    start_job,
    stop_job,
    wait_for,
)

from flowpoint.driver.registry import JobRegistry  # noqa: E402

MAIN = "click analytics"
OTHER = "clicks backfill"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(HERE))
    args = parser.parse_args()
    reason = browser_unavailable()
    if reason:
        sys.exit(reason)
    from playwright.sync_api import expect, sync_playwright

    out = Path(args.out)
    tmp = Path(tempfile.mkdtemp(prefix="flowpoint-capture-"))
    home = tmp / "home"
    home.mkdir(mode=0o700)
    registry = JobRegistry(home / "jobs")
    jobs = {MAIN: start_job(home, tmp / "main", MAIN, rate=150, fail_at=200), OTHER: start_job(home, tmp / "other", OTHER, rate=100, fail_at=10**9)}
    ids: dict[str, str | None] = dict.fromkeys(jobs)
    ui = None
    try:
        def running(name: str):
            assert jobs[name].poll() is None, (tmp / ("main" if name == MAIN else "other") / "job.err").read_text()[-3000:]
            return next((e.job_id for e in registry.entries() if e.job_name == name and e.status == "RUNNING"), None)

        for name in jobs:
            ids[name] = wait_for(lambda n=name: running(n), 240, f"{name} to run")
        time.sleep(20)  # the other job's first epochs and checkpoints, then it is cancelled
        stop_job(home, ids[OTHER], jobs[OTHER])
        ui = UiServer(home, tmp / "ui.log")
        jid = ids[MAIN]
        with sync_playwright() as p:
            browser = launch_browser(p)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.goto(ui.url)

            def get(path: str) -> dict:
                return json.loads(page.request.get(ui.base + path).text())

            wait_for(lambda: (get(f"/jobs/{jid}").get("flowpoint") or {}).get("restarts", 0) >= 1, 240, "the restart")
            wait_for(lambda: get(f"/jobs/{jid}/checkpoints").get("counts", {}).get("completed", 0) >= 8, 240, "eight checkpoints")
            page.goto(f"{ui.base}/#/jobs/{jid}")
            page.locator('button[data-action="savepoint"]').click()
            page.locator("#modal-confirm").click()
            expect(page.locator("code.savepoint-path")).to_have_count(1, timeout=180_000)
            page.locator(".note-close").click()
            page.locator("#toasts .toast").click()

            def shot(route: str, name: str, ready: str, height: int = 800) -> None:
                page.set_viewport_size({"width": 1280, "height": height})
                page.goto(f"{ui.base}/#{route}")
                page.locator(ready).first.wait_for(timeout=60_000)
                time.sleep(3)  # two polls: charts and rates settle
                page.mouse.move(0, 0)
                page.screenshot(path=str(out / name))
                print("wrote", out / name)

            # first while the savepoint is among the checkpoints the history keeps
            shot(f"/jobs/{jid}/checkpoints", "checkpoints.png", "tr.ck-row", height=1100)
            shot("/overview", "overview.png", "#ov-completed tr.job-row")
            shot(f"/jobs/{jid}", "job.png", "svg.job-graph g.vertex")
            shot(f"/jobs/{jid}/exceptions", "exceptions.png", "#ex-history .exception")
            browser.close()
    finally:
        if ui is not None:
            ui.stop()
        for name, proc in jobs.items():
            stop_job(home, ids[name], proc)


if __name__ == "__main__":
    main()
