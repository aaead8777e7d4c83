"""output.records.Records: rows of one shape held by column (issue 39: a fabric's links and adapters
without a dict a row). Read as a sequence it is the list of dicts it stands for; the JSON writer writes
it as that list, byte for byte."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ibdiag.findings.model import Report, RunMeta
from ibdiag.output.jsonout import _clean, render_json
from ibdiag.output.records import Records, records_of

META = RunMeta(version="0.1.0", host="h", generated_at="2026-12-06T00:00:00Z")

LINKS = [
    {
        "kind": "isl",
        "a": {"guid": "0x1", "port": 1},
        "b": {"guid": "0x2", "port": 3},
        "rate": 200.0,
    },
    {"kind": "host", "a": {"guid": "0x1", "port": 2}, "b": None, "rate": None},
    {
        "kind": "isl",
        "a": {"guid": "0x3", "port": 1},
        "b": {"guid": "0x1", "port": 4},
        "rate": 400.0,
    },
]


def _by_hand() -> Records:
    # The same three links, as a view makes them: the far ends' columns hold the two that exist.
    return Records(
        ("kind", "a", "b", "rate"),
        (
            ["isl", "host", "isl"],
            Records(("guid", "port"), (["0x1", "0x1", "0x3"], [1, 2, 1]), 3),
            Records(("guid", "port"), (["0x2", "0x1"], [3, 4]), 3, [True, False, True]),
            [200.0, None, 400.0],
        ),
        3,
    )


def test_it_reads_as_the_list_it_stands_for():
    recs = _by_hand()
    assert recs == LINKS and list(recs) == LINKS and len(recs) == 3
    assert recs[1] == LINKS[1] and recs[-1] == LINKS[2] and recs[1:] == LINKS[1:]
    assert recs[1]["b"] is None and recs[2]["b"] == {"guid": "0x1", "port": 4}
    assert records_of(LINKS) == recs and recs != LINKS[:2] and recs != "isl"
    with pytest.raises(IndexError):
        recs[3]


def test_blocks_are_slices_of_every_column():
    recs = _by_hand()
    for start in range(4):
        for stop in range(start, 5):
            assert recs.block(start, stop) == LINKS[start:stop]


def test_a_column_of_another_length_or_a_key_that_is_no_string_is_refused():
    with pytest.raises(ValueError, match="every column holds 2 values"):
        Records(("a", "b"), ([1, 2], [1]), 2)
    with pytest.raises(ValueError, match="keys that are strings"):
        Records((1,), ([1],), 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="presence flag per row"):
        Records(("a",), ([1],), 2, [True])


def test_rows_that_do_not_share_their_keys_are_no_records():
    assert records_of([{"a": 1}, {"b": 1}]) is None
    assert records_of([{"a": 1, "b": 2}, {"b": 2, "a": 1}]) is None  # another order
    assert records_of([{"a": 1}, [1]]) is None and records_of([{1: 1}, {1: 2}]) is None


def _reference(doc: object) -> str:
    from ibdiag.output.jsonout import envelope

    report = Report("fabric", {"data": doc}, ())
    return json.dumps(_clean(envelope(report, META)), indent=2, allow_nan=False) + "\n"


def test_written_as_the_list_of_dicts():
    recs = _by_hand()
    text = render_json(Report("fabric", {"data": recs}, ()), META)
    assert text == _reference(LINKS) == render_json(Report("fabric", {"data": LINKS}, ()), META)
    # Where the general path writes it (a mapping with a key of another type), the same list.
    odd = {"links": recs, 1: "one"}
    assert render_json(Report("fabric", {"data": odd}, ()), META) == _reference(
        {"links": LINKS, 1: "one"}
    )


VALUES = st.none() | st.integers(-5, 5) | st.text(max_size=3) | st.floats(allow_nan=True)


@settings(max_examples=300, deadline=None)
@given(
    st.lists(st.text(max_size=3), max_size=4, unique=True),
    st.integers(0, 9),
    st.data(),
)
def test_any_records_are_written_as_their_rows(keys, n, data):
    present = data.draw(st.none() | st.lists(st.booleans(), min_size=n, max_size=n))
    held = n if present is None else sum(present)
    columns = tuple(data.draw(st.lists(VALUES, min_size=held, max_size=held)) for _ in keys)
    recs = Records(tuple(keys), columns, n, present)
    rows = list(recs)
    assert render_json(Report("fabric", {"data": [recs, {"in": recs}]}, ()), META) == _reference(
        [rows, {"in": rows}]
    )
