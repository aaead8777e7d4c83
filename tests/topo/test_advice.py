"""The advice `ibdiag topo` gives, on the real-matrix fixture shapes (issue 11, "Wrong advice").

Expected matrices and NCCL_IB_HCA values are written here by hand from each fixture's README drawing:
two GPUs and two adapters per PCIe switch (hgx-4switch), dual-port cards whose RDMA names are not in
PCI order (hgx-dualport), two NUMA nodes per socket (epyc-nps2), a GPU node whose mlx5 driver did not
load (gpu-no-mlx5). NCCL_IB_HCA is also read back the way NCCL reads it (tests/support/nccl_hca.py).
"""

import csv
import io
import json

import pytest

from ibdiag.findings.model import Severity
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo.checks import TopoConfig, check_topology
from ibdiag.topo.views import LEGEND, matrix_text
from tests.support import nccl_hca
from tests.support.env import SYSFS_FIXTURES
from tests.sysfsgen.builder import Tree, zero_counters


def topo_of(name):
    return discover(SysfsRoot(SYSFS_FIXTURES / name).check())


def nccl_opens(topo):
    """The ports NCCL would open with the NCCL_IB_HCA ibdiag printed for ``topo``."""
    ports = [(a.name, p.port, p.active) for a in topo.adapters for p in a.ports]
    return nccl_hca.selected(topo.nccl_ib_hca, ports)


def problems(findings):
    return sorted(
        (f.severity.value, f.check, f.subject) for f in findings if f.severity is not Severity.OK
    )


# --- the NCCL model itself -------------------------------------------------------------------------


def test_nccl_model_reads_prefixes_exact_names_and_ports_as_nccl_does():
    ports = [
        ("mlx5_1", 1, True),
        ("mlx5_10", 1, True),
        ("mlx5_11", 1, True),
        ("mlx4_0", 1, True),
        ("mlx4_0", 2, True),
        ("mlx5_2", 1, False),
    ]
    assert nccl_hca.selected("mlx5_1", ports) == [
        ("mlx5_1", 1),
        ("mlx5_10", 1),
        ("mlx5_11", 1),
    ]  # a prefix
    assert nccl_hca.selected("=mlx5_1", ports) == [("mlx5_1", 1)]
    assert nccl_hca.selected("=mlx4_0", ports) == [
        ("mlx4_0", 1),
        ("mlx4_0", 2),
    ]  # a bare name: every active port
    assert nccl_hca.selected("=mlx4_0:2,mlx5_2:1", ports) == [
        ("mlx4_0", 2)
    ]  # inactive ports are never opened
    assert nccl_hca.selected("^=mlx5_1", ports) == [
        ("mlx5_10", 1),
        ("mlx5_11", 1),
        ("mlx4_0", 1),
        ("mlx4_0", 2),
    ]
    assert nccl_hca.selected(None, ports) == [p[:2] for p in ports if p[2]]
    many = ",".join(f"d{i}" for i in range(40))
    assert len(nccl_hca.parse(many)[2]) == 32  # MAX_IB_DEVS


# --- item 1: every tied adapter port is in NCCL_IB_HCA and the pairing table -------------------------

HGX_4SWITCH_MATRIX = """\
      NIC0  NIC1  NIC2  NIC3  NIC4  NIC5  NIC6  NIC7  NIC8  NIC9  CPU Affinity   NUMA Affinity
GPU0  PIX   PIX   NODE  NODE  NODE  NODE  SYS   SYS   SYS   SYS   0-47,96-143    0
GPU1  PIX   PIX   NODE  NODE  NODE  NODE  SYS   SYS   SYS   SYS   0-47,96-143    0
GPU2  NODE  NODE  PIX   PIX   NODE  NODE  SYS   SYS   SYS   SYS   0-47,96-143    0
GPU3  NODE  NODE  PIX   PIX   NODE  NODE  SYS   SYS   SYS   SYS   0-47,96-143    0
GPU4  SYS   SYS   SYS   SYS   SYS   SYS   PIX   PIX   NODE  NODE  48-95,144-191  1
GPU5  SYS   SYS   SYS   SYS   SYS   SYS   PIX   PIX   NODE  NODE  48-95,144-191  1
GPU6  SYS   SYS   SYS   SYS   SYS   SYS   NODE  NODE  PIX   PIX   48-95,144-191  1
GPU7  SYS   SYS   SYS   SYS   SYS   SYS   NODE  NODE  PIX   PIX   48-95,144-191  1

NIC Legend:
""" + "\n".join(f"  NIC{i}: mlx5_{i}" for i in range(10))


