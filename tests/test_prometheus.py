"""The Prometheus endpoint (flowpoint/metrics/exporter.py, prometheus.py): scraped while a job
runs, per-operator counters grow, and at the end add up to the records processed and agree with
``get_metrics()``; user metrics appear under their group names; the port setting (a port, a
range, taken ports), loopback binding, no token; the Grafana dashboard queries only names the
endpoint exports."""

from __future__ import annotations

import json
import os
import re
import socket
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families
from test_metrics import KEYS, Counted

from flowpoint import DataGeneratorSource, WatermarkStrategy
from flowpoint.api.config import Configuration
from flowpoint.api.time import Time
from flowpoint.api.windows import TumblingEventTimeWindows
from flowpoint.connectors.sinks import CollectSink
from flowpoint.errors import ConfigurationError
from flowpoint.metrics import exporter
from flowpoint.metrics.exporter import is_loopback

EVENTS = 8_000
T0 = 1_700_000_000_000  # event times: ms since the epoch, as real ones
DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "docs", "grafana", "flowpoint-dashboard.json")


@pytest.fixture
def prom(monkeypatch):
    """Finished jobs stay on the endpoint 5 s (not 60); after the test, the endpoint is gone,
    so the next test starts its own."""
    monkeypatch.setattr(exporter, "FINISHED_JOB_RETENTION_S", 5.0)
    yield
    deadline = time.monotonic() + 60
    while exporter.current_server() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exporter.current_server() is None, "the Prometheus endpoint outlived its jobs"


def scrape(url: str | None = None) -> dict[str, list]:
    """Sample name -> samples, as a scraper sees them."""
    url = url or exporter.current_server().url
    with urllib.request.urlopen(url, timeout=10) as r:
        text = r.read().decode("utf-8")
    out: dict[str, list] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out.setdefault(s.name, []).append(s)
    return out


def total(samples: dict, name: str, job_id: str, operator: str | None = None) -> float:
    return sum(s.value for s in samples.get(name, [])
               if s.labels["job_id"] == job_id and (operator is None or s.labels["operator_name"] == operator))


def dashboard_metric_names() -> set[str]:
    with open(DASHBOARD, encoding="utf-8") as f:
        board = json.load(f)
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    exprs += [v.get("definition", "") for v in board["templating"]["list"]]
    return {n for e in exprs for n in re.findall(r"\bflowpoint_[A-Za-z0-9_]+", e)}


def metrics_job(env, tmp_path):
    env.get_configuration().set("state.checkpoints.dir", str(tmp_path / "ck"))
    stream = env.from_source(
        DataGeneratorSource(lambda i: i, count=EVENTS, rate_limit_per_second=2_000),
        WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, _: T0 + v),
        "numbers",
    ).uid("numbers")
    stream.key_by(lambda v: v % KEYS).process(Counted()).uid("counted").name("counted").sink_to(CollectSink()).uid("out").name("out")
    (stream.key_by(lambda v: v % KEYS).window(TumblingEventTimeWindows.of(Time.milliseconds(500)))
     .reduce(lambda a, b: a + b).uid("windowed").name("windowed").sink_to(CollectSink()).uid("wout").name("wout"))


