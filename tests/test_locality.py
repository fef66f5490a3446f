"""How stateful partitions are spread over executor hosts (flowpoint.spark.locality.spread):
evenly, and moving as few partitions as possible when hosts come and go, since every moved
partition is rebuilt from durable storage on its new host."""

from __future__ import annotations

import itertools
import random

import pytest

from flowpoint.spark.locality import spread


def _counts(placement: dict[int, str], hosts: list[str]) -> list[int]:
    return [sum(1 for h in placement.values() if h == host) for host in hosts]


@pytest.mark.parametrize(("partitions", "hosts"), list(itertools.product([1, 2, 3, 4, 7, 16], [1, 2, 3, 5])))
def test_every_partition_gets_a_host_and_the_spread_is_even(partitions, hosts):
    names = [f"10.0.0.{i}" for i in range(hosts)]
    placement = spread(partitions, names)
    assert sorted(placement) == list(range(partitions))
    counts = _counts(placement, names)
    assert max(counts) - min(counts) <= 1


def test_a_lost_host_moves_only_its_own_partitions():
    before = spread(8, ["a", "b", "c", "d"])
    after = spread(8, ["a", "b", "d"], before)
    moved = {i for i in range(8) if after[i] != before[i]}
    assert moved == {i for i in range(8) if before[i] == "c"}
    assert max(_counts(after, ["a", "b", "d"])) - min(_counts(after, ["a", "b", "d"])) <= 1


def test_a_new_host_takes_just_enough_partitions_to_even_the_spread():
    before = {i: "a" for i in range(6)}  # everything went to the one host that was left
    after = spread(6, ["a", "b"], before)
    assert _counts(after, ["a", "b"]) == [3, 3]
    assert sum(1 for i in range(6) if after[i] != before[i]) == 3


def test_random_changes_keep_the_spread_even_and_the_moves_minimal():
    rng = random.Random(7)
    hosts = ["h0", "h1", "h2"]
    placement = spread(12, hosts)
    for step in range(200):
        new = sorted(set(rng.sample([f"h{i}" for i in range(6)], rng.randint(1, 5))))
        after = spread(12, new, placement)
        counts = _counts(after, new)
        assert max(counts) - min(counts) <= 1, step
        # a partition whose host remains and is not over its even share stays where it is
        share = -(-12 // len(new))
        stays = sum(1 for i in range(12) if placement[i] in new and after[i] == placement[i])
        kept_possible = sum(min(share, sum(1 for h in placement.values() if h == host)) for host in new)
        assert stays >= min(kept_possible, 12) - len(new), step
        placement, hosts = after, new


def test_local_mode_places_nothing():
    assert spread(4, []) == {}