def test_two_gpus_two_adapters_per_switch_all_eight_compute_ports():
    topo = topo_of("hgx-4switch")
    assert matrix_text(topo) == HGX_4SWITCH_MATRIX
    assert (
        topo.nccl_ib_hca
        == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"
    )
    # NCCL reading that value opens the eight compute ports and neither storage port
    assert nccl_opens(topo) == [(f"mlx5_{i}", 1) for i in (0, 1, 2, 3, 6, 7, 8, 9)]
    ties = {p.gpu: [f"{q.adapter}:{q.port}" for q in p.ports] for p in topo.pairings}
    assert ties == {
        0: ["mlx5_0:1", "mlx5_1:1"],
        1: ["mlx5_0:1", "mlx5_1:1"],
        2: ["mlx5_2:1", "mlx5_3:1"],
        3: ["mlx5_2:1", "mlx5_3:1"],
        4: ["mlx5_6:1", "mlx5_7:1"],
        5: ["mlx5_6:1", "mlx5_7:1"],
        6: ["mlx5_8:1", "mlx5_9:1"],
        7: ["mlx5_8:1", "mlx5_9:1"],
    }
    assert problems(check_topology(topo)) == []


def test_pairing_table_shows_every_tied_port_with_its_nic_column(cli):
    res = cli("topo", "--root", SYSFS_FIXTURES / "hgx-4switch", env={"COLUMNS": "250"})
    assert res.exit_code == 0, res.stderr
    gpu5 = next(line for line in res.stdout.splitlines() if "│ GPU5 " in line)
    assert "0000:ac:00.0" in gpu5 and "NIC6 mlx5_6:1, NIC7 mlx5_7:1" in gpu5 and "PIX" in gpu5
    assert "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1" in res.stdout
    doc = json.loads(cli("topo", "--root", SYSFS_FIXTURES / "hgx-4switch", "-o", "json").stdout)
    assert doc["pairings"][0]["ports"] == ["mlx5_0:1", "mlx5_1:1"] and doc["pairings"][0][
        "nearest"
    ] == ["mlx5_0", "mlx5_1"]
    assert (
        doc["nccl_ib_hca"]
        == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"
    )


def test_value_printed_on_one_line_whatever_the_width(cli):
    res = cli("topo", "--root", SYSFS_FIXTURES / "hgx-dualport", env={"COLUMNS": "60"})
    line = next(line for line in res.stdout.splitlines() if line.startswith("NCCL_IB_HCA"))
    assert line.endswith("=" + ",".join(f"mlx5_{i}:1" for i in range(16)))


# --- items 1 and 2: dual-port cards, names not in PCI order -------------------------------------------

HGX_DUALPORT_MATRIX = """\
      NIC0  NIC1  NIC2  NIC3  NIC4  NIC5  NIC6  NIC7  NIC8  NIC9  NIC10  NIC11  NIC12  NIC13  NIC14  NIC15  CPU Affinity    NUMA Affinity
GPU0  PIX   NODE  NODE  NODE  SYS   SYS   SYS   SYS   PIX   NODE  NODE   NODE   SYS    SYS    SYS    SYS    0-55,112-167    0
GPU1  NODE  PIX   NODE  NODE  SYS   SYS   SYS   SYS   NODE  PIX   NODE   NODE   SYS    SYS    SYS    SYS    0-55,112-167    0
GPU2  NODE  NODE  PIX   NODE  SYS   SYS   SYS   SYS   NODE  NODE  PIX    NODE   SYS    SYS    SYS    SYS    0-55,112-167    0
GPU3  NODE  NODE  NODE  PIX   SYS   SYS   SYS   SYS   NODE  NODE  NODE   PIX    SYS    SYS    SYS    SYS    0-55,112-167    0
GPU4  SYS   SYS   SYS   SYS   PIX   NODE  NODE  NODE  SYS   SYS   SYS    SYS    PIX    NODE   NODE   NODE   56-111,168-223  1
GPU5  SYS   SYS   SYS   SYS   NODE  PIX   NODE  NODE  SYS   SYS   SYS    SYS    NODE   PIX    NODE   NODE   56-111,168-223  1
GPU6  SYS   SYS   SYS   SYS   NODE  NODE  PIX   NODE  SYS   SYS   SYS    SYS    NODE   NODE   PIX    NODE   56-111,168-223  1
GPU7  SYS   SYS   SYS   SYS   NODE  NODE  NODE  PIX   SYS   SYS   SYS    SYS    NODE   NODE   NODE   PIX    56-111,168-223  1

NIC Legend:
""" + "\n".join(f"  NIC{i}: mlx5_{i}" for i in range(16))