@pytest.mark.slow
@pytest.mark.parametrize("runtime", ["epoch", "continuous"])
def test_scraped_during_a_run_counts_grow_and_add_up_to_what_the_job_processed(make_env, tmp_path, prom, runtime):
    env = make_env(parallelism=2, max_records=1000, **{
        "execution.runtime": runtime, "execution.buffer-timeout": 5, "metrics.reporter.prom.port": "0",
        "execution.checkpointing.interval": "1 s",
    })
    metrics_job(env, tmp_path)
    client = env.execute_async(f"prometheus on {runtime}")
    job_id = client.get_job_id()
    try:
        seen = []
        deadline = time.monotonic() + 120
        while not client.is_done() and time.monotonic() < deadline:
            n = total(scrape(), "flowpoint_operator_numRecordsIn_total", job_id, "counted")
            if n and (not seen or n > seen[-1]):
                seen.append(n)
            time.sleep(0.2)
        result = client.wait(120)
    finally:
        client.cancel()
        client.wait_until_done(60)
    assert len(seen) >= 2 and seen[0] < EVENTS, f"the scraped counts did not grow while the job ran: {seen}"

    s = scrape()  # the finished job stays on the endpoint for a while
    forwarded = sum(1 for i in range(EVENTS) if i % 3)
    assert total(s, "flowpoint_operator_numRecordsOut_total", job_id, "numbers") == EVENTS
    assert total(s, "flowpoint_operator_numRecordsIn_total", job_id, "counted") == EVENTS
    assert total(s, "flowpoint_operator_numRecordsOut_total", job_id, "counted") == forwarded
    assert total(s, "flowpoint_operator_numRecordsIn_total", job_id, "out") == forwarded
    assert total(s, "flowpoint_operator_numRecordsIn_total", job_id, "windowed") == EVENTS
    per_subtask = [x for x in s["flowpoint_operator_numRecordsIn_total"] if x.labels["operator_name"] == "counted"]
    assert sorted(x.labels["subtask_index"] for x in per_subtask) == ["0", "1"]
    assert all(x.value > 0 for x in per_subtask)
    x = per_subtask[0]
    assert x.labels["job_name"] == f"prometheus on {runtime}" and x.labels["operator_id"] == "counted"
    assert x.labels["task_name"] == "counted -> out"  # the chain it runs in
    # late records: a window operator has the counter (none were late); others do not
    assert {x.labels["operator_name"] for x in s["flowpoint_operator_numLateRecordsDropped_total"]} == {"windowed"}
    assert total(s, "flowpoint_operator_numLateRecordsDropped_total", job_id) == 0
    marks = {x.value for x in s["flowpoint_operator_currentInputWatermark"] if x.labels["operator_name"] == "counted"}
    assert marks and all(m >= T0 for m in marks)
    assert {x.labels["task_name"] for x in s["flowpoint_task_backPressuredTimeMsPerSecond"]} == {"numbers", "counted -> out", "windowed -> wout"}
    assert all(0 <= x.value <= 1000 for x in s["flowpoint_task_busyTimeMsPerSecond"])

    # user metrics, under their group names
    assert total(s, "flowpoint_user_mine_seen", job_id, "counted") == EVENTS
    assert total(s, "flowpoint_user_mine_events_total", job_id, "counted") == EVENTS
    assert "flowpoint_user_mine_events_rate" in s
    assert total(s, "flowpoint_user_mine_values_count", job_id, "counted") == EVENTS
    assert total(s, "flowpoint_user_mine_values_sum", job_id, "counted") == sum(i % 7 for i in range(EVENTS))
    assert {x.value for x in s["flowpoint_user_mine_values_min"]} == {0} and {x.value for x in s["flowpoint_user_mine_values_max"]} == {6}
    assert {x.value for x in s["flowpoint_user_mine_answer"]} == {42}

    # the same numbers as get_metrics()
    m = result.get_metrics()
    for op in ("numbers", "counted", "out", "windowed", "wout"):
        for name in ("numRecordsIn", "numRecordsOut"):
            assert total(s, f"flowpoint_operator_{name}_total", job_id, op) == m.get(f"{op}.{name}", 0), (op, name)
    assert total(s, "flowpoint_user_mine_seen", job_id) == m["counted.mine.seen"]
    assert total(s, "flowpoint_user_mine_events_total", job_id) == m["counted.mine.events"]
    for name in ("numRestarts", "numberOfCompletedCheckpoints", "numberOfFailedCheckpoints"):
        assert total(s, f"flowpoint_job_{name}_total", job_id) == m[name], name
    assert m["numberOfCompletedCheckpoints"] >= 1
    assert total(s, "flowpoint_job_lastCheckpointDuration", job_id) == m["lastCheckpointDuration"]
    assert total(s, "flowpoint_job_lastCheckpointSize", job_id) == m["lastCheckpointSize"]
    assert total(s, "flowpoint_job_uptime", job_id) > 0

    # (this job's state is HashMap: the RocksDB panels' names are checked against the exporter
    # fed by a real RocksDB DB in test_every_metric_the_grafana_dashboard_queries_is_exported)
    missing = {n for n in dashboard_metric_names() if not n.startswith("flowpoint_operator_rocksdb_")} - set(s)
    assert not missing, f"docs/grafana/flowpoint-dashboard.json queries metrics the endpoint does not export: {sorted(missing)}"
    assert any(x.labels["job_id"] == job_id for x in s["flowpoint_taskmanager_Status_Python_Memory_RSS"])


@pytest.mark.slow
def test_a_second_job_shares_the_endpoint_which_stops_after_the_last_job(make_env, prom):
    """Jobs of one process share one endpoint, told apart by job_id and job_name; a finished job
    stays scrapeable for FINISHED_JOB_RETENTION_S, then the endpoint stops and frees its port."""
    clients = []
    for name in ("first", "second"):
        env = make_env(parallelism=1, **{"metrics.reporter.prom.port": "0"})
        env.from_source(DataGeneratorSource(lambda i: i, count=300), source_name="numbers").uid("numbers").sink_to(CollectSink()).uid("out").name("out")
        clients.append(env.execute_async(name))
        clients[-1].wait(120)
    server = exporter.current_server()
    s = scrape(server.url)
    jobs = {x.labels["job_id"]: x.labels["job_name"] for x in s["flowpoint_operator_numRecordsOut_total"]}
    assert jobs == {c.get_job_id(): name for c, name in zip(clients, ("first", "second"), strict=True)}
    for c in clients:
        assert total(s, "flowpoint_operator_numRecordsIn_total", c.get_job_id(), "out") == 300
    deadline = time.monotonic() + 60
    while exporter.current_server() is not None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert exporter.current_server() is None
    with pytest.raises(urllib.error.URLError):
        scrape(server.url)


