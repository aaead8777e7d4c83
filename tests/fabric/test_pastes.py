"""Dumps as people save them and pastes of one tool's output, through ``ibdiag fabric --from`` (issue 35,
point 7). The junk is skipped and said; a malformed line inside the dump is still refused; each tool's
output is judged for what it holds. The tools' outputs here are what infiniband-diags printed on the
simulated subnet (tests/support/ibsim.py) of the project's fat tree, read back offline."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.fabric import dump
from ibdiag.fabric.linkinfo import parse_linkinfo
from ibdiag.fabric.netdiscover import read_netdiscover
from ibdiag.fabric.pastes import split
from ibdiag.findings.model import Severity
from tests.support.cli import run_cli
from tests.support.fabric_shapes import judged, putty_log, with_prompt, with_stderr_line
from tests.support.fabric_topology import rail_fat_tree
from tests.support.ibsim import SimFabric, need_simulator

TREE = rail_fat_tree(hosts=4, rails=2)


@pytest.mark.parametrize(
    "wrap, skipped, first",
    [
        (with_prompt, 2, "line 1: [root@ufm01 fabric]# ibnetdiscover"),
        (with_stderr_line, 1, "ibwarn: [4321] _do_madrpc: recv failed"),
        (putty_log, 2, "line 1: =~=~=~=~=~=~=~=~=~=~=~= PuTTY log"),
    ],
)
def test_junk_around_or_inside_a_dump_is_skipped_and_said(tmp_path, wrap, skipped, first):
    text = wrap(TREE.text())
    found = read_netdiscover(text)
    plain = read_netdiscover(TREE.text())
    assert (found.nodes, found.ports) == (plain.nodes, plain.ports)
    assert found.skipped is not None and found.skipped.count == skipped
    j = judged(text, tmp_path)
    (ok,) = [f for f in j.findings if f.check == "fabric.discovery"]
    assert ok.severity is Severity.OK and first in ok.message
    assert [f.check for f in j.findings if f.severity is not Severity.OK] == []


def test_a_malformed_line_inside_the_dump_is_still_refused_with_its_number():
    text = with_prompt(TREE.text()).replace(
        "\r\n\r\nvendid=", "\r\n\r\nsomething else\r\n\r\nvendid=", 1
    )
    line = text[: text.index("something else")].count("\n") + 1
    with pytest.raises(InputError, match=f"line {line}: not a line of ibnetdiscover's output"):
        read_netdiscover(text)


@pytest.fixture(scope="module")
def outputs(tmp_path_factory) -> dict[str, str]:
    """What the tools print on the simulated subnet: gpu02's rail-1 leaf port counted 57 symbol errors."""
    need_simulator()
    out: dict[str, str] = {}
    with SimFabric(TREE.text(), tmp_path_factory.mktemp("sim")) as f:
        sw, port = TREE.host_cable("gpu02", 1)
        f.console(f'PerformanceSet "{sw.node_id}"[{port}] PortCounters.SymbolErrorCounter=57')
        for name, argv in {
            "iblinkinfo": ["iblinkinfo"],
            "iblinkinfo-l": ["iblinkinfo", "-l"],
            "ibhosts": ["ibhosts"],
            "ibqueryerrors": ["ibqueryerrors"],
            "perfquery-x": ["perfquery", "-x"],
            "perfquery": ["perfquery"],
            "sminfo": ["sminfo"],
        }.items():
            r = f.run(argv)
            assert r.returncode in (0, 1), r.stderr
            out[name] = r.stdout
    return out


def from_file(tmp_path: Path, text: str):
    path = tmp_path / "paste.txt"
    path.write_text(text)
    r = run_cli("fabric", "--from", str(path), "-o", "json")
    assert r.exception is None and r.exit_code in (0, 1), r.stderr
    doc = json.loads(r.stdout)
    return r.exit_code, doc, {f["check"]: f for f in doc["findings"]}


