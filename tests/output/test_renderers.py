"""The report layer: envelope, exit semantics, and the machine renderers."""

import json
import math
import xml.etree.ElementTree as ET

import pytest

from ibdiag.errors import InputError
from ibdiag.findings.model import Finding, Report, RunMeta, Severity, worst
from ibdiag.output.csvout import render_csv
from ibdiag.output.jsonout import envelope, load_envelope, render_json
from ibdiag.output.junit import render_junit
from ibdiag.output.prom import Metric, PromSample, finding_metrics, render_prom

META = RunMeta(host="node17", version="9.9.9", generated_at="2026-11-29T00:00:00Z")
OK = Finding("x.ok", Severity.OK, "a", "fine")
WARN = Finding("x.warn", Severity.WARN, "b", "meh", value=3, limit=1, unit="errors", hint="look")
FAIL = Finding("x.fail", Severity.FAIL, 'c"quoted"', "bad\nline", hint="fix it")


def test_status_and_strict():
    r = Report("topo", {}, (OK, WARN))
    assert r.status is Severity.WARN and r.failing() == () and r.failing(strict=True) == (WARN,)
    assert Report("topo", {}, (OK, FAIL, WARN)).problems() == (FAIL, WARN)
    assert worst([]) is Severity.OK


def test_envelope_has_the_contract_keys_and_rejects_collisions():
    doc = envelope(Report("topo", {"gpus": []}, (WARN,)), META)
    assert list(doc)[:6] == ["schema", "version", "host", "generated_at", "status", "findings"]
    assert doc["schema"] == "ibdiag.topo/1" and doc["status"] == "warn" and doc["gpus"] == []
    assert doc["findings"][0] == {
        "check": "x.warn",
        "severity": "warn",
        "subject": "b",
        "message": "meh",
        "value": 3,
        "limit": 1,
        "unit": "errors",
        "hint": "look",
    }
    with pytest.raises(ValueError):
        envelope(Report("topo", {"host": "x"}), META)


def test_json_turns_non_finite_into_null():
    text = render_json(Report("bench", {"bw": math.nan, "rows": [math.inf, 1.5]}), META)
    doc = json.loads(text)
    assert doc["bw"] is None and doc["rows"] == [None, 1.5]


def test_json_cleans_subclasses_and_other_mappings_like_plain_values():
    """The clean pass takes plain types by exact type; enums, float subclasses, other mappings and
    tuples still come out as json.dumps writes them, non-finite numbers as null."""
    from enum import Enum, IntEnum
    from types import MappingProxyType

    class Colour(str, Enum):
        red = "red"

    class Count(IntEnum):
        one = 1

    class Gbps(float):
        pass

    data = {
        "enum": Colour.red,
        "int_enum": Count.one,
        "nan": Gbps("nan"),
        "rate": Gbps(2.5),
        "proxy": MappingProxyType({1: (math.inf, "x", True, None)}),
        Colour.red: [(-math.inf,), {"deep": [math.nan, 0.5]}],
    }
    doc = json.loads(render_json(Report("bench", data), META))
    assert doc["enum"] == "red" and doc["int_enum"] == 1
    assert doc["nan"] is None and doc["rate"] == 2.5
    assert doc["proxy"] == {"1": [None, "x", True, None]}
    assert doc[str(Colour.red)] == [[None], {"deep": [None, 0.5]}]


def test_load_envelope_errors(tmp_path):
    p = tmp_path / "x.json"
    with pytest.raises(InputError, match="no such file"):
        load_envelope(p, schema="ibdiag.topo/1")
    p.write_text("{nope")
    with pytest.raises(InputError, match="not JSON"):
        load_envelope(p, schema="ibdiag.topo/1")
    p.write_text("[]")
    with pytest.raises(InputError, match="no schema"):
        load_envelope(p, schema="ibdiag.topo/1")
    p.write_text(render_json(Report("counters"), META))
    with pytest.raises(InputError, match="expected ibdiag.topo/1"):
        load_envelope(p, schema="ibdiag.topo/1")
    assert load_envelope(p, schema=("ibdiag.topo/1", "ibdiag.counters/1"))["host"] == "node17"


def test_prom_escaping_and_types():
    text = render_prom(
        [
            Metric(
                "ibdiag_x_bytes_total",
                "Bytes\\sent\nnow.",
                "counter",
                (PromSample({"device": 'a"b\\c\nd'}, 12), PromSample({"device": "e"}, 1.5)),
            ),
            Metric("ibdiag_y", "y", "gauge", (PromSample({}, math.nan),)),
        ]
    )
    assert "# HELP ibdiag_x_bytes_total Bytes\\\\sent\\nnow." in text
    assert 'ibdiag_x_bytes_total{device="a\\"b\\\\c\\nd"} 12' in text
    assert 'ibdiag_x_bytes_total{device="e"} 1.5' in text
    assert "ibdiag_y NaN" in text
    with pytest.raises(ValueError):
        Metric("bad-name", "", "gauge", ())
    with pytest.raises(ValueError):
        render_prom([Metric("a", "", "gauge", ()), Metric("a", "", "gauge", ())])


def test_finding_metrics_keep_the_worst_per_subject():
    dup = Finding("x.warn", Severity.FAIL, "b", "worse")
    text = render_prom(finding_metrics(Report("counters", {}, (WARN, dup, OK))))
    assert 'ibdiag_check_severity{command="counters",check="x.warn",subject="b"} 2' in text
    assert text.count('check="x.warn"') == 1
    assert 'ibdiag_findings{command="counters",severity="fail"} 1' in text


def test_junit_cases_and_strict():
    xml = render_junit(Report("topo", {}, (OK, WARN, FAIL)), META)
    suite = ET.fromstring(xml.split("\n", 1)[1]).find("testsuite")
    assert (
        suite.get("tests") == "3"
        and suite.get("failures") == "1"
        and suite.get("hostname") == "node17"
    )
    cases = {c.get("classname"): c for c in suite.iter("testcase")}
    assert cases["x.fail"].find("failure").get("message") == "bad\nline"
    assert "hint: fix it" in cases["x.fail"].find("failure").text
    assert cases["x.warn"].find("system-out").text.startswith("WARN: meh")
    strict = ET.fromstring(
        render_junit(Report("topo", {}, (OK, WARN)), META, strict=True).split("\n", 1)[1]
    ).find("testsuite")
    assert strict.get("failures") == "1"
    empty = ET.fromstring(render_junit(Report("verdict"), META).split("\n", 1)[1]).find("testsuite")
    assert empty.get("tests") == "1" and empty.find("testcase").get("name") == "verdict"


def test_csv():
    text = render_csv(("a", "b"), [{"a": 1, "b": None}, {"a": "x,y", "b": 2}])
    assert text == 'a,b\n1,\n"x,y",2\n'
    with pytest.raises(ValueError):
        render_csv(("a",), [{"a": 1, "zzz": 2}])
