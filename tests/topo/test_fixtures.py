"""`ibdiag topo` on the bundled fixture trees: matrices exactly as their READMEs say, findings per fault."""

import json
import re

import pytest

from ibdiag.findings.model import Severity
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.config import PortsConfig
from ibdiag.topo.checks import TopoConfig, check_topology
from ibdiag.topo.views import matrix_text
from tests.support.env import SYSFS_FIXTURES

PROFILES = [
    "dgx-h100",
    "dgx-h100-faulty",
    "roce-node",
    "vm-no-rdma",
    "hgx-4switch",
    "hgx-dualport",
    "epyc-nps2",
    "gpu-no-mlx5",
    "roce-lossless",
]


def readme_matrix(name: str) -> str:
    text = (SYSFS_FIXTURES / name / "README.md").read_text()
    m = re.search(r"## Expected `ibdiag topo` matrix\s*```text\n(.*?)```", text, re.S)
    assert m, f"{name}/README.md has no expected matrix block"
    return m.group(1).rstrip("\n")


@pytest.mark.parametrize("name", PROFILES)
def test_matrix_matches_readme(name):
    topo = discover(SysfsRoot(SYSFS_FIXTURES / name).check())
    assert matrix_text(topo) == readme_matrix(name)


def findings(name, config=TopoConfig(), ports=PortsConfig()):
    topo = discover(SysfsRoot(SYSFS_FIXTURES / name))
    return topo, check_topology(topo, config, ports)


def test_healthy_dgx_has_no_problem():
    topo, out = findings("dgx-h100")
    assert [f for f in out if f.severity is not Severity.OK] == []
    assert len(topo.gpus) == 8 and len(topo.adapters) == 12 and len(topo.nvswitches) == 4
    assert topo.gdr.state == "nvidia_peermem" and topo.gdr.nvidia_driver == "550.90.07"
    assert [p.nearest for p in topo.pairings] == [(f"mlx5_{i}",) for i in (0, 1, 2, 3, 6, 7, 8, 9)]
    assert all(p.gdr for p in topo.pairings)
    assert (
        topo.nccl_ib_hca
        == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"
    )
    # GPUs numbered in PCI order (NVML's), NUMA node and CPU list from sysfs
    assert [g.pci.address for g in topo.gpus][:2] == ["0000:18:00.0", "0000:29:00.0"]
    assert topo.gpus[4].pci.numa_node == 1
    assert topo.gpus[0].pci.bridges == ("0000:15:01.0", "0000:16:00.0", "0000:17:00.0")
    mlx5_4 = topo.adapter("mlx5_4")
    port = mlx5_4.ports[0]
    assert (
        port.link_layer == "Ethernet"
        and port.netdev == "enp90s0f0np0"
        and port.gid_types == ("IB/RoCE v1", "RoCE v2")
    )
    ib = topo.adapter("mlx5_0").ports[0]
    assert (ib.rate_gbps, ib.lanes, ib.lane_speed, ib.lid, ib.netdev) == (
        400.0,
        4,
        "NDR",
        0x10,
        "ibp25s0",
    )


def test_faulty_dgx_one_finding_per_planted_fault():
    _, out = findings("dgx-h100-faulty")
    problems = sorted(
        (f.severity.value, f.check, f.subject) for f in out if f.severity is not Severity.OK
    )
    assert problems == [
        ("fail", "port.rate", "mlx5_7:1"),
        ("fail", "port.state", "mlx5_10:1"),
        ("fail", "topo.pcie_width", "mlx5_6"),
        ("warn", "topo.gdr_module", "node"),
        ("warn", "topo.gpu_nic_path", "GPU2/mlx5_0"),
    ]
    by_check = {f.check: f for f in out if f.severity is not Severity.OK}
    assert by_check["topo.pcie_width"].value == 8 and by_check["topo.pcie_width"].limit == 16
    assert by_check["port.rate"].value == 200.0 and by_check["port.rate"].limit == 400.0
    assert "Polling" in by_check["port.state"].message and "cable" in by_check["port.state"].hint