def _free_ports(n: int) -> int:
    """The first of ``n`` consecutive ports free on loopback now."""
    for _ in range(100):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            first = s.getsockname()[1]
        if first + n > 65535:
            continue
        try:
            for p in range(first, first + n):
                with socket.socket() as s:
                    s.bind(("127.0.0.1", p))
        except OSError:
            continue
        return first
    pytest.skip("no run of free ports")


@pytest.mark.slow
def test_a_port_range_takes_the_first_free_port_and_a_taken_port_fails_the_submission(make_env, prom):
    first = _free_ports(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", first))
        taken.listen()
        env = make_env(parallelism=1, **{"metrics.reporter.prom.port": str(first)})
        env.from_source(DataGeneratorSource(lambda i: i, count=10), source_name="numbers").sink_to(CollectSink())
        with pytest.raises(ConfigurationError, match=rf"metrics\.reporter\.prom\.port.*{first}|{first}.*metrics\.reporter\.prom\.port"):
            env.execute_async("taken")
        assert exporter.current_server() is None

        env = make_env(parallelism=1, **{"metrics.reporter.prom.port": f"{first}-{first + 2}"})
        env.from_source(DataGeneratorSource(lambda i: i, count=10), source_name="numbers").sink_to(CollectSink())
        client = env.execute_async("range")
        server = exporter.current_server()
        assert server.port == first + 1
        client.wait(120)
        assert total(scrape(server.url), "flowpoint_operator_numRecordsOut_total", client.get_job_id()) == 10


def test_the_endpoint_binds_loopback_needs_no_token_and_refuses_foreign_host_names(prom, capsys):
    config = Configuration({"metrics.reporter.prom.port": "0", "execution.progress.interval": 1000})
    server = exporter.open_endpoint(config, "job")
    try:
        assert server.httpd.socket.getsockname()[0] == "127.0.0.1"
        assert f"[flowpoint] Prometheus metrics: http://127.0.0.1:{server.port}/metrics" in capsys.readouterr().err
        with urllib.request.urlopen(server.url, timeout=10) as r:  # no Authorization header
            assert r.status == 200
            assert r.headers["Content-Type"].startswith("text/plain")
        request = urllib.request.Request(server.url, headers={"Host": f"rebound.example:{server.port}"})
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, timeout=10)
        assert refused.value.code == 403
        request = urllib.request.Request(server.url, headers={"Host": f"localhost:{server.port}"})
        with urllib.request.urlopen(request, timeout=10) as r:
            assert r.status == 200
    finally:
        exporter.release(server)
    assert exporter.current_server() is None


def test_without_the_port_there_is_no_endpoint_and_flinks_class_key_alone_says_why(prom, caplog):
    assert exporter.open_endpoint(Configuration({}), "job") is None
    config = Configuration({"metrics.reporter.prom.factory.class": "org.apache.flink.metrics.prometheus.PrometheusReporterFactory"})
    with caplog.at_level("WARNING", logger="flowpoint"):
        assert exporter.open_endpoint(config, "job") is None
    assert "metrics.reporter.prom.port" in caplog.text
    assert exporter.current_server() is None


def test_port_settings_are_checked_when_set():
    assert Configuration({"metrics.reporter.prom.port": 9250}).get("metrics.reporter.prom.port") == "9250"
    assert Configuration({"metrics.reporter.prom.port": " 9250-9260 "}).get("metrics.reporter.prom.port") == "9250-9260"
    for bad in ("x", "9260-9250", "0-5", "70000", "9250,9251"):
        with pytest.raises(ConfigurationError, match="metrics.reporter.prom.port"):
            Configuration({"metrics.reporter.prom.port": bad})
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.1.2.3")


def test_the_grafana_dashboard_is_importable():
    with open(DASHBOARD, encoding="utf-8") as f:
        board = json.load(f)
    assert [i["name"] for i in board["__inputs"]] == ["DS_PROMETHEUS"]
    assert board["__inputs"][0]["pluginId"] == "prometheus"
    variables = {v["name"]: v for v in board["templating"]["list"]}
    assert "job_name" in variables
    assert all(p["datasource"]["uid"] == "${DS_PROMETHEUS}" for p in board["panels"] if p["type"] != "row")
    titles = " ".join(p["title"].lower() for p in board["panels"])
    for topic in ("records in", "records out", "backpressure", "watermark lag", "checkpoint duration", "checkpoint size", "restarts",
                  "memory (rss)", "block cache", "memtables", "pending compaction"):
        assert topic in titles, topic
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert exprs and all('job_name=~"$job_name"' in e for e in exprs)
    assert {"flowpoint_operator_numRecordsIn_total", "flowpoint_task_backPressuredTimeMsPerSecond",
            "flowpoint_operator_currentInputWatermark", "flowpoint_taskmanager_Status_Python_Memory_RSS",
            "flowpoint_operator_rocksdb_block_cache_usage", "flowpoint_operator_rocksdb_cur_size_all_mem_tables",
            "flowpoint_operator_rocksdb_estimate_pending_compaction_bytes"} <= dashboard_metric_names()


