"""Keyed state used from user functions in real jobs on Spark: every state kind, over several
epochs at parallelism 2, checked against a plain-Python model and through ``get_keyed_state``.

One job (the ``job`` fixture) runs every function below; each test checks one of them."""

from __future__ import annotations

from collections import defaultdict

import pytest

from flowpoint import (
    AggregatingStateDescriptor,
    CollectSink,
    FilterFunction,
    FlatMapFunction,
    KeyedProcessFunction,
    ListStateDescriptor,
    MapFunction,
    MapStateDescriptor,
    ReducingStateDescriptor,
    Row,
    StreamExecutionEnvironment,
    Types,
    ValueStateDescriptor,
)

from state_functions import AverageAggregate as Average
from state_functions import SumReduce as Sum

# (user, amount) events; amount < 0 resets the user's state
EVENTS = [
    ("ann", 5), ("bob", 2), ("ann", 3), ("cid", 7), ("bob", 4), ("ann", 5), ("dan", 1), ("cid", 2),
    ("ann", -1), ("bob", 4), ("ann", 9), ("cid", 7), ("dan", 6), ("bob", -1), ("cid", 3), ("ann", 1),
    ("eve", 2), ("cid", 8), ("dan", 6), ("ann", 4),
]
WORDS = ["to", "be", "or", "not", "to", "be", "that", "is", "the", "question", "to", "be"]
MAX_RECORDS = 10  # records per epoch over both sources: 4 epochs


class AllStates(KeyedProcessFunction):
    def open(self, runtime_context):
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))
        self.amounts = runtime_context.get_list_state(ListStateDescriptor("amounts", Types.LONG()))
        self.by_parity = runtime_context.get_map_state(MapStateDescriptor("by_parity", Types.STRING(), Types.LONG()))
        self.total = runtime_context.get_reducing_state(ReducingStateDescriptor("total", Sum(), Types.LONG()))
        self.largest = runtime_context.get_reducing_state(ReducingStateDescriptor("largest", lambda a, b: max(a, b)))
        self.average = runtime_context.get_aggregating_state(AggregatingStateDescriptor("average", Average()))
        self.last_two = runtime_context.get_state(ValueStateDescriptor("last_two"))

    def process_element(self, value, ctx):
        user, amount = value
        assert ctx.get_current_key() == user
        if amount < 0:
            for s in (self.count, self.amounts, self.by_parity, self.total, self.largest, self.average, self.last_two):
                s.clear()
            yield (user, "reset")
            return
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        self.amounts.add(amount)
        parity = "even" if amount % 2 == 0 else "odd"
        self.by_parity.put(parity, (self.by_parity.get(parity) or 0) + amount)
        if amount == 9 and self.by_parity.contains("odd"):
            self.by_parity.remove("odd")
        self.total.add(amount)
        self.largest.add(amount)
        self.average.add(amount)
        last = self.last_two.value() or []
        last.append(amount)  # mutate the value read from state, then write it back
        self.last_two.update(last[-2:])
        yield (
            ctx.get_current_key(), n, self.amounts.get(), dict(sorted(self.by_parity.items())),
            # a copy: the next record of this key mutates the list held in state, and records
            # are references until their epoch ends
            self.total.get(), self.largest.get(), self.average.get(), list(self.last_two.value()),
        )


def model_all_states():
    outputs, state = [], {}
    for user, amount in EVENTS:
        if amount < 0:
            state.pop(user, None)
            outputs.append((user, "reset"))
            continue
        s = state.setdefault(user, {"n": 0, "amounts": [], "parity": {}, "total": 0, "largest": amount, "last": []})
        s["n"] += 1
        s["amounts"].append(amount)
        parity = "even" if amount % 2 == 0 else "odd"
        s["parity"][parity] = s["parity"].get(parity, 0) + amount
        if amount == 9:
            s["parity"].pop("odd", None)
        s["total"] += amount
        s["largest"] = max(s["largest"], amount)
        s["last"] = (s["last"] + [amount])[-2:]
        outputs.append((user, s["n"], list(s["amounts"]), dict(sorted(s["parity"].items())), s["total"], s["largest"], s["total"] / s["n"], s["last"]))
    return outputs, state


class RichCount(MapFunction):
    """A MapFunction with open(): keyed state on KeyedStream.map."""

    def open(self, runtime_context):
        self.seen = runtime_context.get_state(ValueStateDescriptor("seen", Types.INT()))

    def map(self, value):
        n = (self.seen.value() or 0) + 1
        self.seen.update(n)
        return value, n


