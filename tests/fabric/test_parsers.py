"""The parsers of infiniband-diags' output: pure, strict (a line of another shape is refused with its
number, exit 2) and safe with hostile node descriptions (escaped, capped). Inputs are written here in
the tools' formats (``ibnetdiscover`` 44.0, ``iblinkinfo -l``, ``ibqueryerrors --data --details``)."""

from __future__ import annotations

import pytest

from ibdiag.errors import InputError
from ibdiag.fabric.capture import Capture, ToolRun
from ibdiag.fabric.linkinfo import parse_linkinfo
from ibdiag.fabric.netdiscover import parse_netdiscover
from ibdiag.fabric.queryerrors import parse_queryerrors
from ibdiag.fabric.sminfo import parse_sm_lids, parse_sminfo
from ibdiag.fabric.toolerr import classify
from tests.support.fabric_topology import rail_fat_tree

TWO_NODES = """#
# Topology file: generated on Thu Dec  3 10:32:38 2026
#
# Initiated from node 0002c90300000101 port 0002c90300000102

vendid=0x2c9
devid=0xd2f0
sysimgguid=0xb8cef603000a0001
switchguid=0xb8cef603000a0001(b8cef603000a0001)
Switch\t8 "S-b8cef603000a0001"\t\t# "leaf1" enhanced port 0 lid 2 lmc 0
[1]\t"H-0002c90300000101"[1](2c90300000102) \t\t# "gpu01 mlx5_0" lid 1 4xHDR

vendid=0x2c9
devid=0x101b
sysimgguid=0x2c90300000101
caguid=0x2c90300000101
Ca\t1 "H-0002c90300000101"\t\t# "gpu01 mlx5_0"
[1](2c90300000102) \t"S-b8cef603000a0001"[1]\t\t# lid 1 lmc 0 "leaf1" lid 2 4xHDR
"""


def test_ibnetdiscover_nodes_ports_lids_widths_and_peers():
    nodes, ports = parse_netdiscover(TWO_NODES)
    sw, ca = nodes
    assert (sw.kind, sw.guid, sw.desc, sw.lid, sw.ports) == (
        "switch",
        "0xb8cef603000a0001",
        "leaf1",
        2,
        8,
    )
    assert (ca.kind, ca.guid, ca.desc) == ("ca", "0x0002c90300000101", "gpu01 mlx5_0")
    swp, cap = ports
    assert (swp.port, swp.width, swp.speed, swp.rate_gbps, swp.lid) == (1, 4, "HDR", 200.0, 2)
    assert swp.peer is not None and (swp.peer.guid, swp.peer.port) == ("0x0002c90300000101", 1)
    assert cap.port_guid == "0x0002c90300000102" and cap.lid == 1


def test_the_generated_topology_parses_whole():
    t = rail_fat_tree(hosts=64, rails=4, leaves_per_rail=2, spines=4)
    nodes, ports = parse_netdiscover(t.text())
    assert len(nodes) == 12 + 256 and len(ports) == 2 * (256 + 8 * 32)


@pytest.mark.parametrize(
    "bad, line",
    [
        (
            'Switch\t8 "S-x"\t\t# "leaf1" enhanced port 0 lid 2 lmc 0\n',
            1,
        ),  # no switchguid= before it
        (
            TWO_NODES.replace('[1]\t"H-0002c90300000101"[1]', '[9]\t"H-0002c90300000101"[1]'),
            11,
        ),  # port 9 of 8
        (TWO_NODES.replace("4xHDR\n\nvendid", "4xHDR\ngarbage here\n\nvendid"), 12),
        (TWO_NODES.replace('# lid 1 lmc 0 "leaf1" lid 2 4xHDR', "# lid one"), 18),
    ],
)
def test_a_malformed_dump_is_refused_with_its_line_number(bad, line):
    with pytest.raises(InputError, match=f"line {line}:"):
        parse_netdiscover(bad)


def test_a_peer_the_dump_does_not_list_is_refused():
    text = TWO_NODES.split("vendid=0x2c9\ndevid=0x101b")[0]
    with pytest.raises(InputError, match="does not list"):
        parse_netdiscover(text)


def test_hostile_node_descriptions_are_escaped_and_capped():
    evil = "gpu01 \x1b]0;pwned\x07" + "A" * 500
    text = TWO_NODES.replace('# "gpu01 mlx5_0"\n[1](2c9', f'# "{evil}"\n[1](2c9')
    nodes, _ = parse_netdiscover(text)
    desc = nodes[1].desc
    assert "\x1b" not in desc and "\x07" not in desc and "\\x1b" in desc and len(desc) < 140


LINKINFO = (
    '0xb8cef603000a0002 "                         leaf2"      3    7[  ] ==( 1X      25.78125 Gbps Active/  LinkUp)==>  0xb8cef603000a0001      2    7[  ] "leaf1" (Could be 12X Could be 53.125 Gbps)\n'
    '0xb8cef603000a0002 "                         leaf2"      3    8[  ] ==(                Down/ Polling)==>             [  ] "" ( )\n'
    '0xb8cef60300000002 "                     leaf-r1-1"     11    9[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>      "Port not available"\n'
    '0x0002c90300000831 "                  gpu08 mlx5_3"      0    1[  ] ==( 4X        53.125 Gbps Initialize/  LinkUp)==>  0xb8cef60300000004      0    8[  ] "leaf-r3-1" (Could be 12X )\n'
)


