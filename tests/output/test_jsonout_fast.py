"""The JSON writer's one-pass indented encoder writes exactly what ``json.dumps(_clean(doc), indent=2,
allow_nan=False)`` writes (issue 25: the standard library's indenting encoder is pure Python), on any
document hypothesis builds of the plain types, and falls back to the general path on others."""

from __future__ import annotations

import json
import math
from collections import OrderedDict
from enum import IntEnum
from unittest import mock

from hypothesis import given, settings
from hypothesis import strategies as st

from ibdiag.findings.model import Finding, Report, RunMeta, Severity
from ibdiag.output.jsonout import _clean, render_json

SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text()
)
KEYS = st.text()
#: Keys of other types: _clean makes them strings, and may merge two ({"True": 1, True: 2}).
OTHER_KEYS = st.integers() | st.booleans() | st.none() | st.floats(allow_nan=False)


def _docs(keys: st.SearchStrategy) -> st.SearchStrategy:
    return st.recursive(
        SCALARS,
        lambda inner: (
            st.lists(inner, max_size=5)
            | st.lists(inner, max_size=5).map(tuple)
            | st.dictionaries(keys, inner, max_size=5)
        ),
        max_leaves=40,
    )


DOCS = _docs(KEYS)


def reference(report: Report, meta: RunMeta) -> str:
    from ibdiag.output.jsonout import envelope

    return json.dumps(_clean(envelope(report, meta)), indent=2, allow_nan=False) + "\n"


META = RunMeta(version="0.1.0", host="h", generated_at="2026-12-03T00:00:00Z")


@settings(max_examples=300, deadline=None)
@given(DOCS)
def test_byte_for_byte_what_json_dumps_writes(doc):
    report = Report("fabric", {"data": doc}, ())
    with mock.patch("ibdiag.output.jsonout._clean", side_effect=AssertionError("general path")):
        fast = render_json(
            report, META
        )  # plain types: the one-pass encoder, never the general path
    assert fast == reference(report, META)


@settings(max_examples=200, deadline=None)
@given(_docs(KEYS | OTHER_KEYS))
def test_keys_of_other_types_give_what_json_dumps_writes(doc):
    report = Report("fabric", {"data": doc}, ())
    assert render_json(report, META) == reference(report, META)


def test_two_keys_that_clean_merges_are_written_once():
    report = Report("fabric", {"data": {"True": 1, True: 2}}, ())
    assert render_json(report, META) == reference(report, META)
    assert render_json(report, META).count('"True"') == 1


class Level(IntEnum):
    HIGH = 2


def test_other_types_take_the_general_path():
    doc = {
        "mapping": OrderedDict(b=1, a=[1.5, math.inf]),
        "enum": Level.HIGH,
        "nan": math.nan,
        "tuple": (1, "é", None),
    }
    finding = Finding("fabric.tiers", Severity.OK, "fabric", "two-tier fat tree")
    report = Report("fabric", doc, (finding,))
    text = render_json(report, META)
    assert text == reference(report, META)
    back = json.loads(text)
    assert (
        back["mapping"] == {"b": 1, "a": [1.5, None]} and back["enum"] == 2 and back["nan"] is None
    )
    assert '"\\u00e9"' in text  # ASCII, as json.dumps writes it


@settings(max_examples=200, deadline=None)
@given(_docs(KEYS | OTHER_KEYS), st.integers(1, 8))
def test_written_in_pieces_it_is_the_same_document(doc, pieces):
    # Issue 39: write_json hands the document on in pieces (a 100k-port fabric's tens of MB are never
    # held twice); every flush point, and a value of another type after one, gives the same bytes.
    from ibdiag.output import jsonout

    report = Report("fabric", {"data": [doc, {"more": doc}, [doc]], "after": Level.HIGH}, ())
    got: list[str] = []
    with mock.patch.object(jsonout, "FLUSH_PIECES", pieces):
        jsonout.write_json(report, META, got.append)
    assert "".join(got) == reference(report, META)
    assert len(got) > 1