class Batcher(FlatMapFunction):
    """Buffers words per first letter in ListState; emits a batch of two."""

    def open(self, runtime_context):
        self.buffer = runtime_context.get_list_state(ListStateDescriptor("buffer", Types.STRING()))

    def flat_map(self, value):
        buffered = self.buffer.get()
        if buffered:
            self.buffer.clear()
            yield (value[0], [*buffered, value])
        else:
            self.buffer.add(value)


class FirstOccurrence(FilterFunction):
    def open(self, runtime_context):
        self.seen = runtime_context.get_map_state(MapStateDescriptor("seen", Types.STRING(), Types.BOOLEAN()))

    def filter(self, value):
        if self.seen.contains(value.word):
            return False
        self.seen.put(value.word, True)
        return True


@pytest.fixture(scope="module")
def job(spark, tmp_path_factory):
    settings = {"execution.progress.interval": -1, "state.working.dir": str(tmp_path_factory.mktemp("working"))}
    env = StreamExecutionEnvironment.get_execution_environment(settings, spark_session=spark)
    env.set_parallelism(2)
    env.set_epoch_max_records(MAX_RECORDS)
    sinks = defaultdict(CollectSink)
    events = env.from_collection(EVENTS)
    events.key_by(lambda e: e[0]).process(AllStates()).uid("all-states").sink_to(sinks["all"])
    words = env.from_collection(WORDS)
    words.key_by(lambda w: w).map(RichCount()).uid("rich-map").sink_to(sinks["map"])
    words.key_by(lambda w: w[0]).flat_map(Batcher()).uid("batcher").sink_to(sinks["flat_map"])
    (
        words.map(lambda w: Row(word=w, length=len(w)))
        .key_by("length")
        .filter(FirstOccurrence())
        .uid("first-occurrence")
        .sink_to(sinks["filter"])
    )
    result = env.execute("keyed state")
    return result, sinks


def by_key(records):
    out = defaultdict(list)
    for r in records:
        out[r[0]].append(r)
    return dict(out)


def test_job_ran_several_epochs(job):
    result, _ = job
    assert result.epochs >= 4
    assert result.records_read == len(EVENTS) + len(WORDS)


def test_every_state_kind_in_a_keyed_process_function(job):
    result, sinks = job
    expected, _ = model_all_states()
    got = sinks["all"].results
    assert len(got) == len(EVENTS)
    assert by_key(got) == by_key(expected)


def test_final_keyed_state_of_every_kind(job):
    result, _ = job
    _, final = model_all_states()
    state = lambda name: result.get_keyed_state("all-states", name)  # noqa: E731
    assert state("count") == {u: s["n"] for u, s in final.items()}
    assert state("amounts") == {u: s["amounts"] for u, s in final.items()}
    assert state("by_parity") == {u: s["parity"] for u, s in final.items() if s["parity"]}
    assert state("total") == {u: s["total"] for u, s in final.items()}
    assert state("largest") == {u: s["largest"] for u, s in final.items()}
    assert state("average") == {u: [s["total"], s["n"]] for u, s in final.items()}  # accumulators
    assert state("last_two") == {u: s["last"] for u, s in final.items()}
    # "bob" was reset last: no state of any kind is left for him
    everything = result.get_keyed_state("all-states")
    assert set(everything) == {"count", "amounts", "by_parity", "total", "largest", "average", "last_two"}
    assert all("bob" not in table for table in everything.values())
    assert result.get_keyed_state("all-states", "no-such-state") == {}


def test_keyed_map_with_rich_function(job):
    result, sinks = job
    expected, counts = [], defaultdict(int)
    for w in WORDS:
        counts[w] += 1
        expected.append((w, counts[w]))
    assert by_key(sinks["map"].results) == by_key(expected)
    assert result.get_keyed_state("rich-map", "seen") == dict(counts)


def test_keyed_flat_map_with_list_state(job):
    result, sinks = job
    expected, buffers = [], defaultdict(list)
    for w in WORDS:
        if buffers[w[0]]:
            expected.append((w[0], [*buffers[w[0]], w]))
            buffers[w[0]] = []
        else:
            buffers[w[0]].append(w)
    assert by_key(sinks["flat_map"].results) == by_key(expected)
    assert result.get_keyed_state("batcher", "buffer") == {k: v for k, v in buffers.items() if v}


def test_keyed_filter_by_row_field_with_map_state(job):
    result, sinks = job
    got = sinks["filter"].results
    assert sorted(r.word for r in got) == sorted(set(WORDS))
    assert all(isinstance(r, Row) and r.length == len(r.word) for r in got)
    expected_state = defaultdict(dict)
    for w in WORDS:
        expected_state[len(w)][w] = True
    assert result.get_keyed_state("first-occurrence", "seen") == dict(expected_state)