def test_iblinkinfo_lines_states_speeds_and_unknown_peers():
    isl, down, lost, init = parse_linkinfo(LINKINFO)
    assert (isl.width, isl.speed, isl.state, isl.peer_port, isl.could_be) == (
        1,
        "EDR",
        "Active",
        7,
        "12X 53.125 Gbps",
    )
    assert (down.state, down.phys_state, down.peer_guid, down.width) == (
        "Down",
        "Polling",
        None,
        None,
    )
    assert lost.peer_unknown and lost.state == "Active"
    assert init.state == "Initialize" and init.lid is None
    with pytest.raises(InputError, match="line 1"):
        parse_linkinfo("0xb8cef603000a0002 leaf2: a line of no known shape\n")
    with pytest.raises(InputError, match="unknown lane speed"):
        parse_linkinfo(LINKINFO.replace("25.78125", "99.5"))


def test_ibqueryerrors_ports_not_the_node_sums():
    text = (
        'Errors for 0xb8cef603000a0002 "leaf2"\n'
        "   GUID 0xb8cef603000a0002 port ALL: [LinkDownedCounter == 3] [PortXmitWait == 123456]\n"
        "   GUID 0xb8cef603000a0002 port 7: [LinkDownedCounter == 3] [PortXmitWait == 123456] [PortXmitData == 11448 (44.719KB)]\n"
        "\n## Summary: 5 nodes checked, 2 bad nodes found\n##          34 PMA query failures\n"
    )
    assert parse_queryerrors(text) == {
        ("0xb8cef603000a0002", 7): {
            "LinkDownedCounter": 3,
            "PortXmitWait": 123456,
            "PortXmitData": 11448,
        }
    }
    with pytest.raises(InputError, match="line 2"):
        parse_queryerrors('Errors for 0x1 "x"\n   GUID 0x1 port 7: [LinkDownedCounter == lots]\n')


def test_sminfo_and_the_sm_ports():
    sm = parse_sminfo(
        "sminfo: sm lid 1 sm guid 0x2c90300000102, activity count 101 priority 0 state 3 SMINFO_MASTER\n"
    )
    assert (sm.lid, sm.guid, sm.state, sm.priority, sm.activity) == (
        1,
        "0x0002c90300000102",
        "master",
        0,
        101,
    )
    assert (
        parse_sminfo(
            "sminfo: sm lid 9 sm guid 0x9, activity count 5 priority 14 state 2 SMINFO_STANDBY"
        ).state
        == "standby"
    )
    assert parse_sm_lids(
        "\t\tEndPortLid..............1\n\t\tEndPortLid..............9\n\t\tEndPortLid..............1\n"
    ) == (1, 9)


def test_stderr_is_classified_never_ignored():
    run = ToolRun(
        "ibnetdiscover",
        "ibnetdiscover",
        "",
        'ibwarn: [1] sim_connect: attached as client 1 at node "S-1"\n'
        "./libibnetdisc/query_smp.c:186; umad (DR path slid 0; dlid 0; 0,1,9,5 Attr 0x11:0) bad status 110; Connection timed out\n"
        "something nobody expected \x1b[2J\n",
        0,
    )
    notes = classify(run)
    assert [(n.kind, n.text) for n in notes] == [
        ("unreachable", "directed route 0,1,9,5: Connection timed out"),
        ("other", "something nobody expected \\x1b[2J"),
    ]
    assert classify(ToolRun("sminfo", "sminfo", "", "", None))[0].kind == "timeout"
    assert Capture("live", (run,), None).run("ibnetdiscover") is run


def test_stderr_lines_are_cut_before_a_pattern_and_counted(monkeypatch):
    """Each line is classified by its first 1024 characters; past the per-tool line budget one note
    says the rest was not read (a dump with more is refused where it is read)."""
    import ibdiag.fabric.toolerr as toolerr

    long_line = (
        "ibwarn: [1] query_and_dump: PortCounters query failed on leaf1, Lid 3 port 4" + "x" * 10**6
    )
    (note,) = classify(ToolRun("ibqueryerrors", "ibqueryerrors", "", long_line + "\n", 1))
    assert (note.kind, note.text) == ("unreachable", "counters of leaf1 (LID 3) port 4 not read")
    cut = "query failed on " + "a" * 2000 + ", Lid 3 port 4"  # the LID beyond the cut: not seen
    (note,) = classify(ToolRun("ibqueryerrors", "ibqueryerrors", "", cut, 1))
    assert note.kind == "other" and len(note.text) < 200
    monkeypatch.setattr(toolerr, "MAX_LINES_PER_TOOL", 1000)
    notes = classify(ToolRun("ibnetdiscover", "ibnetdiscover", "", "x\r\n" * 5000, 0))
    assert [n.kind for n in notes] == ["other", "other"]
    assert notes[-1].text == "more than 1000 lines on stderr: the rest not read"
    assert list(toolerr.stderr_lines("a\r\nb\rc\n\nd")) == ["a", "b", "c", "", "d"]