def test_iblinkinfo_in_its_default_form_and_with_l_gives_the_same_fabric(outputs, tmp_path):
    default = parse_linkinfo(outputs["iblinkinfo"])
    long = parse_linkinfo(outputs["iblinkinfo-l"])
    key = lambda ln: (ln.guid, ln.port, ln.state, ln.width, ln.speed, ln.peer_guid, ln.peer_port)  # noqa: E731
    assert sorted(map(key, default)) == sorted(map(key, long))
    code, doc, f = from_file(tmp_path, "$ iblinkinfo\n" + outputs["iblinkinfo"])
    assert code == 0 and (len(doc["switches"]), len(doc["adapters"]), len(doc["links"])) == (
        4,
        8,
        16,
    )
    assert f["fabric.tiers"]["message"].startswith("two-tier fat tree: 2 leaves, 2 spines")
    assert f["fabric.rails"]["message"].startswith("rail-optimised: 2 rails on 2 leaves")


def test_ibqueryerrors_after_ibhosts_names_the_port_and_its_errors(outputs, tmp_path):
    text = "$ ibhosts\n" + outputs["ibhosts"] + "$ ibqueryerrors\n" + outputs["ibqueryerrors"]
    assert set(split(text)) == {"ibnodes", "ibqueryerrors"}
    code, doc, f = from_file(tmp_path, text)
    sw, port = TREE.host_cable("gpu02", 1)
    assert code == 0 and f["fabric.errors"]["subject"] == f"{sw.desc}:{port}"
    assert "symbol_error 57" in f["fabric.errors"]["message"]
    assert f["fabric.discovery"]["message"].startswith("a paste without topology")
    assert "fabric.tiers" not in f and "fabric.rails" not in f


def test_perfquery_and_sminfo_are_judged_for_what_they_hold(outputs, tmp_path):
    code, doc, f = from_file(tmp_path, outputs["perfquery"])
    assert (
        code == 0
        and f["fabric.errors"]["message"] == "1 ports: all error counters 0 since the last reset"
    )
    code, doc, f = from_file(tmp_path, outputs["perfquery-x"])
    assert f["fabric.errors"]["message"] == (
        "1 ports read, without error counters (data counters only): errors not judged"
    )
    code, doc, f = from_file(tmp_path, "[root@sm01 ~]# sminfo\n" + outputs["sminfo"])
    assert code == 0 and f["fabric.sm"]["message"].startswith("master LID ")
    assert doc["subnet_managers"][0]["state"] == "master"


def test_iblinkinfo_of_one_switch_judges_its_links_not_the_fabrics_shape(tmp_path):
    text = (
        "Switch: 0x08c0eb0300000001 Quantum Mellanox Technologies:\n"
        '          10    1[  ] ==(                Down/ Polling)==>             [  ] "" ( )\n'
        '          10   21[  ] ==( 4X      25.78125 Gbps Active/  LinkUp)==>      40    1[  ] "node3 HCA-2" ( Could be 53.125 Gbps)\n'
        '          10   40[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>       4   40[  ] "MF0;spine-1:MQM8700/U1" ( )\n'
    )
    code, doc, f = from_file(tmp_path, text)
    assert code == 1 and f["fabric.link_rate"]["severity"] == "fail"
    assert f["fabric.link_rate"]["message"].endswith(
        "EDR where both ends could do HDR (iblinkinfo)"
    )
    assert "fabric.tiers" not in f and "fabric.sharp" not in f
    assert f["fabric.discovery"]["message"].startswith("a paste of part of the fabric")


def test_a_dump_saved_from_a_paste_reads_back_the_same(outputs, tmp_path):
    path = tmp_path / "paste.txt"
    path.write_text(outputs["ibhosts"] + outputs["ibqueryerrors"])
    cap = dump.load(path)
    dump.save(cap, tmp_path / "saved")
    again = dump.load(tmp_path / "saved")
    assert [(r.name, r.stdout) for r in again.runs] == [(r.name, r.stdout) for r in cap.runs]