def test_a_key_of_another_type_deep_in_a_large_list_is_written_in_place():
    # The general path takes only the mapping that needs it, where it sits: what json.dumps writes.
    rows = [{"guid": f"0x{i:016x}", "port": i, "rate_gbps": 200.0} for i in range(50)]
    rows[37] = {"guid": "0x25", 1: "one", "1": "merged", "nan": math.nan}
    report = Report("fabric", {"links": rows}, ())
    assert render_json(report, META) == reference(report, META)


# Issue 39: a list of dicts that share their keys (a fabric's links, adapters, switches) is written
# column by column (jsonout._Writer.table). Tables of every kind of column — one plain type, a plain
# type or null, nested tables, nested tables with null, lists, non-finite floats, mixed — and tables
# that stop being tables part-way (a row with other keys, keys of another type, another order).

COLUMN_VALUES = (
    st.text(max_size=4),
    st.integers(-3, 2**65),
    st.floats(allow_nan=True, allow_infinity=True),
    st.none(),
    st.booleans(),
    st.text(max_size=3) | st.none(),
    st.integers(0, 9) | st.none(),
    st.floats(0, 1) | st.none(),
    st.lists(st.integers(0, 3), max_size=2),
    st.just({}),
)


@st.composite
def _tables(draw: st.DrawFn, depth: int = 0) -> list[dict]:
    keys = draw(st.lists(st.text(max_size=3), max_size=4, unique=True))
    columns = {}
    for k in keys:
        if depth < 2 and draw(st.integers(0, 4)) == 0:
            columns[k] = ("table", draw(st.booleans()))  # nested dicts (sometimes with nulls)
        else:
            columns[k] = ("plain", draw(st.sampled_from(range(len(COLUMN_VALUES)))))
    n = draw(st.integers(2, 7))
    nested = {k: draw(_tables(depth + 1)) for k, (kind, _) in columns.items() if kind == "table"}
    rows = []
    for i in range(n):
        row = {}
        for k, (kind, how) in columns.items():
            if kind == "table":
                sub = nested[k]
                row[k] = None if how and draw(st.booleans()) else sub[i % len(sub)]
            else:
                row[k] = draw(COLUMN_VALUES[how])
        rows.append(row)
    if draw(st.integers(0, 5)) == 0:  # one row that breaks the table
        rows[draw(st.integers(0, n - 1))] = draw(
            st.sampled_from([{"other": 1}, {1: "int key"}, dict(reversed(list(rows[0].items())))])
        )
    return rows


@settings(max_examples=400, deadline=None)
@given(_tables(), st.integers(1, 4))
def test_tables_are_written_byte_for_byte_as_json_dumps_writes(rows, block):
    from ibdiag.output import jsonout

    report = Report("fabric", {"links": rows, "more": [rows, {"in": rows}]}, ())
    got: list[str] = []
    with mock.patch.object(jsonout, "TABLE_BLOCK_ROWS", block):
        jsonout.write_json(report, META, got.append)
    assert "".join(got) == reference(report, META)


def test_a_fabric_sized_table_takes_the_column_path():
    from ibdiag.output import jsonout

    rows = [
        {
            "kind": "isl",
            "a": {"guid": f"0x{i:x}", "port": i % 40 + 1},
            "b": None if i % 7 else {"guid": "0x1", "port": 2},
            "rate_gbps": 200.0,
            "state": None if i % 3 else "Active",
        }
        for i in range(10_000)
    ]
    report = Report("fabric", {"links": rows}, ())
    real = jsonout._Writer.mapping
    with mock.patch.object(
        jsonout._Writer, "mapping", autospec=True, side_effect=real
    ) as rows_seen:
        text = render_json(report, META)
    assert text == reference(report, META)
    assert rows_seen.call_count < 5  # the envelope, not a call per row
