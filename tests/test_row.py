"""``Row``: one class per schema (``flowpoint.api.row.row_class``) so that a row carries no dict of
its own; what a user relies on of a Row stays as it was: names, kinds, equality with tuples,
pickling (savepoints hold pickled Rows), and any number of schemas."""

from __future__ import annotations

import copy
import pickle

import pyarrow as pa
import pytest

from flowpoint.api import row as row_module
from flowpoint.api.row import Row, RowKind
from flowpoint.api.types import Types, arrow_to_rows
from flowpoint.state.kinds import immutable


def test_a_row_reads_by_name_and_index_and_is_a_tuple():
    r = Row(user="a", n=2)
    assert (r.user, r["n"], r[0], r.as_dict()) == ("a", 2, "a", {"user": "a", "n": 2})
    assert isinstance(r, Row) and isinstance(r, tuple) and type(r).__name__ == "Row"
    assert r == ("a", 2) and hash(r) == hash(("a", 2)) and {r: 1}[("a", 2)] == 1
    assert repr(r) == "Row(user='a', n=2)" and repr(Row(1, "x")) == "Row(1, 'x')"
    assert Row(1, 2)._fields is None
    with pytest.raises(AttributeError, match="no field 'x'"):
        _ = r.x
    with pytest.raises(KeyError, match="no field 'x'"):
        _ = r["x"]


def test_rows_of_one_schema_share_a_class_and_rows_of_two_do_not():
    a, b, c = Row(user="a", n=1), Row.of(("user", "n"), ["b", 2]), Row(user="c", m=3)
    assert type(a) is type(b) and type(a) is not type(c)
    assert (a.n, c.m) == (1, 3)
    with pytest.raises(AttributeError):
        _ = c.n


def test_a_kind_and_the_names_survive_pickle_and_copy():
    r = Row(user="a", n=2)
    r.set_row_kind(RowKind.UPDATE_BEFORE)
    for again in (pickle.loads(pickle.dumps(r)), copy.copy(r), copy.deepcopy(r)):
        assert again == r and again._fields == ("user", "n") and again.get_row_kind() is RowKind.UPDATE_BEFORE
    assert Row(user="b", n=1).get_row_kind() is RowKind.INSERT  # the kind is the row's, not its class's
    r.set_row_kind(RowKind.INSERT)
    assert pickle.loads(pickle.dumps(r)).get_row_kind() is RowKind.INSERT


def test_rows_pickled_by_the_old_row_class_load():
    """What a savepoint written before holds: ``_make_row(fields, values[, kind])``."""
    old = pickle.loads(pickle.dumps((row_module._make_row, (("a", "b"), (1, 2), RowKind.DELETE))))
    r = old[0](*old[1])
    assert r == (1, 2) and r.b == 2 and r.get_row_kind() is RowKind.DELETE


def test_past_the_cap_of_classes_a_row_keeps_its_names_itself(monkeypatch):
    monkeypatch.setattr(row_module, "MAX_ROW_CLASSES", len(row_module._ROW_CLASSES))
    r = Row(never_seen_before_field=1)
    assert r.never_seen_before_field == 1 and r._fields == ("never_seen_before_field",)
    assert pickle.loads(pickle.dumps(r)).never_seen_before_field == 1
    rows = arrow_to_rows(pa.table({"x_past_cap": [1, 2], "y_past_cap": ["a", "b"]}))
    assert [(r.x_past_cap, r.y_past_cap) for r in rows] == [(1, "a"), (2, "b")]


def test_rows_from_arrow_and_their_immutability_for_state():
    rows = arrow_to_rows(pa.table({"user": ["a", "b"], "n": [1, 2]}), Types.ROW_NAMED(["user", "n"], [Types.STRING(), Types.INT()]))
    assert rows == [("a", 1), ("b", 2)] and rows[1].user == "b" and type(rows[0]) is type(Row(user="", n=0))
    assert immutable(rows[0]) and not immutable(Row(user="a", n=[1]))
