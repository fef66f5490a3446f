"""Reading a long-running continuous job as it is (issue 27, item 5): the job's details count
segments, not epochs; a rate-limited source that waits for its next records is idle, not busy;
each worker's memory and RocksDB's own figures are metrics."""

from __future__ import annotations

import time

import pytest

from flowpoint import DataGeneratorSource, KeyedProcessFunction, Types, ValueStateDescriptor
from flowpoint.connectors.sinks import CollectSink
from flowpoint.control.rest.jobs import job_details
from flowpoint.metrics.prometheus import MonitoredJob, _Families, export_job
from flowpoint.metrics.report import MetricReport
from flowpoint.metrics.store import MetricStore, OperatorInfo

RSS = "Status.Python.Memory.RSS"
ROCKSDB_FIGURES = (
    "rocksdb.block-cache-usage", "rocksdb.cur-size-all-mem-tables",
    "rocksdb.estimate-pending-compaction-bytes", "rocksdb.live-sst-files-size",
)


class Count(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value, ctx):
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        yield value, n


@pytest.mark.slow
def test_a_rate_limited_continuous_job_shows_an_idle_source_segments_memory_and_rocksdb(make_env, tmp_path, monkeypatch):
    monkeypatch.setenv("FLOWPOINT_HOME", str(tmp_path / "home"))
    env = make_env(parallelism=1, **{"execution.runtime": "continuous", "state.backend.type": "rocksdb"})
    env.enable_checkpointing(500)
    env.get_checkpoint_config().set_checkpoint_storage(f"file://{tmp_path}/checkpoints")
    (
        env.from_source(DataGeneratorSource(lambda i: i, count=None, rate_limit_per_second=50), source_name="numbers").uid("numbers")
        .key_by(lambda v: v % 100).process(Count()).uid("count").name("count")
        .sink_to(CollectSink()).uid("out").name("out")
    )
    client = env.execute_async("long run")
    job_id = client.get_job_id()
    try:
        deadline = time.monotonic() + 90
        source = None
        while time.monotonic() < deadline:
            ops = {om.info.uid: om for om in client.metric_store().operator_metrics()}
            source = ops.get("numbers")
            # some 6 s of reading at 50 records/s: the rates' 5-s window is past the start
            if source is not None and source.total("numRecordsOut") >= 300 and client.get_checkpoint_stats():
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"the job did not read 300 records in 90 s: {source and source.total('numRecordsOut')}")
        s = source.subtasks[0]
        # the source waits for its rate limiter most of the time: idle, as Flink's idleTimeMsPerSecond
        assert s.busy_ms_per_s < 300, (s.busy_ms_per_s, s.idle_ms_per_s)
        assert s.idle_ms_per_s > 500, (s.busy_ms_per_s, s.idle_ms_per_s)

        from tests.test_rest_api import call

        status, d = call("GET", f"/jobs/{job_id}")
        assert status == 200, d
        fp = d["flowpoint"]
        assert fp["runtime"] == "continuous" and fp["unit"] == "segment" and fp["segment"] == fp["epoch"] >= 1
        ops = {op["uid"]: op["metrics"] for op in fp["operators"]}
        assert ops["numbers"]["busyTimeMsPerSecond"] < 300 and ops["numbers"]["idleTimeMsPerSecond"] > 500
        rocksdb = ops["count"]["rocksdb"]
        assert set(ROCKSDB_FIGURES) <= set(rocksdb), rocksdb
        assert rocksdb["rocksdb.block-cache-usage"] >= 0 and rocksdb["rocksdb.cur-size-all-mem-tables"] > 0
        assert "rocksdb" not in ops["numbers"]  # a source keeps no keyed state
        driver, *workers = fp["workers"]
        assert driver["role"] == "driver" and driver["metrics"][RSS] > 20 << 20
        assert workers and all(w["role"] == "worker" and w["metrics"][RSS] > 20 << 20 for w in workers)
        assert sorted(t for w in workers for t in w["subtasks"]) == ["0.0", "1.0"]
        assert driver["id"] not in {w["id"] for w in workers}  # the slots run in Python workers of their own
        _, ck = call("GET", f"/jobs/{job_id}/checkpoints")
        assert all(h["flowpoint"]["unit"] == "segment" for h in ck["history"])

        flat = client.get_metrics()
        assert flat["count.rocksdb.cur-size-all-mem-tables"] > 0
    finally:
        client.cancel()
        client.wait_until_done(60)


