"""PyFlink's type information beyond the basic types: what values each type makes when it is an
operator's ``output_type`` (as PyFlink's coders make them) and how ``print()`` shows them (Java's
``toString``)."""

from __future__ import annotations

import datetime as dt
from decimal import Decimal

import pytest

from flowpoint import CollectSink, Row, Types
from flowpoint.api.time import Instant
from flowpoint.api.typed_values import printer

UTC = dt.timezone.utc

# (type, value the function returns, value the next operator sees)
CASES = {
    "BIG_DEC from float": (Types.BIG_DEC(), 0.1, Decimal("0.1")),
    "BIG_DEC from str": (Types.BIG_DEC(), "2.50", Decimal("2.50")),
    "BIG_DEC": (Types.BIG_DEC(), Decimal("123456789012345678901234567890.5"), Decimal("123456789012345678901234567890.5")),
    "BIG_INT": (Types.BIG_INT(), 2**40, 2**40),
    "CHAR": (Types.CHAR(), "x", "x"),
    "SQL_DATE from datetime": (Types.SQL_DATE(), dt.datetime(2024, 1, 31, 13, 45), dt.date(2024, 1, 31)),
    "SQL_TIME": (Types.SQL_TIME(), dt.time(13, 45, 1, 250999), dt.time(13, 45, 1, 250000)),
    "SQL_TIMESTAMP": (Types.SQL_TIMESTAMP(), dt.datetime(2024, 1, 31, 13, 45, 1, 250999, tzinfo=UTC),
                      dt.datetime(2024, 1, 31, 13, 45, 1, 250000)),
    "INSTANT": (Types.INSTANT(), Instant.of_epoch_milli(1706708701250), Instant(1706708701, 250_000_000)),
    "OBJECT_ARRAY": (Types.OBJECT_ARRAY(Types.BIG_DEC()), [1.5, None, "2"], [Decimal("1.5"), None, Decimal("2")]),
    "BASIC_ARRAY": (Types.BASIC_ARRAY(Types.FLOAT()), [0.1], [0.10000000149011612]),
    "PRIMITIVE_ARRAY": (Types.PRIMITIVE_ARRAY(Types.INT()), (1, 2), (1, 2)),
    "LIST of SQL_DATE": (Types.LIST(Types.SQL_DATE()), [dt.datetime(2024, 2, 29, 1)], [dt.date(2024, 2, 29)]),
    "MAP": (Types.MAP(Types.STRING(), Types.BIG_DEC()), {"a": 1}, {"a": Decimal("1")}),
    "TUPLE": (Types.TUPLE([Types.STRING(), Types.SQL_TIME()]), ["a", dt.time(1, 2, 3, 4567)], ("a", dt.time(1, 2, 3, 4000))),
    "ROW_NAMED": (Types.ROW_NAMED(["d", "n"], [Types.SQL_DATE(), Types.BIG_DEC()]), (dt.datetime(2024, 1, 1, 5), 3),
                  Row(d=dt.date(2024, 1, 1), n=Decimal("3"))),
}


def test_each_type_makes_the_values_pyflink_makes_in_a_job(make_env):
    """One job, a map per type: the function returns the first value with the type as its
    output_type; the next operator records what it sees (value and class)."""
    env = make_env(parallelism=2)
    sinks = {}
    for name, (type_info, returned, _) in CASES.items():
        sinks[name] = sink = CollectSink()
        (env.from_collection([0])
            .map(lambda _, v=returned: v, output_type=type_info)
            .map(lambda v: (v, type(v).__name__, [type(x).__name__ for x in v] if isinstance(v, (list, tuple)) else None))
            .sink_to(sink))
    env.execute("type values")
    for name, (_, _, expected) in CASES.items():
        [(value, cls, elements)] = sinks[name].results
        assert value == expected, name
        assert cls == type(expected).__name__, name
        if isinstance(expected, (list, tuple)):
            assert elements == [type(x).__name__ for x in expected], name
    [(row, _, _)] = sinks["ROW_NAMED"].results
    assert row.d == dt.date(2024, 1, 1) and row.n == Decimal("3")


@pytest.mark.parametrize(("type_info", "value", "shown"), [
    (Types.BIG_DEC(), Decimal("1E+3"), "1E+3"),  # BigDecimal.toString: the same scientific notation
    (Types.BIG_DEC(), Decimal("0.000001"), "0.000001"),
    (Types.SQL_DATE(), dt.date(2024, 1, 31), "2024-01-31"),
    (Types.SQL_TIME(), dt.time(9, 5, 7, 250000), "09:05:07"),
    (Types.SQL_TIMESTAMP(), dt.datetime(2024, 1, 31, 9, 5, 7), "2024-01-31 09:05:07.0"),
    (Types.SQL_TIMESTAMP(), dt.datetime(2024, 1, 31, 9, 5, 7, 120000), "2024-01-31 09:05:07.12"),
    (Types.INSTANT(), Instant(1706691907, 0), "2024-01-31T09:05:07Z"),
    (Types.INSTANT(), Instant(1706691907, 120_000_000), "2024-01-31T09:05:07.120Z"),
    (Types.INSTANT(), Instant(1706691907, 120_500_000), "2024-01-31T09:05:07.120500Z"),
    (Types.INSTANT(), Instant(-1, 999_999_999), "1969-12-31T23:59:59.999999999Z"),
    (Types.CHAR(), "c", "c"),
    (Types.OBJECT_ARRAY(Types.SQL_DATE()), [dt.date(2024, 1, 1), None], "[2024-01-01, null]"),
    (Types.TUPLE([Types.BIG_DEC(), Types.INSTANT()]), (Decimal("2.50"), None), "(2.50,null)"),
])
def test_print_shows_javas_to_string(type_info, value, shown):
    assert printer(type_info)(value) == shown


def test_instant_is_pyflinks():
    i = Instant.of_epoch_milli(-1)
    assert (i.seconds, i.nanos, i.to_epoch_milli()) == (-1, 999_000_000, -1)
    assert repr(i) == "Instant<-1, 999000000>"
    assert i != (-1, 999_000_000) and i == Instant(-1, 999_000_000) and len({i, Instant(-1, 999_000_000)}) == 1