def test_a_port_whose_portinfo_was_lost_has_no_width_or_speed():
    text = TWO_NODES.replace('# "gpu01 mlx5_0" lid 1 4xHDR', '# "gpu01 mlx5_0" lid 1 ?????')
    _, ports = parse_netdiscover(text)
    assert (ports[0].width, ports[0].speed, ports[0].rate_gbps) == (None, None, None)


def test_the_parsers_quick_port_is_the_dataclass_itself():
    # model.new_port sets the instance's fields in one go (issue 39: half the frozen dataclass's
    # __init__, once per port of a 100k-port fabric): equal, hashed, shown and replaced alike, and
    # its fields those of FabricPort, in order.
    from dataclasses import fields, replace

    from ibdiag.fabric.model import FabricPort, PortRef, new_port

    args = ("0x1", 3, "Active", "LinkUp", 4, "HDR", PortRef("0x2", 1), 7, "0x3", "12X")
    a, b = FabricPort(*args), new_port(*args)
    assert a == b and hash(a) == hash(b) and repr(a) == repr(b)
    assert [f.name for f in fields(FabricPort)] == list(vars(b))
    assert replace(b, state="Down") == replace(a, state="Down") != a
    assert b.rate_gbps == 200.0 and b.ref == PortRef("0x1", 3) == ("0x1", 3)


def test_the_ports_and_nodes_ibnetdiscover_reads_are_the_dataclasses_themselves():
    # netdiscover._resolve makes its records inline, every field in one go (issue 39): the same
    # objects the dataclasses' own constructors make, field for field and in order.
    from dataclasses import fields, replace

    from ibdiag.fabric.model import FabricNode, FabricPort

    nodes, ports = parse_netdiscover(TWO_NODES)
    for record, cls in [*((p, FabricPort) for p in ports), *((n, FabricNode) for n in nodes)]:
        again = cls(*(getattr(record, f.name) for f in fields(cls)))
        assert record == again and hash(record) == hash(again) and repr(record) == repr(again)
        assert [f.name for f in fields(cls)] == list(vars(record))
        assert replace(record) == record


LINKINFO_LINES = [
    '0x0002c90300000831 "                  gpu08 mlx5_3"     38    1[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>  0xb8cef60300000004     14    8[  ] "leaf-r3-1" (Could be 12X )',
    '0xb8cef60300000003 "                     leaf-r2-1"     13   19[  ] ==(                Down/ Polling)==>             [  ] "" ( )',
    '0xb8cef60300000003 "                     leaf-r2-1"     13    3[  ] ==( 1X        53.125 Gbps Active/  LinkUp)==>  0x0002c90300000321      5    1[  ] "gpu03 mlx5_2" (Could be 4X)',
    '0xb8cef60300000003 "      leaf "quoted" r2-1"     13    4[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>  0x0002c90300000421      6    1[  ] "gpu04 (mlx5_2)" ( )',
    '0xb8cef60300000003 "                     leaf-r2-1"     13    5[  ] ==( 4X        53.125 Gbps Active/  LinkUp)==>  "Port not available"',
]


@pytest.mark.parametrize("line", LINKINFO_LINES)
def test_iblinkinfos_quick_pattern_reads_what_the_general_one_reads(line):
    # Issue 39: -l's common line takes a pattern with fewer ways to backtrack, and its LinkLine is
    # made in one go; a line it does not take (quotes or parentheses inside a description, a far end
    # not discovered) goes to the general pattern. Either way, the same fields.
    from dataclasses import fields

    from ibdiag.fabric import linkinfo

    general = linkinfo._LINE.match(line)
    assert general is not None
    quick = linkinfo._FAST_LINE.match(line)
    if quick is not None:
        assert quick.groups() == general.groups()
    assert ("quoted" in line or "(mlx5" in line or "not available" in line) == (quick is None)
    (got,) = parse_linkinfo(line)
    assert got == linkinfo.LinkLine(**vars(got)) == linkinfo._long(general, 1)
    assert [f.name for f in fields(linkinfo.LinkLine)] == list(vars(got))


def test_a_parsed_node_s_raw_record_has_every_field_in_order():
    # netdiscover._header makes its _Node by model.built (issue 39): every field, in order.
    from dataclasses import fields

    from ibdiag.fabric.netdiscover import _HEADER, _header, _Node

    line = 'Switch\t40 "S-b8cef603000a0001"\t\t# "leaf1" enhanced port 0 lid 2 lmc 0'
    m = _HEADER.match(line)
    assert m is not None
    node = _header(m, line, {"switchguid": 0xB8CEF603000A0001}, None, 7)
    assert [f.name for f in fields(_Node)] == list(vars(node))
    assert (node.kind, node.node_id, node.nports, node.desc, node.lid, node.line) == (
        "switch",
        "S-b8cef603000a0001",
        40,
        "leaf1",
        2,
        7,
    )
