"""Numbers and identities in the tools' text, through ``ibdiag fabric --from`` (issue 42, items 4
and 9; fixed in issue 35, whose tests call the library: these go through the command line, as an
operator's dump does). A 20-digit LID was accepted, a 17-hex-digit GUID silently cut to 16, and two
nodes that say one GUID were merged, so findings moved to the wrong switch: now each number is
refused where it enters (exit 2, naming the line), and two nodes with one GUID are both kept and
named in a failing finding."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.fabric_topology import rail_fat_tree

EDITS = {
    "a 20-digit LID": (("lid 0 4xHDR", "lid 12345678901234567890 4xHDR"), "is not a LID"),
    "a 6-digit LID": (("lid 0 4xHDR", "lid 123456 4xHDR"), "is not a LID"),
    "a 17-hex-digit switch GUID": (
        ("switchguid=0xb8cef60300000001(", "switchguid=0xb8cef603000000012("),
        "not 0x and 1-16 hex digits",
    ),
    "a 17-hex-digit adapter GUID": (
        ("caguid=0x2c90300000100", "caguid=0x2c903000001000000"),
        "not 0x and 1-16 hex digits",
    ),
    "an 18-hex-digit port GUID": (
        ('"H-0002c90300000100"[1](2c90300000101)', '"H-0002c90300000100"[1](2c9030000010100ab)'),
        "is not a GUID",
    ),
}


@pytest.mark.parametrize("what", list(EDITS))
def test_an_ibnetdiscover_number_out_of_range_is_exit_2_with_its_line(
    tmp_path: Path, what: str
) -> None:
    (old, new), why = EDITS[what]
    text = rail_fat_tree(hosts=4, rails=2).text()
    assert old in text
    net = tmp_path / "net.txt"
    net.write_text(text.replace(old, new, 1))
    r = run_cli("fabric", "--from", str(net))
    assert r.exit_code == 2, (r.exit_code, r.stderr[-600:])
    assert why in r.stderr and "line " in r.stderr and "hint:" in r.stderr, r.stderr


@pytest.mark.parametrize(
    "line, why",
    [
        (
            '0xb8cef603000000012 "leaf-r0-1" 1 1[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==>  0x2 1 1[  ] "x" ( )',
            "not a port line of iblinkinfo",
        ),
        (
            '0xb8cef60300000001 "leaf-r0-1" 12345678901234567890 1[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==>  0x2 1 1[  ] "x" ( )',
            "not a port line of iblinkinfo",
        ),
    ],
    ids=["a 17-hex-digit GUID", "a 20-digit LID"],
)
def test_an_iblinkinfo_number_out_of_range_is_exit_2(tmp_path: Path, line: str, why: str) -> None:
    good = '0xb8cef60300000001 "leaf-r0-1" 1 2[  ] ==( 4X 53.125 Gbps Active/  LinkUp)==>  0x2 1 1[  ] "x" ( )'
    paste = tmp_path / "links.txt"
    paste.write_text(good + "\n" + line + "\n")
    r = run_cli("fabric", "--from", str(paste))
    assert r.exit_code == 2, (r.exit_code, r.stderr[-600:])
    assert why in r.stderr and "line 2" in r.stderr, r.stderr


def test_two_nodes_that_say_one_guid_are_a_failure_and_never_merged(tmp_path: Path) -> None:
    t = rail_fat_tree(hosts=4, rails=2)
    a, b = t.switch("leaf-r0-1"), t.switch("leaf-r1-1")
    _, hport = t.host_cable("gpu02", 1)
    t.set_link(b.desc, hport, "1xHDR")  # a fault on the second of the two
    text = t.text().replace(
        f"switchguid=0x{b.guid:x}({b.guid:x})", f"switchguid=0x{a.guid:x}({a.guid:x})"
    )
    net = tmp_path / "net.txt"
    net.write_text(text)
    r = run_cli("fabric", "--from", str(net), "-o", "json")
    assert r.exit_code == 1, r.stderr
    bad = {f["check"]: f for f in json.loads(r.stdout)["findings"] if f["severity"] != "ok"}
    assert bad["fabric.duplicate_guid"]["severity"] == "fail"
    assert bad["fabric.duplicate_guid"]["message"].startswith(f"2 nodes say GUID 0x{a.guid:016x}")
    # the 1x link stays on leaf-r1-1 (its own node), not moved to leaf-r0-1
    assert bad["fabric.link_rate"]["subject"] == f"leaf-r1-1:{hport}<>gpu02/mlx5_1"
