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
