"""A pytest plugin for the background shard's child session (tests/background_shard.py): every
test report, serialized as pytest-xdist sends them, one JSON line each, to the file
``$FLOWPOINT_SHARD_REPORTS`` as soon as it is made, so the parent reports each test when it
ends rather than when the whole shard has."""

from __future__ import annotations

import json
import os


def pytest_runtest_logreport(report):
    path = os.environ.get("FLOWPOINT_SHARD_REPORTS")
    if not path:
        return
    config = report_config[0]
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(data, default=str) + "\n")


report_config: list = []


def pytest_configure(config):
    report_config[:] = [config]