def _store_with_reports() -> MetricStore:
    store = MetricStore([OperatorInfo("numbers", "numbers", 0, "source", 1), OperatorInfo("count", "count", 1, "keyed", 2)])
    for p in range(2):
        r = MetricReport(1, p, counters={("count", "numRecordsIn"): 5}, busy_ms=10, idle_ms=990)
        r.worker, r.status = f"host:{100 + p}", {RSS: 100e6 + p}
        r.gauges[("count", "rocksdb.cur-size-all-mem-tables")] = 2048.0
        r.gauges[("count", "rocksdb.estimate-pending-compaction-bytes")] = 0.0
        r.gauges[("count", "rocksdb.block-cache-usage")] = 1000.0 - p
        store.add(r)
    return store


def test_workers_memory_and_rocksdb_figures_reach_the_store_get_metrics_and_prometheus():
    from flowpoint.metrics.system import rss_bytes

    store = _store_with_reports()
    driver, *workers = store.workers()
    assert driver["role"] == "driver" and driver["status"][RSS] == rss_bytes() > 0
    assert [(w["id"], w["status"][RSS], w["subtasks"]) for w in workers] == [("host:100", 100e6, [(1, 0)]), ("host:101", 100e6 + 1, [(1, 1)])]
    flat = store.flat()
    assert flat["count.rocksdb.cur-size-all-mem-tables"] == 4096 and flat["count.rocksdb.estimate-pending-compaction-bytes"] == 0
    assert flat["count.rocksdb.block-cache-usage"] == 1000  # a shared cache: the largest, not the sum

    class Client:
        def metric_store(self):
            return store

        def get_metrics(self):
            return {}

    out = _Families(lambda m: None)
    export_job(MonitoredJob(Client(), "j1", "job"), out)
    series = {(f.name, tuple(sorted(s.labels.items()))): s.value for f in out.by_name.values() for s in f.samples}
    by_name: dict[str, list] = {}
    for (name, labels), value in series.items():
        by_name.setdefault(name, []).append((dict(labels), value))
    assert sorted(v for _, v in by_name["flowpoint_taskmanager_Status_Python_Memory_RSS"]) == [100e6, 100e6 + 1]
    assert {lab["worker"] for lab, _ in by_name["flowpoint_taskmanager_Status_Python_Memory_RSS"]} == {"host:100", "host:101"}
    assert by_name["flowpoint_jobmanager_Status_Python_Memory_RSS"][0][1] > 0
    assert [v for _, v in by_name["flowpoint_operator_rocksdb_cur_size_all_mem_tables"]] == [2048.0, 2048.0]


def test_a_rocksdb_backend_reports_its_native_figures(tmp_path):
    from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

    b = RocksDBKeyedStateBackend("op", str(tmp_path / "db"), 128)
    assert b.native_metrics() == {}  # not open
    b.open()
    try:
        b._db[b"k"] = b"v" * 1000
        figures = b.native_metrics()
        assert set(ROCKSDB_FIGURES) <= set(figures)
        assert figures["rocksdb.cur-size-all-mem-tables"] > 1000
        b._db.flush(True)
        assert b.native_metrics()["rocksdb.live-sst-files"] >= 1
    finally:
        b.close()
    assert b.native_metrics() == {}


def test_the_job_details_say_segment_on_the_continuous_runtime(monkeypatch):
    from types import SimpleNamespace

    from flowpoint.control.rest import jobs
    from flowpoint.control.rest.snapshot import JobSnapshot

    plan = SimpleNamespace(vertices=[], max_parallelism=128, jid="j", name="n", type="STREAMING")
    for runtime, unit in (("continuous", "segment"), ("epoch", "epoch")):
        s = JobSnapshot(
            job_id="j", name="n", state="RUNNING", start_ms=0, end_ms=None, now_ms=1, pid=1, timestamps={}, plan=plan,
            metrics={}, accumulated={}, runtime=runtime, epoch=108, records_read=0, restarts=0, watermark=None,
            spark_ui=None, operator_sizes=None, last_checkpoint=None, workers=_store_with_reports().workers(),
        )
        monkeypatch.setattr(jobs, "plan", lambda s: {})  # no vertices: the flowpoint object is what is read here
        fp = job_details(s)["flowpoint"]
        assert fp["unit"] == unit and fp["epoch"] == 108 and (fp.get("segment") == 108) == (unit == "segment")
        assert [w["role"] for w in fp["workers"]] == ["driver", "worker", "worker"]
        assert fp["workers"][1]["subtasks"] == ["1.0"] and fp["workers"][1]["metrics"][RSS] == 100_000_000
