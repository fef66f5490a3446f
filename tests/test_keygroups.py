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
    for a, b in zip(ranges, ranges[1:]):
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