def test_dual_port_cards_both_functions_and_nvidia_smi_numbering():
    topo = topo_of("hgx-dualport")
    assert matrix_text(topo) == HGX_DUALPORT_MATRIX
    every = [f"mlx5_{i}:1" for i in range(16)]
    assert topo.nccl_ib_hca == "=" + ",".join(every)
    assert nccl_opens(topo) == [(f"mlx5_{i}", 1) for i in range(16)]
    assert [f"{q.adapter}:{q.port}" for q in topo.pairings[2].ports] == ["mlx5_2:1", "mlx5_10:1"]
    # NIC1 is mlx5_1 (as nvidia-smi numbers it), though mlx5_8 has the next PCI address after mlx5_0
    assert (
        topo.adapter("mlx5_8").pci.address == "0000:19:00.1"
        and topo.adapter("mlx5_1").pci.address == "0000:2a:00.0"
    )
    assert (topo.nic_index("mlx5_1"), topo.nic_index("mlx5_8"), topo.nic_index("mlx5_10")) == (
        1,
        8,
        10,
    )


def test_machine_formats_carry_the_same_nic_index(cli):
    root = SYSFS_FIXTURES / "hgx-dualport"
    doc = json.loads(cli("topo", "--root", root, "-o", "json").stdout)
    assert [(a["nic_index"], a["name"]) for a in doc["adapters"]] == [
        (i, f"mlx5_{i}") for i in range(16)
    ]
    rows = list(csv.DictReader(io.StringIO(cli("topo", "--root", root, "-o", "csv").stdout)))
    gpu0 = {r["adapter"]: r for r in rows if r["gpu"] == "0"}
    assert (gpu0["mlx5_8"]["nic_index"], gpu0["mlx5_8"]["path"], gpu0["mlx5_8"]["nearest"]) == (
        "8",
        "PIX",
        "1",
    )
    assert (gpu0["mlx5_1"]["nic_index"], gpu0["mlx5_1"]["path"], gpu0["mlx5_1"]["nearest"]) == (
        "1",
        "NODE",
        "0",
    )


def _two_port_device(tmp_path, port2_state="4: ACTIVE", port2_layer="InfiniBand"):
    """A ConnectX-3-style dual-port card: one PCI function, one RDMA device (mlx4_0) with ports 1 and 2."""
    t = Tree(tmp_path)
    t.numa(0, "0-7")
    t.module("nvidia_peermem")
    hb = t.host_bridge("0000:10")
    hb.numa, hb.cpulist = 0, "0-7"
    usp = hb.bridge("0000:10:01.0").bridge("0000:11:00.0")
    usp.bridge("0000:12:00.0").add("0000:13:00.0", vendor=0x10DE, device=0x2330, cls=0x030200)
    dev = usp.bridge("0000:12:01.0").add("0000:14:00.0", vendor=0x15B3, device=0x1007, cls=0x020700)
    ib = dev.rdma(
        "mlx4_0",
        fw_ver="2.42.5000",
        board_id="MT_1090120019",
        hca_type="MT4099",
        node_guid="0002:c903:0001:0001",
    )
    ib.port(1, rate="56 Gb/sec (4X FDR)", counters=zero_counters())
    up = port2_state.startswith("4")
    ib.port(
        2,
        state=port2_state,
        phys_state="5: LinkUp" if up else "2: Polling",
        rate="56 Gb/sec (4X FDR)",
        link_layer=port2_layer,
        counters=zero_counters(),
    )
    return discover(SysfsRoot(tmp_path))


def test_two_port_device_lists_each_active_port(tmp_path):
    topo = _two_port_device(tmp_path / "a")
    assert topo.nccl_ib_hca == "=mlx4_0:1,mlx4_0:2"
    assert nccl_opens(topo) == [("mlx4_0", 1), ("mlx4_0", 2)]
    assert _two_port_device(tmp_path / "b", port2_state="1: DOWN").nccl_ib_hca == "=mlx4_0:1"
    # a VPI card with port 2 in Ethernet mode: that port is not on the GPUs' fabric
    assert _two_port_device(tmp_path / "c", port2_layer="Ethernet").nccl_ib_hca == "=mlx4_0:1"


