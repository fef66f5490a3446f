"""What changed in a keyed state between two checkpoints (issue 30, item 6):
``state_reader(...).diff(chk_a, chk_b, uid, name)``, a DataFrame of keys added, removed and
changed (a MapState's entries by user key)."""

from __future__ import annotations

import math
import os

import pytest
from checkpoint_jobs import build
from test_checkpoints import checkpointing_env, completed, wait_for

from flowpoint import ExternalizedCheckpointCleanup, state_reader
from flowpoint.errors import CheckpointError, ConfigurationError
from flowpoint.state.changes import state_changes
from flowpoint.state.key_identity import KeyedStateMap, state_key


def test_changes_of_value_and_map_state_with_keys_python_compares_oddly():
    nan = float("nan")
    # 1 and True are two keys (a dict literal cannot hold both: their state keys can)
    before = KeyedStateMap({state_key(1): 10, state_key(True): 20, nan: nan, "gone": 1, "same": [1, 2]})
    after = KeyedStateMap({state_key(1): 11, state_key(True): 20, nan: nan, "new": 5, "same": [1, 2]})
    rows = {(repr(k), c): (b, a) for k, _, c, b, a in state_changes(before, after, is_map=False)}
    assert rows == {("1", "changed"): (10, 11), ("'gone'", "removed"): (1, None), ("'new'", "added"): (None, 5)}
    # True unchanged; NaN finds NaN, and its NaN value is the same value

    before = KeyedStateMap({"a": {1: 1, 2: 2}, "b": {1: 1}})
    after = KeyedStateMap({"a": {1: 1, 2: 3, 4: 4}, "c": {7: 7}})
    rows = sorted(state_changes(before, after, is_map=True), key=repr)
    assert rows == sorted([("a", 2, "changed", 2, 3), ("a", 4, "added", None, 4), ("b", 1, "removed", 1, None),
                           ("c", 7, "added", None, 7)], key=repr)
    assert not any(isinstance(r[3], float) and math.isnan(r[3]) for r in rows)


@pytest.mark.slow
def test_diff_of_two_retained_checkpoints_equals_their_states_difference(spark, make_env, tmp_path):
    env = checkpointing_env(make_env, tmp_path, 2, "hashmap", retained=5)
    env.get_checkpoint_config().set_externalized_checkpoint_cleanup(ExternalizedCheckpointCleanup.RETAIN_ON_CANCELLATION)
    build(env, 4_000, rate=3000)
    client = env.execute_async("diffed")
    wait_for(lambda: len(completed(client.get_checkpoint_stats())) >= 6, what="6 completed checkpoints")
    client.cancel()
    with pytest.raises(Exception):  # noqa: B017 - a cancelled job's wait raises
        client.wait(120)
    job_dir = tmp_path / "ck" / client.get_job_id()
    ids = sorted(int(n[4:]) for n in os.listdir(job_dir) if n.startswith("chk-"))
    first, last = ids[0], ids[-1]
    reader = state_reader(spark, str(job_dir / f"chk-{last}"))
    old = state_reader(spark, str(job_dir / f"chk-{first}")).keyed_state_dict("counting")
    new = reader.keyed_state_dict("counting")

    rows = reader.diff(first, last, "counting", "count").collect()
    assert {r["change"] for r in rows} == {"changed"}  # 13 keys, all seen by the first checkpoint
    assert {(r["key"], r["before"], r["after"]) for r in rows} == {
        (k, old["count"][k], new["count"][k]) for k in new["count"] if old["count"][k] != new["count"][k]}
    assert all(r["after"] > r["before"] for r in rows)

    by_path = reader.diff(str(job_dir / f"chk-{first}"), str(job_dir / f"chk-{last}"), "counting", "by_digit").collect()
    want = set()
    for k, digits in new["by_digit"].items():
        for d, n in digits.items():
            before = old["by_digit"].get(k, {}).get(d)
            if before is None:
                want.add((k, d, "added", None, n))
            elif before != n:
                want.add((k, d, "changed", before, n))
    assert {(r["key"], r["user_key"], r["change"], r["before"], r["after"]) for r in by_path} == want
    assert reader.diff(last, last, "counting", "count").count() == 0

    with pytest.raises(CheckpointError, match=f"no retained checkpoint {first - 1}"):
        reader.diff(first - 1, last, "counting", "count")
    with pytest.raises(ConfigurationError, match="give one of them"):
        state_reader(spark)
