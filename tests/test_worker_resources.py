"""A Python worker's caches and clients (flowpoint/worker_resources.py) used from many threads
at once, as the subtasks of a continuous slot use them: get-or-create builds once, bounds hold,
what is evicted is closed (and never while in use), and a forked child starts afresh."""

from __future__ import annotations

import os
import sys
import threading
import time
from collections import Counter

import pytest

from flowpoint.checkpoint import part_writer
from flowpoint.partition.working import TaskStateCache, task_states
from flowpoint.worker_resources import BoundedCache, ClientPool, worker

THREADS = 16


@pytest.fixture(autouse=True)
def _switch_often():
    """Switch threads every microsecond so check-then-act races show within a test's time."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def hammer(fn, threads: int = THREADS) -> list:
    """Run ``fn(i)`` in ``threads`` threads released at once; their results (re-raising any error)."""
    start = threading.Barrier(threads)
    results: list = [None] * threads
    errors: list = []

    def run(i: int) -> None:
        start.wait()
        try:
            results[i] = fn(i)
        except BaseException as e:  # noqa: BLE001 - re-raised below
            errors.append(e)

    ts = [threading.Thread(target=run, args=(i,)) for i in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    if errors:
        raise errors[0]
    return results


class Closable:
    def __init__(self, n: int = 0) -> None:
        self.n = n
        self.closed = 0
        self.users = 0

    def close(self) -> None:
        self.closed += 1


def test_get_or_create_from_16_threads_creates_once():
    for _ in range(20):
        cache: BoundedCache = BoundedCache("t", 8)
        made = []

        def create(made=made):
            made.append(1)
            time.sleep(0.005)  # a slow build: the other threads ask meanwhile
            return object()

        got = hammer(lambda _i: cache.get_or_create("k", create))  # noqa: B023
        assert len(made) == 1
        assert all(g is got[0] for g in got)


def test_a_failed_create_is_retried_by_the_next_asker():
    cache: BoundedCache = BoundedCache("t", 8)
    calls = []

    def create():
        calls.append(1)
        if len(calls) == 1:
            time.sleep(0.01)
            msg = "first build fails"
            raise RuntimeError(msg)
        return "ok"

    results = hammer(lambda _i: _try(lambda: cache.get_or_create("k", create)), 8)
    assert sum(isinstance(r, RuntimeError) for r in results) == 1
    assert [r for r in results if not isinstance(r, RuntimeError)] == ["ok"] * 7
    assert len(calls) == 2


def _try(fn):
    try:
        return fn()
    except RuntimeError as e:
        return e


def test_bounds_hold_and_eviction_closes_each_dropped_value_once():
    cache: BoundedCache = BoundedCache("t", 5, close=Closable.close, weigh=lambda c: c.n, max_weight=40)
    made: list[Closable] = []
    lock = threading.Lock()

    def work(i: int) -> None:
        for j in range(300):
            key = (i * 7 + j) % 23

            def create(key=key):
                c = Closable(key % 11)
                with lock:
                    made.append(c)
                return c

            cache.get_or_create(key, create)
            if j % 5 == 0:
                cache.put(("p", key), create())
            if j % 17 == 0:
                cache.pop(key)
            assert len(cache) <= 5
            assert cache.weight <= 40

    hammer(work)
    kept = {id(cache.get(k)) for k in cache.keys()}
    assert sum(c.n for c in made if id(c) in kept) == cache.weight
    for c in made:
        assert c.closed == (0 if id(c) in kept else 1), "a dropped value is closed once, a kept one never"


def test_a_value_heavier_than_the_bound_is_returned_but_not_kept():
    cache: BoundedCache = BoundedCache("t", 4, weigh=len, max_weight=10)
    assert cache.get_or_create("big", lambda: b"x" * 11) == b"x" * 11
    assert cache.get("big") is None
    assert cache.weight == 0


def test_a_pooled_client_is_never_used_by_two_threads_and_idle_ones_are_bounded():
    pool: ClientPool = ClientPool("t", 3, Closable.close)
    made: list[Closable] = []
    lock = threading.Lock()
    overlaps = []

    def create():
        c = Closable()
        with lock:
            made.append(c)
        return c

    def work(i: int) -> None:
        for j in range(50):
            with pool.lease(("conf", (i + j) % 2), create) as c:
                c.users += 1
                if c.users != 1 or c.closed:
                    overlaps.append(c)
                time.sleep(0.0002)
                c.users -= 1
            assert pool.idle() <= 3

    hammer(work)
    assert not overlaps, "a client was lent to two threads at once, or used after it was closed"
    assert pool.in_use == 0
    assert pool.idle() <= 3
    assert sum(c.closed for c in made) == len(made) - pool.idle()
    assert all(c.closed <= 1 for c in made)


def test_a_client_whose_user_failed_is_closed_not_lent_again():
    pool: ClientPool = ClientPool("t", 3, Closable.close)
    c = Closable()
    with pytest.raises(KeyError), pool.lease("k", lambda: c):
        raise KeyError("boom")  # noqa: EM101
    assert c.closed == 1
    assert pool.idle() == 0


def test_kafka_reads_in_threads_of_one_worker_never_share_a_consumer(monkeypatch):
    confluent_kafka = pytest.importorskip("confluent_kafka")
    from flowpoint.connectors.kafka import reader

    busy = Counter()
    shared = []

    class FakeConsumer:
        def __init__(self, conf):
            pass

        def assign(self, tps):
            busy[id(self)] += 1
            if busy[id(self)] > 1:
                shared.append(self)
            self.end = tps[0].offset + 3

        def consume(self, n, timeout):
            time.sleep(0.001)
            return []

        def position(self, tps):
            return [type("TP", (), {"offset": self.end})()]

        def unassign(self):
            busy[id(self)] -= 1

        def close(self):
            pass

    monkeypatch.setattr(confluent_kafka, "Consumer", FakeConsumer)
    config = {"bootstrap.servers": f"fake-{time.monotonic_ns()}:9092"}  # no consumer of an earlier test
    r = reader.KafkaSourceReader(config, None, False, 5.0)
    r.deserializer = type("D", (), {"deserialize": staticmethod(lambda b: b)})()
    hammer(lambda i: [list(r.read(None, ("t", i, 0, 3))) for _ in range(5)], 8)
    assert not shared, "two reads assigned partitions to one consumer at once"
    assert reader._consumers().idle() <= reader._IDLE_CONSUMERS
    reader._consumers().close_idle()


def test_a_stage_plan_is_decoded_once_by_a_worker_whose_threads_all_ask(monkeypatch):
    import cloudpickle

    from flowpoint.spark.connect import epoch_launcher

    decoded = []

    def slow_loads(blob):
        decoded.append(1)
        time.sleep(0.005)
        return ("plan", blob)

    monkeypatch.setattr(cloudpickle, "loads", slow_loads)
    job = f"job-{time.monotonic_ns()}"
    plans = hammer(lambda _i: epoch_launcher._plan((job, 3, "digest"), b"blob"))
    assert len(decoded) == 1
    assert all(p is plans[0] for p in plans)


def test_a_csv_file_is_parsed_once_by_a_worker_whose_threads_all_read_it(monkeypatch, tmp_path):
    from flowpoint.connectors import files

    path = tmp_path / "words.csv"
    path.write_text("word,n\n" + "".join(f"w{i % 7},{i}\n" for i in range(200)))
    parsed = []
    read_csv = files.pacsv.read_csv

    def counting_read_csv(*args, **kw):
        parsed.append(1)
        time.sleep(0.005)
        return read_csv(*args, **kw)

    monkeypatch.setattr(files.pacsv, "read_csv", counting_read_csv)
    reader = files._FileReader(files.FileFormat.csv())
    batches = hammer(lambda i: list(reader._csv_whole(str(path), 10 * i, 10 * i + 10, 200)))
    assert len(parsed) == 1
    assert [b.num_rows for bs in batches for b in bs] == [10] * THREADS


def test_task_state_cache_keeps_every_partition_put_by_concurrent_subtasks():
    cache = TaskStateCache()
    for job in range(200):
        hammer(lambda i, job=job: cache.put(f"job-{job}", 1, i, i))
        assert {i: cache.get(f"job-{job}", 1, i) for i in range(THREADS)} == {i: i for i in range(THREADS)}
        assert len(cache._by_job) <= TaskStateCache.MAX_JOBS


def test_task_state_cache_drops_while_others_add_jobs():
    cache = TaskStateCache()

    def work(i: int) -> None:
        for j in range(300):
            if i % 4 == 0:
                cache.drop(f"job-{j % 7}")
            else:
                cache.put(f"job-{(i * 31 + j) % 7}/run-{j % 3}", 1, i, j)

    hammer(work)
    assert len(cache._by_job) <= TaskStateCache.MAX_JOBS


def test_recent_writes_stay_within_their_byte_bound_from_many_threads(tmp_path):
    part_writer.recent_writes().clear()

    def work(i: int) -> None:
        for j in range(200):
            uri = str(tmp_path / f"f-{i}-{j % 9}")
            part_writer.remember(uri, b"x" * (100 + 37 * ((i + j) % 50)))
            part_writer.recent_writes().get(str(tmp_path / f"f-{(i + 1) % THREADS}-{j % 9}"))
            if j % 13 == 0:
                part_writer.recent_writes().pop(uri)

    recent = part_writer.recent_writes()
    recent.max_weight = 64 << 10
    hammer(work)
    assert recent.weight == sum(len(recent.get(k) or b"") for k in recent.keys())
    assert recent.weight <= 64 << 10
    recent.max_weight = part_writer._RECENT_LIMIT
    recent.clear()


def test_the_worker_owns_one_of_each_and_a_forked_child_starts_afresh():
    if not hasattr(os, "fork"):
        pytest.skip("no fork here")
    w = worker()
    assert task_states() is task_states() is w.part("state.task-states", TaskStateCache)
    cache = w.cache("test.fork", 4)
    cache.put("k", "parent's")
    held = threading.Event()
    release = threading.Event()

    def hold():  # another thread holds the cache's lock while the process forks
        with cache._lock:
            held.set()
            release.wait(10)

    t = threading.Thread(target=hold)
    t.start()
    held.wait(10)
    pid = os.fork()
    if pid == 0:  # the child: exit status tells the parent what it saw
        code = 1
        try:
            child = worker()
            c = child.cache("test.fork", 4)
            ok = child is not w and child.pid == os.getpid() and c is not cache and c.get("k") is None
            c.get_or_create("k", lambda: "child's")  # would hang on the inherited, held lock
            code = 0 if ok and task_states() is not None else 2
        finally:
            os._exit(code)
    release.set()
    t.join()
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert worker() is w and cache.get("k") == "parent's"


# -- a continuous job whose slots each run four subtasks as threads of one worker ----------------

WORDS = 13


class Tag:
    """A map that notes, once per subtask, which process and thread ran it (``log``: a file)."""

    def __init__(self, name: str, log: str) -> None:
        self.name = name
        self.log = log
        self.seen = False

    def __call__(self, value):
        if not self.seen:
            self.seen = True
            note(self.log, self.name)
        return value


def note(log: str, name: str) -> None:
    with open(log, "a") as f:
        f.write(f"{os.getpid()} {threading.get_ident()} {name}\n")


def counting(name: str, log: str, key):
    from flowpoint import KeyedProcessFunction, ValueStateDescriptor

    class CountPerKey(KeyedProcessFunction):
        def open(self, ctx):
            self.count = ctx.get_state(ValueStateDescriptor("count"))
            self.seen = False

        def process_element(self, value, ctx):
            if not self.seen:
                self.seen = True
                note(log, name)
            n = (self.count.value() or 0) + 1
            self.count.update(n)
            yield (name, key(value), n)

    return CountPerKey()


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_four_subtasks_per_slot_equal_a_plain_python_reference(make_env, tmp_path, backend):
    """Source+map, two keyed counts and a rebalanced map, unchained, at parallelism 2 on the
    continuous runtime: each of the 2 slots runs 4 subtasks as threads of one Python worker,
    which share its caches (task states, parsed CSV files, durable writes). Output and state
    equal a sequential count in plain Python."""
    from flowpoint import CollectSink, FileFormat, FileSource

    d = tmp_path / "csv"
    d.mkdir()
    rows = []
    for f in range(4):
        lines = ["word,n"]
        for i in range(250):
            w = f"w{(i * 7 + f * 3) % WORDS}"
            rows.append(w)
            lines.append(f"{w},{i}")
        (d / f"part-{f}.csv").write_text("\n".join(lines) + "\n")
    log = str(tmp_path / "threads.log")

    env = make_env(parallelism=2, max_records=100, state_checkpoints_dir=str(tmp_path / "ck"),
                   execution_runtime="continuous", execution_buffer_timeout=5)
    env.get_configuration().set("state.backend.type", backend)
    env.enable_checkpointing(100)
    sink = CollectSink()
    (env.from_source(FileSource.for_format(FileFormat.csv(), str(d)).build(), source_name="words")
        .map(Tag("A", log)).uid("a")
        .key_by(lambda r: r.word).process(counting("B", log, lambda r: r.word)).uid("b")
        .key_by(lambda t: t[2] % 8).process(counting("C", log, lambda t: t[2] % 8)).uid("c")
        .rebalance().map(Tag("D", log)).uid("d")
        .sink_to(sink))
    result = env.execute(f"four subtasks per slot on {backend}")

    per_word = Counter(rows)  # the reference: B counts per word, C counts B's outputs per count % 8
    per_bucket = Counter(n % 8 for w in per_word for n in range(1, per_word[w] + 1))
    expected = Counter(("C", b, n) for b, m in per_bucket.items() for n in range(1, m + 1))
    assert Counter(sink.results) == expected
    assert result.get_keyed_state("b", "count") == dict(per_word)
    assert result.get_keyed_state("c", "count") == dict(per_bucket)

    threads: dict[str, dict[str, set]] = {}  # pid -> stage -> thread ids
    with open(log) as f:
        for line in f:
            pid, tid, name = line.split()
            threads.setdefault(pid, {}).setdefault(name, set()).add(tid)
    full = [p for p, names in threads.items() if set(names) == {"A", "B", "C", "D"} and len(set().union(*names.values())) >= 4]
    assert full, f"no Python worker ran the four stages' subtasks as four threads: {threads}"



def _open_files_under(path) -> int:
    """How many of this process's file descriptors are open on files below ``path``."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith(str(path)):
                n += 1
        except OSError:
            continue
    return n


