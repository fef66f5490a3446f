"""Key groups as in Flink's KeyGroupRangeAssignment, and the stable key hash (no Spark)."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import textwrap

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowpoint import Row
from flowpoint.errors import ConfigurationError, FlowpointError, InvalidKeyError
from flowpoint.state.keygroups import (
    KeyGroupRange,
    assign_to_key_group,
    canonical_bytes,
    check_parallelism,
    compute_default_max_parallelism,
    compute_operator_index_for_key_group,
    key_group_range_for_operator,
    key_hash,
)


def _flink_default_max_parallelism(p: int) -> int:
    """Flink: min(max(roundUpToPowerOfTwo(p + p / 2), 128), 32768), written independently."""
    x = p + p // 2
    power = 1
    while power < x:
        power *= 2
    return min(max(power, 128), 32768)


@pytest.mark.parametrize(
    ("parallelism", "expected"),
    [(1, 128), (2, 128), (85, 128), (86, 256), (100, 256), (170, 256), (171, 256), (172, 512), (1000, 2048),
     (10_000, 16384), (21_845, 32768), (30_000, 32768), (32_768, 32768)],
)
def test_default_max_parallelism_examples(parallelism, expected):
    assert compute_default_max_parallelism(parallelism) == expected


def test_default_max_parallelism_formula_for_all_parallelisms():
    for p in range(1, 32_769):
        assert compute_default_max_parallelism(p) == _flink_default_max_parallelism(p), p


PARALLELISMS = st.integers(1, 300).flatmap(lambda p: st.tuples(st.just(p), st.integers(p, 4096)))


@settings(max_examples=300, deadline=None)
@given(PARALLELISMS)
def test_key_group_ranges_are_contiguous_and_cover_all_key_groups(pm):
    parallelism, max_parallelism = pm
    ranges = [key_group_range_for_operator(max_parallelism, parallelism, i) for i in range(parallelism)]
    assert ranges[0].start == 0
    assert ranges[-1].end == max_parallelism - 1
    for a, b in zip(ranges, ranges[1:], strict=False):
        assert b.start == a.end + 1
    assert sum(len(r) for r in ranges) == max_parallelism
    # each operator owns at least one key group, and the sizes differ by at most one
    sizes = [len(r) for r in ranges]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


@settings(max_examples=200, deadline=None)
@given(PARALLELISMS, st.data())
def test_operator_index_of_a_key_group_matches_range_membership(pm, data):
    parallelism, max_parallelism = pm
    key_group = data.draw(st.integers(0, max_parallelism - 1))
    index = compute_operator_index_for_key_group(max_parallelism, parallelism, key_group)
    assert 0 <= index < parallelism
    assert key_group in key_group_range_for_operator(max_parallelism, parallelism, index)
    for other in {0, index - 1, index + 1, parallelism - 1} - {index}:
        if 0 <= other < parallelism:
            assert key_group not in key_group_range_for_operator(max_parallelism, parallelism, other)


def test_every_key_group_belongs_to_exactly_one_operator():
    for parallelism, max_parallelism in [(1, 128), (2, 128), (3, 128), (7, 10), (10, 10), (128, 128), (5, 32768)]:
        owners = {}
        for i in range(parallelism):
            r = key_group_range_for_operator(max_parallelism, parallelism, i)
            for kg in range(r.start, r.end + 1):
                assert kg not in owners
                owners[kg] = i
        assert sorted(owners) == list(range(max_parallelism))
        for kg, i in owners.items():
            assert compute_operator_index_for_key_group(max_parallelism, parallelism, kg) == i


def test_known_flink_ranges():
    # KeyGroupRangeAssignment.computeKeyGroupRangeForOperatorIndex(128, 3, i)
    assert [key_group_range_for_operator(128, 3, i) for i in range(3)] == [
        KeyGroupRange(0, 42), KeyGroupRange(43, 85), KeyGroupRange(86, 127),
    ]
    assert str(KeyGroupRange(43, 85)) == "43-85"


def test_parallelism_bounds():
    check_parallelism(128, 128)
    with pytest.raises(ConfigurationError):
        check_parallelism(129, 128)
    with pytest.raises(ConfigurationError):
        check_parallelism(0, 128)
    with pytest.raises(ConfigurationError):
        check_parallelism(1, 32769)
    with pytest.raises(ConfigurationError):
        key_group_range_for_operator(4, 8, 0)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(), st.integers(-(2**70), 2**70), st.tuples(st.text(max_size=3), st.integers())), st.integers(1, 32768))
def test_key_group_is_in_range_and_consistent(key, max_parallelism):
    kg = assign_to_key_group(key, max_parallelism)
    assert 0 <= kg < max_parallelism
    assert kg == key_hash(key) % max_parallelism
    assert 0 <= key_hash(key) < 2**31


def test_equal_keys_hash_equally():
    assert key_hash(("a", 1)) == key_hash(Row("a", 1)) == key_hash(Row(x="a", y=1))
    assert key_hash(0.0) == key_hash(-0.0)
    assert key_hash(frozenset({"a", "b"})) == key_hash(frozenset({"b", "a"}))
    assert canonical_bytes("a") != canonical_bytes(b"a")
    assert canonical_bytes(("ab", "c")) != canonical_bytes(("a", "bc"))


@pytest.mark.parametrize("key", [object(), ("ok", object()), [1, lambda: 1]])
def test_keys_without_canonical_bytes_are_invalid(key):
    with pytest.raises(InvalidKeyError) as info:
        key_hash(key)
    assert isinstance(info.value, FlowpointError)
    assert "got a" in str(info.value)


def test_unhashable_keys_are_keys_as_in_pyflink():
    """PyFlink compares keys as serialized bytes, so lists, dicts and sets are keys too: a list
    is not the tuple of its items, a dict or set is the same key in any insertion order."""
    assert key_hash(["a", 1]) == key_hash(["a", 1])
    assert canonical_bytes(["a", 1]) != canonical_bytes(("a", 1))
    assert canonical_bytes(["a", 1]) != canonical_bytes([1, "a"])
    assert canonical_bytes({"a": 1, "b": [2]}) == canonical_bytes({"b": [2], "a": 1})
    assert canonical_bytes({1, 2}) == canonical_bytes({2, 1}) != canonical_bytes(frozenset({1, 2}))
    assert canonical_bytes(("ok", ["nested list"])) != canonical_bytes(("ok", ("nested list",)))


def test_one_nan_key_and_1_1_0_true_are_three():
    nan_a, nan_b = float("nan"), struct.unpack("<d", b"\x01\x00\x00\x00\x00\x00\xf8\xff")[0]
    assert nan_a is not nan_b and nan_b != nan_b
    assert canonical_bytes(nan_a) == canonical_bytes(nan_b) == canonical_bytes(-nan_a)
    assert len({canonical_bytes(k) for k in (1, 1.0, True)}) == 3
    assert canonical_bytes((1, "a")) != canonical_bytes((True, "a"))


STABLE_KEYS = ["abc", 42, ("a", 1), -7, 2**80, 3.5, True, b"raw", "", ("nested", ("t", 2), None)]


def test_key_groups_are_stable_across_processes_with_different_hash_seeds():
    script = textwrap.dedent(
        """
        import json, sys
        from flowpoint.state.keygroups import assign_to_key_group, key_hash
        keys = [%s]
        print(json.dumps([[key_hash(k), assign_to_key_group(k, 128), assign_to_key_group(k, 32768), hash("abc")] for k in keys]))
        """
    ) % ", ".join(repr(k) for k in STABLE_KEYS)
    here = [[key_hash(k), assign_to_key_group(k, 128), assign_to_key_group(k, 32768)] for k in STABLE_KEYS]
    python_hashes = set()
    for seed in ("1", "12345"):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, timeout=120)
        rows = json.loads(out.stdout)
        assert [r[:3] for r in rows] == here
        python_hashes.add(rows[0][3])
    # the subprocesses really had different string hashes, which the key groups did not follow
    assert len(python_hashes) == 2


def test_key_hash_values_are_pinned():
    """A change of the hash would move every key to another key group (and task)."""
    assert [key_hash(k) for k in ("abc", 42, ("a", 1))] == [1355422282, 1734452562, 804328049]
    assert [assign_to_key_group(k, 128) for k in ("abc", 42, ("a", 1))] == [74, 82, 113]


@pytest.mark.parametrize(("parallelism", "max_parallelism"), [(1, 128), (3, 128), (4, 7), (5, 256)])
def test_keyed_exchange_routes_keys_to_the_owner_of_their_key_group(parallelism, max_parallelism):
    """The writer of a keyed exchange (run in tasks) must agree with the key-group ranges."""
    import pickle

    from flowpoint.api.functions import KeySelectorWrapper
    from flowpoint.tasks.operators import KeyedWriter
    from flowpoint.tasks.plan import EdgeSpec

    records = [(f"user-{i}", i) for i in range(200)] + [((i % 3, "t"), i) for i in range(50)] + [(i * 7919, i) for i in range(50)]
    edge = EdgeSpec(1, 0, "keyed", KeySelectorWrapper(lambda r: r[0]), parallelism, max_parallelism, None, "target")
    writer = KeyedWriter(edge, partition=0)
    writer.process((0, 0, 0), records)
    routed = {}
    for dest, (_, _, (fmt, payload)) in writer.out:
        assert fmt == "pickle"
        for key, value in pickle.loads(payload):
            routed[(key, value[1])] = dest
    assert len(routed) == len(records)
    for (key, _), dest in routed.items():
        kg = assign_to_key_group(key, max_parallelism)
        assert kg in key_group_range_for_operator(max_parallelism, parallelism, dest)


_int64 = st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1)


@settings(max_examples=60, deadline=None)
@given(
    strs=st.lists(st.text(max_size=12), min_size=1, max_size=40),
    ints=st.lists(_int64, min_size=1, max_size=40),
    max_parallelism=st.sampled_from([1, 7, 128, 32768]),
)
def test_key_groups_of_a_batch_equal_those_of_each_key(strs, ints, max_parallelism):
    """The batch hash (numpy over Arrow columns) gives every key the key group its canonical
    bytes give it one by one: str, int and tuples of them (savepoints must still restore)."""
    import pyarrow as pa

    from flowpoint.state.keygroups import key_groups_of_columns, key_groups_of_keys

    def expect(keys):
        return [assign_to_key_group(k, max_parallelism) for k in keys]

    for keys in (strs, ints):
        got = key_groups_of_keys(keys, max_parallelism)
        assert got is None or got.tolist() == expect(keys)
        got = key_groups_of_columns([pa.array(keys)], max_parallelism, as_tuple=False)
        assert got is None or got.tolist() == expect(keys)
    n = min(len(strs), len(ints))
    got = key_groups_of_columns([pa.array(strs[:n]), pa.array(ints[:n])], max_parallelism, as_tuple=True)
    assert got is None or got.tolist() == expect(list(zip(strs[:n], ints[:n], strict=True)))
    got = key_groups_of_columns([pa.array(ints[:n], pa.int64()).cast(pa.int32(), safe=False)], max_parallelism, as_tuple=True)
    assert got is None or got.tolist() == expect([(int(v),) for v in pa.array(ints[:n]).cast(pa.int32(), safe=False).to_pylist()])


def test_key_groups_of_a_batch_cover_the_common_keys_and_refuse_the_others():
    import pyarrow as pa

    from flowpoint.state.keygroups import key_groups_of_columns, key_groups_of_keys

    ids = [f"user-{i}" for i in range(3000)] + ["", "é", "😀x", "a" * 37]
    assert key_groups_of_keys(ids, 128).tolist() == [assign_to_key_group(k, 128) for k in ids]
    sliced = pa.array(ids).slice(100, 500)  # an Arrow slice starts inside the buffers
    assert key_groups_of_columns([sliced], 128, as_tuple=False).tolist() == [assign_to_key_group(k, 128) for k in ids[100:600]]
    pairs = [(("a", "b", "cc")[i % 3], ("INSTALL", "OPEN")[i % 2]) for i in range(100)]
    cols = [pa.array([p[0] for p in pairs]), pa.array([p[1] for p in pairs])]
    assert key_groups_of_columns(cols, 128, as_tuple=True).tolist() == [assign_to_key_group(p, 128) for p in pairs]
    big = [-(1 << 63), (1 << 63) - 1, 0, -1, 42]
    assert key_groups_of_keys(big, 128).tolist() == [assign_to_key_group(k, 128) for k in big]
    # 1, 1.0 and True are three keys: only lists of exactly str or exactly int are hashed at once
    for other in ([1, True], [1, 1.0], ["a", 1], [1 << 64], [None, "a"], [float("nan")], [b"x"]):
        assert key_groups_of_keys(other, 128) is None
    for col in (pa.array([1.5]), pa.array([True]), pa.array(["a", None]), pa.array([1 << 63], pa.uint64())):
        assert key_groups_of_columns([col], 128, as_tuple=False) is None
    assert key_groups_of_keys(["x" * i for i in range(100)], 128) is None  # too many lengths: one by one


@pytest.mark.parametrize("columnar", [False, True])
@pytest.mark.parametrize("fields", [("id",), ("n",), ("id", "n")])
def test_keyed_exchange_routes_batches_of_str_and_int_keys_by_key_group(columnar, fields):
    """The keyed writer's batch path (all-str or all-int keys, Arrow key columns) routes as the
    key-by-key path does."""
    import pickle

    import pyarrow as pa

    from flowpoint.api.functions import FieldKeySelector, KeySelectorWrapper
    from flowpoint.tasks.batches import decode
    from flowpoint.tasks.operators import KeyedWriter
    from flowpoint.tasks.plan import EdgeSpec

    ids = [f"user-{i % 700}" for i in range(2000)]
    ns = [(i * 7919) % 1000 - 500 for i in range(2000)]
    if columnar:
        selector = FieldKeySelector(fields[0] if len(fields) == 1 else list(fields))
        data = pa.record_batch([pa.array(ids), pa.array(ns, pa.int64())], names=["id", "n"])
    else:
        selector = KeySelectorWrapper(lambda r: r[fields[0]] if len(fields) == 1 else tuple(r[f] for f in fields))
        data = [Row.of(("id", "n"), (a, b)) for a, b in zip(ids, ns, strict=True)]
    edge = EdgeSpec(1, 0, "keyed", selector, 3, 128, None, "target")
    writer = KeyedWriter(edge, partition=0)
    writer.process((0, 0, 0), data)
    seen = 0
    for dest, (_, _, blob) in writer.out:
        batch, _ = decode(blob)
        pairs = batch.pairs() if columnar else pickle.loads(blob[1])
        for key, _ in pairs:
            assert assign_to_key_group(key, 128) in key_group_range_for_operator(128, 3, dest)
            seen += 1
    assert seen == 2000


@pytest.mark.parametrize("field", ["id", ["id"], ["id", "n"], ["n", "id"]])
def test_a_record_has_one_key_whether_its_batch_is_columnar_or_rows(field):
    """``key_by("id")``, ``key_by(["id"])``, ``key_by(["id", "n"])``: the same record gets the same
    key and the same receiver in an Arrow batch and as a Row (a union of a columnar source and a
    mapped stream reaches one keyed operator through both paths; the key is what
    ``FieldKeySelector.get_key`` says: one field's value, or the tuple of a list's fields, even a
    list of one)."""
    import pickle

    import pyarrow as pa

    from flowpoint.api.functions import FieldKeySelector
    from flowpoint.tasks.batches import KeyedBatch, decode
    from flowpoint.tasks.operators import KeyedWriter
    from flowpoint.tasks.plan import EdgeSpec

    ids = [f"user-{i % 70}" for i in range(300)]
    ns = [(i * 7919) % 100 - 50 for i in range(300)]
    selector = FieldKeySelector(field)
    routed = {}
    for columnar in (True, False):
        if columnar:
            data = pa.record_batch([pa.array(ids), pa.array(ns, pa.int64())], names=["id", "n"])
        else:
            data = [Row.of(("id", "n"), (a, b)) for a, b in zip(ids, ns, strict=True)]
        writer = KeyedWriter(EdgeSpec(1, 0, "keyed", selector, 3, 128, None, "target"), partition=0)
        writer.process((0, 0, 0), data)
        got = []
        for dest, (_, _, blob) in writer.out:
            batch, _ = decode(blob)
            pairs = batch.pairs() if isinstance(batch, KeyedBatch) else pickle.loads(blob[1])
            got += [(tuple(value), key, dest) for key, value in pairs]
        routed[columnar] = sorted(got, key=repr)
    assert routed[True] == routed[False]
    expected = {(r[0], r[1]): selector.get_key(Row.of(("id", "n"), r)) for r in zip(ids, ns, strict=True)}
    assert all(key == expected[value] for value, key, _ in routed[False])
