"""What a finished job leaves where its state lived: nothing. Its executor-local working files
and the state its Python workers cached go when it ends; on the continuous runtime the slots
that held the state remove it themselves as their Spark tasks end, and on the epoch runtime the
tasks of the last epoch, so the driver runs no removal job and the job ends some 0.2-0.3 s
sooner. Where a partition moved between workers it runs one. The state stays
readable after the job (rebuilt from its durable files), and that read leaves nothing either."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from flowpoint import KeyedProcessFunction, Types, ValueStateDescriptor
from flowpoint.driver.epoch_loop import LocalCopies
from flowpoint.partition.working import task_states
from flowpoint.spark.classic import ClassicAdapter

KEYS = [f"k{i % 37}" for i in range(3_000)]


class Count(KeyedProcessFunction):
    def open(self, ctx):
        self.n = ctx.get_state(ValueStateDescriptor("n", Types.LONG()))

    def process_element(self, value, ctx):
        self.n.update((self.n.value() or 0) + 1)


def cached_jobs(spark) -> set[str]:
    """The run keys the suite's Python workers hold state of (tasks on every worker there is)."""
    sc = spark.sparkContext
    return set(sc.parallelize(range(16), 16).flatMap(lambda _: task_states().jobs()).collect())


@pytest.mark.parametrize(("runtime", "epoch_records"), [("continuous", 500), ("epoch", None), ("epoch", 500)],
                         ids=["continuous", "one-epoch", "six-epochs"])
@pytest.mark.parametrize("backend", ["hashmap", "rocksdb"])
def test_a_finished_job_leaves_no_working_files_and_no_cached_state(spark, make_env, tmp_path, monkeypatch, runtime, epoch_records, backend):
    removals = []
    remove = ClassicAdapter.remove_local_state
    monkeypatch.setattr(ClassicAdapter, "remove_local_state", lambda self, *a: removals.append(a) or remove(self, *a))
    scattered = []
    note = LocalCopies.note
    monkeypatch.setattr(LocalCopies, "note", lambda self, acks: note(self, acks) or scattered.append(self.scattered))
    env = make_env(2, epoch_records, **{"execution.runtime": runtime, "state.backend.type": backend,
                                        "state.checkpoints.dir": f"file://{tmp_path / 'ck'}"})
    env.enable_checkpointing(60_000)
    env.from_collection(KEYS).key_by(lambda k: k).process(Count()).uid("count")
    result = env.execute(f"cleanup-{runtime}-{backend}")
    job = result.get_job_id()
    working = tmp_path / "working"
    assert not os.path.exists(working / job), sorted(os.listdir(working / job))
    assert not any(k.startswith(job) for k in cached_jobs(spark))
    # the tasks removed what they held (the slots at the end; the last epoch's tasks): no removal
    # job, unless a partition's state moved between Python workers between epochs (Spark places
    # each epoch's tasks where a worker is free) and so may be cached where no task of the last
    # epoch ran: then the driver's job removes it (and the assertions above hold either way)
    assert len(removals) == (1 if scattered and scattered[-1] else 0), (removals, scattered)
    if epoch_records is None:
        assert removals == [] and scattered == ([False] if runtime == "epoch" else [])
    # after the job the state is still there to read (from its durable files), and the read
    # leaves nothing behind either
    assert dict(result.get_keyed_state("count", "n")) == dict(Counter(KEYS))
    assert not os.path.exists(working / job)
    assert not any(k.startswith(job) for k in cached_jobs(spark))


def test_discard_keeps_the_other_partitions_files(tmp_path):
    from flowpoint.partition.factory import partition_backend
    from flowpoint.partition.protocol import StateLocation

    backend = partition_backend(StateLocation("j0b/run-0", str(tmp_path), str(tmp_path / "durable")), 128)
    for p in (0, 1):
        os.makedirs(os.path.join(backend.local_dir(1, p), "durable"))
    backend.discard(1, 0)
    assert os.listdir(tmp_path / "j0b" / "run-0" / "stage-1") == ["part-1"]
    backend.discard(1, 1)
    assert "j0b" not in os.listdir(tmp_path)  # the job's directories it left empty went with it