def test_existing_fixtures_values():
    assert (
        topo_of("dgx-h100").nccl_ib_hca
        == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1,mlx5_6:1,mlx5_7:1,mlx5_8:1,mlx5_9:1"
    )
    faulty = topo_of("dgx-h100-faulty")
    # GPU2's rail is on the other socket: its nearest InfiniBand ports are the three NODE ones of socket 0
    # (the Ethernet storage ports mlx5_3/mlx5_4, NODE as well, are not the GPUs' fabric and stay out)
    assert [f"{q.adapter}:{q.port}" for q in faulty.pairings[2].ports] == [
        "mlx5_0:1",
        "mlx5_1:1",
        "mlx5_2:1",
    ]
    assert faulty.nccl_ib_hca == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_5:1,mlx5_6:1,mlx5_7:1,mlx5_8:1"
    # roce-node: GPU0/1 tie on both functions of the first card, GPU2/3 on both of the second
    roce = topo_of("roce-node")
    assert [p.nearest for p in roce.pairings] == [("mlx5_0", "mlx5_1")] * 2 + [
        ("mlx5_2", "mlx5_3")
    ] * 2
    assert roce.nccl_ib_hca == "=mlx5_0:1,mlx5_1:1,mlx5_2:1,mlx5_3:1"


def test_a_name_nccl_cannot_parse_is_left_out(tmp_path):
    t = Tree(tmp_path)
    t.numa(0, "0-7")
    hb = t.host_bridge("0000:10")
    hb.numa, hb.cpulist = 0, "0-7"
    usp = hb.bridge("0000:10:01.0").bridge("0000:11:00.0")
    usp.bridge("0000:12:00.0").add("0000:13:00.0", vendor=0x10DE, device=0x2330, cls=0x030200)
    for k, name in enumerate(("mlx5_0", "rail:1")):
        dev = usp.bridge(f"0000:12:0{k + 1}.0").add(
            f"0000:1{4 + k}:00.0", vendor=0x15B3, device=0x1021, cls=0x020700
        )
        dev.rdma(
            name, fw_ver="1", board_id="b", hca_type="MT4129", node_guid=f"0000:0000:0000:000{k}"
        ).port(1, counters=zero_counters())
    topo = discover(SysfsRoot(tmp_path))
    assert topo.pairings[0].nearest == ("mlx5_0", "rail:1")
    assert topo.nccl_ib_hca == "=mlx5_0:1"  # "rail:1:1" would read as device "rail", port 1


# --- item 4: SYS is "between NUMA nodes" -------------------------------------------------------------

EPYC_NPS2_MATRIX = """\
      NIC0  NIC1  CPU Affinity    NUMA Affinity
GPU0  PIX   SYS   0-31,128-159    0
GPU1  SYS   SYS   32-63,160-191   1
GPU2  SYS   PIX   64-95,192-223   2
GPU3  SYS   SYS   96-127,224-255  3

NIC Legend:
  NIC0: mlx5_0
  NIC1: mlx5_1"""


def test_two_numa_nodes_per_socket():
    topo = topo_of("epyc-nps2")
    assert [n.node for n in topo.numa_nodes] == [0, 1, 2, 3]
    assert matrix_text(topo) == EPYC_NPS2_MATRIX
    assert topo.nccl_ib_hca == "=mlx5_0:1,mlx5_1:1"
    out = check_topology(topo)
    assert problems(out) == [
        ("fail", "topo.gpu_nic_path", "GPU1/mlx5_0"),
        ("fail", "topo.gpu_nic_path", "GPU3/mlx5_0"),
    ]
    gpu1 = next(f for f in out if f.subject == "GPU1/mlx5_0")
    assert (
        "between NUMA nodes" in gpu1.message
        and "GPU on NUMA node 1, adapter on NUMA node 0, 2" in gpu1.message
    )
    assert "socket" not in gpu1.message  # mlx5_0 is on GPU1's own socket
    assert "between NUMA nodes" in LEGEND and "inter-socket" not in LEGEND


def test_sys_wording_in_the_table(cli):
    res = cli("topo", "--root", SYSFS_FIXTURES / "epyc-nps2", env={"COLUMNS": "250"})
    assert res.exit_code == 1
    assert "SYS = PCIe plus the SMP interconnect between NUMA nodes" in res.stdout
    assert "inter-socket" not in res.stdout


# --- item 5: a GPU node without adapters; expectations on the command line ----------------------------

NO_MLX5_MATRIX = "      CPU Affinity    NUMA Affinity\n" + "\n".join(
    f"GPU{i}  {'0-55,112-167  ' if i < 4 else '56-111,168-223'}  {0 if i < 4 else 1}"
    for i in range(8)
)