def test_roce_node_paths_and_gids():
    topo, out = findings("roce-node")
    warns = sorted(f.subject for f in out if f.severity is Severity.WARN)
    assert warns == ["GPU2/mlx5_2", "GPU3/mlx5_2"]
    assert not [f for f in out if f.severity is Severity.FAIL]
    assert topo.gdr.state == "nv_peer_mem"
    assert [p.path.value for p in topo.pairings] == ["PXB", "PXB", "PHB", "PHB"]
    port = topo.adapter("mlx5_0").ports[0]
    v2_mapped = [g for g in port.gids if g.type == "RoCE v2" and g.is_ipv4_mapped]
    assert [g.index for g in v2_mapped] == [3] and v2_mapped[0].netdev == "enp71s0f0np0"


def test_vm_without_rdma_says_so():
    topo, out = findings("vm-no-rdma")
    assert topo.gpus == () and topo.adapters == ()
    assert all(f.severity is Severity.OK for f in out)
    assert any(f.check == "topo.adapters" and "no RDMA adapter" in f.message for f in out)


def test_config_expectations_turn_absence_into_failure():
    _, out = findings("vm-no-rdma", TopoConfig(expect_adapters=8, expect_gpus=8))
    failed = {f.check for f in out if f.severity is Severity.FAIL}
    assert failed == {"topo.adapters", "topo.gpus"}


def test_config_expected_rate_and_ignore():
    _, out = findings("dgx-h100", ports=PortsConfig(expected_rate_gbps=800))
    slow = [f for f in out if f.check == "port.rate" and f.severity is Severity.FAIL]
    assert len(slow) == 12  # every port is below 800 Gb/s
    _, out = findings("dgx-h100-faulty", ports=PortsConfig(ignore=("mlx5_10", "mlx5_7")))
    assert {f.subject for f in out if f.severity is Severity.FAIL} == {"mlx5_6"}


def test_gdr_level_config_changes_pairing():
    topo = discover(
        SysfsRoot(SYSFS_FIXTURES / "roce-node"),
        gdr_level=TopoConfig(gdr_level="PHB").gdr_path_class,
    )
    assert all(p.gdr for p in topo.pairings)


@pytest.mark.parametrize(
    "name, code",
    [
        ("dgx-h100", 0),
        ("dgx-h100-faulty", 1),
        ("roce-node", 0),
        ("vm-no-rdma", 0),
        ("hgx-4switch", 0),
        ("hgx-dualport", 0),
        ("epyc-nps2", 1),
        ("gpu-no-mlx5", 0),
    ],
)
def test_cli_exit_codes_and_json(cli, name, code):
    res = cli("topo", "--root", SYSFS_FIXTURES / name, "-o", "json")
    assert res.exit_code == code, res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "ibdiag.topo/1"
    for key in (
        "version",
        "host",
        "generated_at",
        "status",
        "findings",
        "gpus",
        "adapters",
        "paths",
        "gdr",
    ):
        assert key in doc
    if doc["gpus"]:
        assert set(doc["gpus"][0]) >= {"index", "pci", "numa_node", "link"}
    if doc["adapters"]:
        a = doc["adapters"][0]
        assert set(a) >= {"name", "pci", "numa_node", "fw_ver", "ports"}
        assert set(a["ports"][0]) >= {
            "port",
            "state",
            "phys_state",
            "rate_gbps",
            "link_layer",
            "netdev",
        }
    if doc["paths"]:
        assert set(doc["paths"][0]) == {"gpu", "adapter", "path"}


def test_json_host_comes_from_the_fixture_manifest(cli):
    doc = json.loads(cli("topo", "--root", SYSFS_FIXTURES / "dgx-h100", "-o", "json").stdout)
    assert doc["host"] == "dgx-h100-01"
    assert doc["status"] == "ok"
    assert doc["nccl_ib_hca"].startswith("=mlx5_0:1,")
