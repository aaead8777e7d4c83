"""The files ``ibdiag fabric`` is given beside the fabric (issue 42, item 9, part 2): ``--expect
PLAN`` (CSV or TOML) with numbers Python will not convert, and a ``--hosts`` map that would make
two hosts one Slurm node. Through the command line; each refusal is exit 2 with the line or key and
a hint, never an internal error, never a file written wrong without a word."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.fabric_topology import plan_csv, rail_fat_tree

HUGE = "9" * 5000


@pytest.fixture
def fabric(tmp_path: Path) -> Path:
    net = tmp_path / "net.txt"
    net.write_text(rail_fat_tree(hosts=4, rails=2).text())
    return net


@pytest.mark.parametrize(
    "line, words",
    [
        (f"gpu01,mlx5_0,leaf-r0-1,{HUGE}", "line 3: port '9999"),
        (f"leaf-r0-1,{HUGE},spine-1,1", "line 3: port '9999"),
        ("gpu01,mlx5_0,leaf-r0-1,\u00b2", "line 3: port '\u00b2' is not a port number"),
        ("gpu01,mlx5_0,leaf-r0-1,\uff11", "line 3: port '\uff11' is not a port number"),
        ("gpu01,mlx5_0,leaf-r0-1,0256", "line 3: port '0256' is not a port number"),
    ],
    ids=["5000-digit host port", "5000-digit switch port", "superscript", "fullwidth", "256"],
)
def test_a_csv_plan_number_is_checked_where_it_enters(
    fabric: Path, tmp_path: Path, line: str, words: str
) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text(f"# a plan\nnode,adapter,switch,port\n{line}\n")
    r = run_cli("fabric", "--from", str(fabric), "--expect", str(plan))
    assert r.exit_code == 2, (r.exit_code, r.stderr[-600:])
    assert "internal error" not in r.stderr and words in r.stderr, r.stderr[-600:]
    assert "hint:" in r.stderr and len(r.stderr) < 1000


@pytest.mark.parametrize(
    "body, words",
    [
        (
            f'[[host]]\nnode = "gpu01"\nadapter = "mlx5_0"\nswitch = "leaf-r0-1"\nport = {HUGE}\n',
            "plan.toml line 5: a number of 5000 digits",
        ),
        (
            f'[[isl]]\nswitch = "leaf-r0-1"\nport = 1\npeer = "spine-1"\npeer_port = {HUGE[:4000]}\n',
            "[[isl]] 1: port '9999",
        ),
        (
            '[[host]]\nnode = "gpu01"\nadapter = "mlx5_0"\nswitch = "leaf-r0-1"\nport = [[[1]]]\n',
            "[[host]] 1: port must be a name or a number",
        ),
        (
            '[[host]]\nnode = true\nadapter = "mlx5_0"\nswitch = "leaf-r0-1"\nport = 1\n',
            "[[host]] 1: node must be a name or a number",
        ),
    ],
    ids=["5000 digits", "4000 digits", "an array", "a boolean"],
)
def test_a_toml_plan_number_is_checked_where_it_enters(
    fabric: Path, tmp_path: Path, body: str, words: str
) -> None:
    plan = tmp_path / "plan.toml"
    plan.write_text(body)
    r = run_cli("fabric", "--from", str(fabric), "--expect", str(plan))
    assert r.exit_code == 2, (r.exit_code, r.stderr[-600:])
    assert "internal error" not in r.stderr and words in r.stderr, r.stderr[-600:]
    assert "hint:" in r.stderr and len(r.stderr) < 1000


def test_the_real_plan_still_matches(fabric: Path, tmp_path: Path) -> None:
    plan = tmp_path / "plan.csv"
    plan.write_text(plan_csv(rail_fat_tree(hosts=4, rails=2)))
    r = run_cli("fabric", "--from", str(fabric), "--expect", str(plan), "-o", "json")
    assert r.exit_code == 0, r.stderr
    found = [f for f in json.loads(r.stdout)["findings"] if f["check"] == "fabric.plan"]
    assert [f["severity"] for f in found] == ["ok"]


def _slurm(fabric: Path, tmp_path: Path, hosts: str) -> tuple[object, Path]:
    m, out = tmp_path / "hosts", tmp_path / "topology.conf"
    m.write_text(hosts)
    r = run_cli("fabric", "--from", str(fabric), "--slurm-topology", str(out), "--hosts", str(m))
    return r, out


@pytest.mark.parametrize(
    "hosts, words",
    [
        ("gpu01 node-a\ngpu02 node-a\n", "--hosts maps gpu01 and gpu02 both to node-a"),
        ("gpu02 gpu01\n", "--hosts maps gpu02 to gpu01, another host's own name"),
        ("{gpu01} node-a\n{gpu03} node-a\n", "--hosts maps gpu01 and gpu03 both to node-a"),
        ("gpu01 node-a\n{gpu04} node-a\n", "--hosts maps gpu01 and gpu04 both to node-a"),
    ],
    ids=["two hosts", "one to another's name", "two adapters' GUIDs", "a host and a GUID"],
)
def test_a_hosts_map_that_makes_two_hosts_one_slurm_node_is_refused(
    fabric: Path, tmp_path: Path, hosts: str, words: str
) -> None:
    t = rail_fat_tree(hosts=4, rails=2)
    guids = {f"gpu0{h}": f"0x{t.ca(f'gpu0{h}', 1).guid:016x}" for h in range(1, 5)}
    r, out = _slurm(fabric, tmp_path, hosts.format(**guids))
    assert r.exit_code == 2, (r.exit_code, r.stderr[-600:])  # type: ignore[attr-defined]
    assert words in r.stderr and "two hosts one Slurm node" in r.stderr, r.stderr  # type: ignore[attr-defined]
    assert "hint:" in r.stderr and not out.exists()  # type: ignore[attr-defined]


def test_two_adapters_of_one_host_may_share_its_slurm_name(fabric: Path, tmp_path: Path) -> None:
    t = rail_fat_tree(hosts=4, rails=2)
    both = "".join(f"0x{t.ca('gpu03', r).guid:016x} node-c\n" for r in (0, 1))
    r, out = _slurm(fabric, tmp_path, both + "gpu01 node-a\n")
    assert r.exit_code == 0, r.stderr  # type: ignore[attr-defined]
    nodes = [ln.split("Nodes=")[1] for ln in out.read_text().splitlines() if "Nodes=" in ln]
    assert nodes == ["gpu[02,04],node-a,node-c"], nodes
