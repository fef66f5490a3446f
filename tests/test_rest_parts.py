"""Issue 19, the REST API's parts that need no Spark: summaries as Flink's StatsSummaryDto, the
failures the exception history keeps (operator, uid and file:line of a user function's failure),
and the epoch timeline's links to the Spark jobs that ran each committed epoch."""

from __future__ import annotations

import pytest

from flowpoint.control.rest import stats, timeline
from flowpoint.driver.history import KEEP, JobHistory, failure_record
from flowpoint.driver.plan_view import vertex_id
from flowpoint.errors import UserFunctionError


def test_summaries_as_flinks():
    assert stats.summary([]) == {"min": 0, "max": 0, "avg": 0, "p50": 0.0, "p90": 0.0, "p95": 0.0, "p99": 0.0, "p999": 0.0}
    s = stats.summary([40, 10, 20, 30])
    assert (s["min"], s["max"], s["avg"], s["p50"]) == (10, 40, 25, 25.0)
    assert s["p90"] == pytest.approx(37.0) and s["p999"] == pytest.approx(39.97)
    a = stats.aggregate([3, 1, 2])
    assert (a["min"], a["max"], a["sum"], a["median"], a["avg"]) == (1, 3, 6, 2, 2)


def test_a_user_functions_failure_names_its_operator_uid_and_line():
    e = UserFunctionError(
        "operator 'Keyed Process' (uid 'counter', function count at /jobs/job.py:41) raised KeyError: 'x' while processing 7"
    )
    r = failure_record(e, restarted=True)
    assert (r.operator, r.uid, r.location, r.restarted) == ("Keyed Process", "counter", "/jobs/job.py:41", True)
    assert r.exception_name == "flowpoint.errors.UserFunctionError" and "KeyError" in r.message

    class Located(Exception):
        operator, uid, function = "Map", "m", "parse at /jobs/p.py:9"

    wrapped = RuntimeError("epoch 3 failed")
    wrapped.__cause__ = Located("bad record")
    r = failure_record(wrapped, restarted=False)
    assert (r.operator, r.uid, r.location) == ("Map", "m", "/jobs/p.py:9")  # found on its cause
    assert r.exception_name == "RuntimeError" and r.stacktrace.endswith("RuntimeError: epoch 3 failed\n")
    plain = failure_record(ValueError("no operator"), restarted=False)
    assert (plain.operator, plain.uid, plain.location) == (None, None, None)


def test_the_history_keeps_the_newest_failures_and_knows_each_error_once():
    h = JobHistory()
    errors = [ValueError(str(i)) for i in range(KEEP + 3)]
    for e in errors:
        h.failed(e, restarted=True)
    assert [r.message for r in h.failures()] == [str(i) for i in range(3, KEEP + 3)]
    assert h.recorded(errors[-1]) and not h.recorded(ValueError("other")) and h.total_failures == KEEP + 3


class _Client:
    def __init__(self, runtime, history, runs):
        self.runtime, self.history, self.runs = runtime, history, runs

    def get_runtime(self):
        return self.runtime

    def get_spark_jobs(self):
        return self.runs

    def get_epoch_stats(self):
        return self.history


def test_each_committed_epoch_links_the_spark_job_that_ran_it():
    # epoch 2 failed (Spark job 1), the job restarted from the beginning: epochs 1 and 2 ran again
    runs = [(1, (0,)), (2, (1,)), (1, (2,)), (2, (3,)), (3, (4, 5))]
    history = [(1, 10, 0.5), (1, 10, 0.25), (2, 12, 0.125), (3, 7, 1.0)]
    epochs = timeline.epochs(_Client("epoch", history, runs), "http://127.0.0.1:4040")["epochs"]
    assert [[j["id"] for j in e["spark-jobs"]] for e in epochs] == [[0], [2], [3], [4, 5]]
    assert epochs[0] == {"epoch": 1, "records": 10, "duration": 500, "spark-jobs": [{"id": 0, "url": "http://127.0.0.1:4040/jobs/job/?id=0"}]}
    missing = timeline.epochs(_Client("epoch", [(1, 1, 0.1), (2, 1, 0.1)], [(2, (9,))]), None)["epochs"]
    assert [[j["id"] for j in e["spark-jobs"]] for e in missing] == [[], [9]]
    assert timeline.epochs(_Client("continuous", history, runs), None) == {"epochs": []}


def test_vertex_ids_are_flinks_shape_and_stable():
    assert vertex_id("sums") == vertex_id("sums") != vertex_id("counts")
    assert len(vertex_id("sums")) == 32 and int(vertex_id("sums"), 16) >= 0