def test_gpu_node_without_adapters_warns_and_names_the_functions():
    topo = topo_of("gpu-no-mlx5")
    assert matrix_text(topo) == NO_MLX5_MATRIX
    assert topo.adapters == () and topo.nccl_ib_hca is None
    assert (
        topo.functions_without_rdma[:2] == ("0000:19:00.0", "0000:2a:00.0")
        and len(topo.functions_without_rdma) == 12
    )
    out = check_topology(topo)
    assert problems(out) == [("warn", "topo.adapters", "node")]
    (f,) = [f for f in out if f.check == "topo.adapters"]
    assert (
        "8 GPU(s) but no RDMA adapter" in f.message
        and "12 Mellanox PCI function(s)" in f.message
        and "mlx5_ib" in f.hint
    )
    assert problems(check_topology(topo, TopoConfig(expect_adapters=8))) == [
        ("fail", "topo.adapters", "node")
    ]


def test_node_without_gpus_or_adapters_stays_quiet():
    assert problems(check_topology(topo_of("vm-no-rdma"))) == []


@pytest.mark.parametrize(
    "args, code, failing",
    [
        ((), 0, []),
        (("--strict",), 1, []),
        (("--expect-adapters", "8"), 1, ["topo.adapters"]),
        (("--expect-adapters", "0"), 0, []),
    ],
)
def test_expect_adapters_flag(cli, args, code, failing):
    res = cli("topo", "--root", SYSFS_FIXTURES / "gpu-no-mlx5", "-o", "json", *args)
    assert res.exit_code == code, res.stderr
    doc = json.loads(res.stdout)
    assert [f["check"] for f in doc["findings"] if f["severity"] == "fail"] == failing
    if failing:
        (f,) = [f for f in doc["findings"] if f["severity"] == "fail"]
        assert (f["value"], f["limit"]) == (0, 8)


def test_counters_on_a_node_without_adapters_cannot_run(cli):
    res = cli("counters", "--root", SYSFS_FIXTURES / "gpu-no-mlx5")
    assert res.exit_code == 3 and "no RDMA port" in res.stderr


def test_flags_override_the_config_file(cli, tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text("[ports]\nexpected_rate_gbps = 200\n[topo]\nexpect_adapters = 2\n")
    root = SYSFS_FIXTURES / "hgx-4switch"
    doc = json.loads(cli("topo", "--root", root, "--config", cfg, "-o", "json").stdout)
    assert doc["status"] == "ok"
    res = cli(
        "topo",
        "--root",
        root,
        "--config",
        cfg,
        "--expect-rate",
        "400",
        "--expect-adapters",
        "11",
        "-o",
        "json",
    )
    assert res.exit_code == 1
    fails = {
        (f["check"], f["subject"]): f
        for f in json.loads(res.stdout)["findings"]
        if f["severity"] == "fail"
    }
    # the storage ports run at 200 Gb/s: --expect-rate 400 is every port's expectation now
    assert set(fails) == {
        ("topo.adapters", "node"),
        ("port.rate", "mlx5_4:1"),
        ("port.rate", "mlx5_5:1"),
    }
    assert (
        "(--expect-rate)" in fails[("port.rate", "mlx5_4:1")]["message"]
        and fails[("topo.adapters", "node")]["limit"] == 11
    )


def test_counters_expect_rate(cli):
    root = SYSFS_FIXTURES / "hgx-4switch"
    assert cli("counters", "--root", root).exit_code == 0
    res = cli("counters", "--root", root, "--expect-rate", "400", "-o", "json")
    assert res.exit_code == 1
    failing = sorted(
        f["subject"] for f in json.loads(res.stdout)["findings"] if f["severity"] == "fail"
    )
    assert failing == ["mlx5_4:1", "mlx5_5:1"]


@pytest.mark.parametrize(
    "command, flag, value, why",
    [
        ("topo", "--expect-rate", "nan", "--expect-rate nan is not a finite number"),
        ("topo", "--expect-rate", "inf", "--expect-rate inf is not a finite number"),
        ("topo", "--expect-rate", "5000", "--expect-rate 5000 must be at most 2400"),
        ("topo", "--expect-rate", "0", "--expect-rate 0 must be above 0"),
        ("counters", "--expect-rate", "-400", "--expect-rate -400 must be above 0"),
        ("topo", "--expect-adapters", "-1", "--expect-adapters -1 must not be negative"),
    ],
)
def test_bad_flag_values_are_usage_errors(cli, command, flag, value, why):
    res = cli(command, "--root", SYSFS_FIXTURES / "hgx-4switch", flag, value)
    assert res.exit_code == 2
    assert f"ibdiag: error: {why}" in res.stderr and "hint:" in res.stderr
