"""``ibdiag report``'s configuration outliers grouped (issue 38): the same difference on many nodes is
one row naming them as a Slurm host list, the same difference on many adapters of those nodes one
setting (``mlx5_[0-11] driver``). On the fixture fleet (tests/support/fleet_fixtures.py: ten nodes,
eight with one planted outlier each) and on a mixed fleet of 9 nodes mid-upgrade (``write_mixed_fleet``:
58 node x setting differences, 5 distinct), whose 8-node part has no majority at all."""

from __future__ import annotations

import json
import re
import shutil

import pytest

from ibdiag.fabric.nodelist import expand
from ibdiag.report import hostlists
from ibdiag.report.hostlists import host_list
from tests.support.fleet_fixtures import MIXED_UPGRADED, host_of, write_mixed_fleet


@pytest.fixture(scope="module")
def mixed(tmp_path_factory):
    from tests.support.cli import run_cli

    return write_mixed_fleet(tmp_path_factory.mktemp("mixed"), run_cli)


def _doc(cli, *inputs):
    res = cli("report", *inputs, "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    return json.loads(res.stdout)


def _outlier_rows(html: str) -> list[str]:
    section = html[html.index("<h2>Configuration outliers</h2>") :]
    table = section[: section.index("</table>")]
    return re.findall(r"<tr><td.*?</tr>", table)


def test_a_mixed_fleet_of_nine_gives_one_row_per_difference(cli, mixed):
    doc = _doc(cli, mixed)
    assert len(doc["outliers"]) == 58  # node x setting: what the page listed row by row before
    rows = {(g["node_list"], g["key"]): g for g in doc["outlier_groups"]}
    adapters = host_list(f"mlx5_{i}" for i in range(12))
    upgraded = host_list(MIXED_UPGRADED)
    assert sorted(rows) == sorted(
        [
            (upgraded, "NVIDIA driver"),
            (upgraded, "kernel"),
            (upgraded, f"{adapters} driver"),
            ("gpu02", "mlx5_3 firmware"),
            ("gpu04", "mlx5_8:1 rate"),
        ]
    )
    driver = rows[(upgraded, f"{adapters} driver")]
    assert driver["nodes"] == list(MIXED_UPGRADED) and expand(driver["node_list"]) == list(
        MIXED_UPGRADED
    )
    assert sorted(driver["keys"]) == sorted(f"mlx5_{i} driver" for i in range(12))
    assert (driver["value"], driver["majority"], driver["majority_hosts"], driver["hosts"]) == (
        "mlx5_core 24.10-1.1.4",
        "mlx5_core 24.07-0.6.1",
        5,
        9,
    )
    # every node x setting of the old list is in exactly one group
    covered = [(n, k) for g in doc["outlier_groups"] for n in g["nodes"] for k in g["keys"]]
    assert sorted(covered) == sorted((o["host"], o["key"]) for o in doc["outliers"])
    # the most widespread difference first
    assert [len(g["nodes"]) for g in doc["outlier_groups"]] == [4, 4, 4, 1, 1]

    page = cli("report", mixed, "-o", "html").stdout
    html_rows = _outlier_rows(page)
    assert len(html_rows) == 5
    assert any(
        f'<td class="hostlist">{upgraded} (4 nodes)</td><td>{adapters} driver</td>' in r
        for r in html_rows
    )
    table = cli("report", mixed, env={"COLUMNS": "200"}).stdout
    part = table[table.index("Configuration outliers") :]
    part = part[: part.index("└")]
    assert part.count(f"{upgraded} (4 nodes)") == 3 and "gpu06 " not in part
    # each node's own finding names the 12 adapters once
    config = {f["subject"]: f["message"] for f in doc["findings"] if f["check"] == "report.config"}
    assert config["gpu07"].startswith("differs from the fleet's majority in 14 settings: ")
    assert f"{adapters} driver is mlx5_core 24.10-1.1.4 (5 of 9 nodes" in config["gpu07"]


def test_without_a_majority_the_split_names_who_has_which_value(cli, mixed, tmp_path):
    # gpu02-gpu05 against the upgraded gpu06-gpu09: four against four, no majority for the upgrade's
    # settings (each a split, one row per way the fleet divides); gpu02's firmware is 1 of 8.
    eight = tmp_path / "eight"
    shutil.copytree(mixed, eight)
    (eight / "gpu01.topo.json").unlink()
    doc = _doc(cli, eight)
    assert len(doc["splits"]) == 14
    groups = {g["key"]: g for g in doc["split_groups"]}
    adapters = host_list(f"mlx5_{i}" for i in range(12))
    assert sorted(groups) == sorted(["NVIDIA driver", "kernel", f"{adapters} driver"])
    kernel = {v["value"]: (v["hosts"], expand(v["node_list"])) for v in groups["kernel"]["values"]}
    assert kernel == {
        "5.15.0-1063-nvidia": (4, ["gpu02", "gpu03", "gpu04", "gpu05"]),
        "5.15.0-1071-nvidia": (4, list(MIXED_UPGRADED)),
    }
    assert [(g["node_list"], g["key"]) for g in doc["outlier_groups"]] == [
        ("gpu02", "mlx5_3 firmware"),
        ("gpu04", "mlx5_8:1 rate"),
    ]
    (fleet,) = [
        f for f in doc["findings"] if f["check"] == "report.config" and f["subject"] == "fleet"
    ]
    assert fleet["message"].startswith("14 settings without a majority value: ")
    assert f"5.15.0-1071-nvidia on 4 nodes ({host_list(MIXED_UPGRADED)})" in fleet["message"]
    assert len(_outlier_rows(cli("report", eight, "-o", "html").stdout)) == 5


def test_the_fixture_fleet_groups_its_planted_outliers(cli, fleet_dir):
    doc = _doc(cli, fleet_dir)
    groups = doc["outlier_groups"]
    assert len(doc["outliers"]) == 31 and len(groups) == 14
    by_host: dict[str, list[str]] = {}
    for g in groups:
        assert len(g["nodes"]) == 1  # each outlier planted on one node
        by_host.setdefault(g["node_list"], []).append(g["key"])
    assert by_host[host_of("ofed")] == [f"{host_list(f'mlx5_{i}' for i in range(12))} driver"]
    # the misplaced adapter renames those after it: the same swap on two adapters is one row each
    assert sorted(by_host[host_of("wrong-socket")]) == sorted(
        [
            "NCCL_IB_HCA",
            f"{host_list(['mlx5_3', 'mlx5_9'])} board",
            f"{host_list(['mlx5_3', 'mlx5_9'])}:1 link layer",
            f"{host_list(['mlx5_3', 'mlx5_9'])}:1 rate",
            f"{host_list(['mlx5_5', 'mlx5_11'])} board",
            f"{host_list(['mlx5_5', 'mlx5_11'])}:1 link layer",
            f"{host_list(['mlx5_5', 'mlx5_11'])}:1 rate",
        ]
    )
    assert len(_outlier_rows(cli("report", fleet_dir, "-o", "html").stdout)) == 14


def test_host_lists_with_python_hostlist_and_with_ibdiags_own(monkeypatch):
    names = ["gpu07", "gpu06", "gpu09", "gpu08", "gpu11", "login1"]
    ours = ["mlx5_3", "mlx5_9"]
    monkeypatch.setattr(hostlists, "_hostlist", None)
    assert hostlists.collector() == "ibdiag"
    assert host_list(names) == "gpu[06-09,11],login1"
    assert host_list(ours) == "mlx5_[3,9]"
    # a name a host list cannot hold is kept as it is, after the list
    assert host_list(["gpu01", "gpu02", "a[1]", "b,c"]) == "gpu[01-02],a[1],b,c"
    monkeypatch.undo()
    if hostlists.collector() == "ibdiag":
        pytest.skip("python-hostlist is not installed: ibdiag's collector is the one used")
    assert hostlists.collector().startswith("python-hostlist ")
    assert host_list(names) == "gpu[06-09,11],login1"
    # across digit widths (ibdiag's own collector keeps mlx5_[0-9],mlx5_[10-11] apart)
    assert host_list(f"mlx5_{i}" for i in range(12)) == "mlx5_[0-11]"
    assert expand("mlx5_[0-11]") == [f"mlx5_{i}" for i in range(12)]


@pytest.mark.parametrize("collector", ["python-hostlist", "ibdiag"])
def test_slurm_expands_every_host_list_the_report_writes(
    cli, mixed, tmp_path, monkeypatch, collector
):
    """Real ``scontrol show hostnames`` (Debian's slurm-client; it needs a slurm.conf, no daemon) reads
    each row's nodes and devices back to exactly the names grouped, from either collector."""
    import os
    import subprocess

    from tests.support.slurm import need_slurm

    need_slurm()
    if collector == "ibdiag":
        monkeypatch.setattr(hostlists, "_hostlist", None)
    elif hostlists.collector() == "ibdiag":
        pytest.skip("python-hostlist is not installed")
    conf = tmp_path / "slurm.conf"
    conf.write_text(
        "ClusterName=t\nSlurmctldHost=localhost\nNodeName=n1 CPUs=1 State=UNKNOWN\n"
        "PartitionName=p Nodes=n1 Default=YES\n"
    )
    env = {**os.environ, "SLURM_CONF": str(conf)}

    def scontrol(hostlist: str) -> list[str]:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", hostlist],
            capture_output=True,
            text=True,
            env=env,
            timeout=30,
            check=True,
        )
        return out.stdout.split()

    eight = tmp_path / "eight"
    shutil.copytree(mixed, eight)
    (eight / "gpu01.topo.json").unlink()
    for inputs in (mixed, eight):
        doc = _doc(cli, inputs)
        for g in doc["outlier_groups"]:
            assert scontrol(g["node_list"]) == g["nodes"], g
            if len(g["keys"]) > 1:  # the devices of a merged setting: mlx5_[0-11] driver
                listed = g["key"].split(" ")[0].split(":")[0]
                devices = [k.split(" ")[0].split(":")[0] for k in g["keys"]]
                assert sorted(scontrol(listed)) == sorted(devices), g
        for g in doc["split_groups"]:
            for v in g["values"]:
                assert len(scontrol(v["node_list"])) == v["hosts"]