def _rocksdb_partition(tmp_path, cache: TaskStateCache, job: str):
    from flowpoint.partition.protocol import StateLocation
    from flowpoint.partition.rocksdb_backend import RocksDBPartitionBackend

    location = StateLocation(f"{job}/run-0", str(tmp_path / "local"), str(tmp_path / "durable"), "rocksdb")
    return RocksDBPartitionBackend(location, 128, cache)


def _reopens(b) -> bool:
    """Whether another backend opens ``b``'s DB directory at once (its LOCK is free)."""
    from flowpoint.state.rocksdb import RocksDBKeyedStateBackend

    other = RocksDBKeyedStateBackend("op", b.db_path, 128, uid="op")
    try:
        other.open(timeout=0)
    except Exception:  # noqa: BLE001 - still locked by a DB left open
        return False
    other.close()
    return True


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts open files in /proc/self/fd")
def test_an_evicted_or_dropped_rocksdb_task_state_closes_its_db_unless_a_task_holds_it(tmp_path):
    """A worker's cache that evicts (or drops) a RocksDB partition's TaskState closes its DB:
    its files and LOCK are released, so the directory opens again at once. One that a task
    holds stays open until that task releases it."""
    pytest.importorskip("rocksdict")
    from flowpoint.partition.committed_chain import CommittedChain

    cache = TaskStateCache()
    idle_backend = _rocksdb_partition(tmp_path, cache, "idle-job")
    idle, _ = idle_backend.acquire(0, 0, CommittedChain(), ["op"])
    idle_backend.release(idle)
    idle_db = idle.backends["op"]
    idle_db.open()  # open with no task holding it (as an acquire that raised used to leave it)
    held_backend = _rocksdb_partition(tmp_path, cache, "held-job")
    held, _ = held_backend.acquire(0, 0, CommittedChain(), ["op"])
    held_db = held.backends["op"]
    assert idle_db.is_open and held_db.is_open and not _reopens(idle_db)
    assert _open_files_under(tmp_path / "local" / "idle-job") > 0

    for j in range(TaskStateCache.MAX_JOBS):  # four other jobs evict both
        cache.put(f"job-{j}", 1, 0, j)
    assert not {"idle-job/run-0", "held-job/run-0"} & set(cache.jobs())
    assert not idle_db.is_open, "the evicted TaskState's DB is still open"
    assert _open_files_under(tmp_path / "local" / "idle-job") == 0
    assert _reopens(idle_db)
    assert held_db.is_open, "the DB of a TaskState a task holds was closed under it"
    held_backend.release(held)
    assert not held_db.is_open and _reopens(held_db)

    dropped_backend = _rocksdb_partition(tmp_path, cache, "dropped-job")
    dropped, _ = dropped_backend.acquire(0, 0, CommittedChain(), ["op"])
    dropped_backend.release(dropped)
    dropped.backends["op"].open()
    cache.drop("dropped-job")
    assert not dropped.backends["op"].is_open and _reopens(dropped.backends["op"])


def test_an_acquire_that_fails_closes_the_dbs_it_opened(tmp_path):
    """The caller of an acquire that raised has no state to release: acquire closes what it
    opened, so the next attempt (in any process) finds the DB's LOCK free."""
    pytest.importorskip("rocksdict")
    from flowpoint.errors import FlowpointError
    from flowpoint.partition.committed_chain import CommittedChain, CommittedFile

    cache = TaskStateCache()
    backend = _rocksdb_partition(tmp_path, cache, "job")
    missing = CommittedFile(1, "t", str(tmp_path / "durable" / "missing-delta.pkl"), 10, "0" * 64)
    with pytest.raises(FlowpointError):
        backend.acquire(0, 0, CommittedChain(deltas=(missing,), last_epoch=1, last_token="t"), ["op"])
    ts = cache.get("job/run-0", 0, 0)
    assert not ts.backends["op"].is_open and _reopens(ts.backends["op"])
    assert not ts.in_use
