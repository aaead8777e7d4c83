"""``ibdiag fabric --slurm-topology FILE``: topology.conf, read back by a real slurmctld
(tests/support/slurm.py) whose ``scontrol show topology`` must show the fabric's tree."""

from __future__ import annotations

from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.fabric.nodelist import compress, expand
from tests.support.cli import run_cli
from tests.support.fabric_topology import rail_fat_tree, three_tier
from tests.support.slurm import SlurmCtld, need_slurm


def topology_conf(tmp_path: Path, t) -> str:
    net = tmp_path / "net"
    net.write_text(t.text())
    out = tmp_path / "topology.conf"
    r = run_cli("fabric", "-o", "json", "--from", str(net), "--slurm-topology", str(out))
    assert r.exit_code == 0 and r.exception is None, r.stderr
    return out.read_text()


def rows(text: str) -> list[str]:
    return [ln for ln in text.splitlines() if not ln.startswith("#")]


def test_a_rail_optimised_fat_tree_is_two_scalable_units_under_the_spines(tmp_path):
    # 8 hosts x 4 rails, 2 leaves per rail: gpu01-04 on the first leaf of every rail, gpu05-08 on the second.
    conf = topology_conf(tmp_path, rail_fat_tree(leaves_per_rail=2))
    assert rows(conf) == [
        "SwitchName=su1 Nodes=gpu[01-04]",
        "SwitchName=su2 Nodes=gpu[05-08]",
        "SwitchName=spines1 Switches=su1,su2",
    ]
    assert "# su1: leaf-r0-1 leaf-r1-1 leaf-r2-1 leaf-r3-1" in conf
    assert "# spines1: spine-1 spine-2" in conf


def test_a_three_tier_tree_is_leaves_pod_spines_and_cores(tmp_path):
    conf = topology_conf(tmp_path, three_tier())
    assert rows(conf) == [
        "SwitchName=leaf-p1-1 Nodes=gpu[01-04]",
        "SwitchName=leaf-p1-2 Nodes=gpu[05-08]",
        "SwitchName=leaf-p2-1 Nodes=gpu[09-12]",
        "SwitchName=leaf-p2-2 Nodes=gpu[13-16]",
        "SwitchName=spines1 Switches=leaf-p1-1,leaf-p1-2",
        "SwitchName=spines2 Switches=leaf-p2-1,leaf-p2-2",
        "SwitchName=cores1 Switches=spines1,spines2",
    ]


def test_slurmctld_accepts_it_and_shows_the_tree(tmp_path):
    need_slurm()
    conf = topology_conf(tmp_path, three_tier())
    with SlurmCtld(tmp_path / "slurm", "gpu[01-16]", 16, conf) as ctld:
        r = ctld.scontrol("show", "topology")
    assert r.returncode == 0, r.stderr
    got = {ln.split()[0]: ln for ln in r.stdout.splitlines() if ln.startswith("SwitchName=")}
    assert sorted(got) == sorted(
        f"SwitchName={n}"
        for n in (
            "leaf-p1-1",
            "leaf-p1-2",
            "leaf-p2-1",
            "leaf-p2-2",
            "spines1",
            "spines2",
            "cores1",
        )
    )
    assert (
        "Level=0" in got["SwitchName=leaf-p2-1"]
        and "Nodes=gpu[09-12]" in got["SwitchName=leaf-p2-1"]
    )
    assert (
        "Level=1" in got["SwitchName=spines2"]
        and "Switches=leaf-p2-1,leaf-p2-2" in got["SwitchName=spines2"]
    )
    assert "Level=2" in got["SwitchName=cores1"] and "Nodes=gpu[01-16]" in got["SwitchName=cores1"]


def test_a_mesh_gets_no_topology_conf(tmp_path):
    t = rail_fat_tree(switch_ports=20)
    a, b = t.switch("leaf-r0-1"), t.switch("leaf-r1-1")
    a.peers[20] = (b.node_id, 20, "4xHDR")
    b.peers[20] = (a.node_id, 20, "4xHDR")
    net = tmp_path / "net"
    net.write_text(t.text())
    r = run_cli("fabric", "--from", str(net), "--slurm-topology", str(tmp_path / "t.conf"))
    assert r.exit_code == 2 and "not a tree of tiers" in r.stderr
    assert not (tmp_path / "t.conf").exists()


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu[01-03]", ["gpu01", "gpu02", "gpu03"]),
        ("gpu[01-02,07],login1", ["gpu01", "gpu02", "gpu07", "login1"]),
        ("r[1-2]n[8-9]", ["r1n8", "r1n9", "r2n8", "r2n9"]),
        ("gpu[9-11]", ["gpu9", "gpu10", "gpu11"]),
        ("b1,a1,b1", ["b1", "a1"]),
    ],
)
def test_host_lists_expand_as_slurm_does(text, names):
    assert expand(text) == names


@pytest.mark.parametrize(
    "text", ["gpu[01-", "gpu]1", "gpu[3-1]", "gpu[a-b]", "gpu[[1]]", "", "gpu 1"]
)
def test_malformed_host_lists_are_refused(text):
    with pytest.raises(InputError):
        expand(text)


def test_host_lists_compress_back():
    # as scontrol show hostlist prints them (python-hostlist's collect_hostlist)
    assert compress(["gpu03", "gpu01", "gpu02", "gpu07", "login"]) == "gpu[01-03,07],login"
    assert compress(["gpu9", "gpu10", "gpu11"]) == "gpu[9-11]"
    assert expand(compress(expand("n[001-100],m[1-3]"))) == sorted(expand("n[001-100],m[1-3]"))


def test_a_hosts_map_gives_slurms_names(tmp_path):
    t = rail_fat_tree(leaves_per_rail=2)
    net = tmp_path / "net"
    net.write_text(t.text())
    m = tmp_path / "hosts"
    ca = t.ca("gpu08", 0)
    # gpu01-04 by host name; gpu08 by one adapter's GUID (which names the whole host)
    m.write_text(
        "# ibdiag's name  Slurm's\n"
        + "".join(f"gpu0{i} node-a{i}\n" for i in range(1, 5))
        + f"0x{ca.guid:016x} node-b8\n"
    )
    out = tmp_path / "topology.conf"
    r = run_cli("fabric", "--from", str(net), "--slurm-topology", str(out), "--hosts", str(m))
    assert r.exit_code == 0, r.stderr
    assert rows(out.read_text())[:2] == [
        "SwitchName=su1 Nodes=gpu[05-07],node-b8",
        "SwitchName=su2 Nodes=node-a[1-4]",
    ]
    r = run_cli("fabric", "--from", str(net), "--hosts", str(m))
    assert r.exit_code == 2 and "--slurm-topology" in r.stderr
    m.write_text("gpu01 node a1\n")
    r = run_cli("fabric", "--from", str(net), "--slurm-topology", str(out), "--hosts", str(m))
    assert r.exit_code == 2 and "line 1" in r.stderr