class _StoreClient:
    """What the collector reads of a job, without Spark: a real MetricStore and get_metrics()."""

    def __init__(self, store):
        self.store = store

    def metric_store(self):
        return self.store

    def get_metrics(self):
        return {**self.store.flat(), "numRestarts": 0}


def test_user_metrics_whose_prometheus_names_clash_are_left_out_once_with_a_warning(caplog):
    from prometheus_client import CollectorRegistry, generate_latest

    from flowpoint.metrics.prometheus import JobsCollector, MonitoredJob
    from flowpoint.metrics.report import MetricReport
    from flowpoint.metrics.store import MetricStore, OperatorInfo

    store = MetricStore([OperatorInfo("op", "op", 0, "keyed_process", 1)])
    store.add(MetricReport(0, 0, counters={("op", "numRecordsIn"): 5, ("op", "a.b_c"): 1, ("op", "a_b.c"): 2, ("op", "x"): 3},
                           gauges={("op", "x_rate"): 7.0},
                           user={("op", "a.b_c"): "counter", ("op", "a_b.c"): "counter", ("op", "x"): "meter", ("op", "x_rate"): "gauge"}))
    collector = JobsCollector()
    collector.add(MonitoredJob(_StoreClient(store), "j1", "job"))
    registry = CollectorRegistry()
    registry.register(collector)
    with caplog.at_level("WARNING", logger="flowpoint"):
        text = generate_latest(registry).decode()
        generate_latest(registry)
    samples = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
    assert samples["flowpoint_operator_numRecordsIn_total"] == 5
    assert samples["flowpoint_user_a_b_c"] == 1  # "a.b_c", the first in order; "a_b.c" is left out
    assert samples["flowpoint_user_x_total"] == 3 and "flowpoint_user_x_rate" in samples  # the meter's; the gauge x_rate is left out
    assert samples["flowpoint_user_x_rate"] != 7.0
    assert samples["flowpoint_job_numRestarts_total"] == 0
    warnings = [r.getMessage() for r in caplog.records]
    assert sum("'a_b.c'" in w for w in warnings) == 1 and sum("'x_rate'" in w for w in warnings) == 1  # once, not every scrape


def test_every_metric_the_grafana_dashboard_queries_is_exported(tmp_path):
    """Each name the dashboard queries is one the collector emits for a job whose reports carry
    what a worker reports: its RSS, and the figures of a real RocksDB DB (no Spark)."""
    pytest.importorskip("rocksdict")
    from prometheus_client import CollectorRegistry, generate_latest

    from flowpoint.metrics.prometheus import JOB_METRICS, JobsCollector, MonitoredJob
    from flowpoint.metrics.report import MetricReport
    from flowpoint.metrics.store import MetricStore, OperatorInfo
    from flowpoint.metrics.system import add_process_figures
    from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

    class Client(_StoreClient):
        def get_metrics(self):  # every job metric, as a job with completed checkpoints has them
            return {**self.store.flat(), **dict.fromkeys(JOB_METRICS, 1)}

    store = MetricStore([OperatorInfo("src", "src", 0, "source", 1), OperatorInfo("win", "win", 1, "window", 1)])
    store.add(MetricReport(0, 0, counters={("src", "numRecordsOut"): 5}))
    db = RocksDBKeyedStateBackend("win", str(tmp_path / "db"), 128, uid="win")
    db.open()
    try:
        report = MetricReport(1, 0, counters={("win", "numRecordsIn"): 5}, gauges={("win", "currentInputWatermark"): 1.0})
        add_process_figures(report, {"win": db})
    finally:
        db.close()
    assert ("win", "rocksdb.block-cache-usage") in report.gauges and report.status
    store.add(report)
    collector = JobsCollector()
    collector.add(MonitoredJob(Client(store), "j1", "job"))
    registry = CollectorRegistry()
    registry.register(collector)
    exported = {smp.name for f in text_string_to_metric_families(generate_latest(registry).decode()) for smp in f.samples}
    missing = dashboard_metric_names() - exported
    assert not missing, f"docs/grafana/flowpoint-dashboard.json queries metrics the exporter does not emit: {sorted(missing)}"
