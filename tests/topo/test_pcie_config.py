"""PCIe settings on GPU-adapter paths: ACS redirect, IOMMU mode, ATS, MPS, MRRS, from config-space blobs the
fixture generator writes; each misconfiguration gives exactly its finding; the blobs are checked against
the real lspci, and the parser against this machine's own config files."""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from ibdiag.findings.model import Severity
from ibdiag.node import dcb
from ibdiag.node.discover import discover
from ibdiag.node.pcicfg import ACS_CR, ACS_RR, parse_config
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.topo.configuration import check_configuration, read_configuration
from ibdiag.topo.nccl_env import from_environ
from tests.support.env import SYSFS_FIXTURES, need_tool
from tests.sysfsgen.builder import Tree
from tests.sysfsgen.pcicfg import ACS_LINUX_ENABLES, DOWNSTREAM, config_space
from tests.sysfsgen.profiles import roce_lossless

JOB = {"NCCL_IB_TC": "106"}
PCIE_CHECKS = ("topo.pcie_acs", "topo.iommu", "topo.pcie_mps", "topo.pcie_mrrs")


def judge(root):
    sysfs = SysfsRoot(root)
    topo = discover(sysfs)
    config = read_configuration(sysfs, topo, from_environ(JOB), lambda n: dcb.read_saved(root, n))
    return config, check_configuration(topo, config)


def build(tmp_path, **change):
    roce_lossless.build(Tree(tmp_path), **change)
    return tmp_path


def problems(findings):
    return sorted(
        (f.severity.value, f.check, f.subject) for f in findings if f.severity is not Severity.OK
    )


NICS, GPUS = ("0000:19:00.0", "0000:9b:00.0"), ("0000:18:00.0", "0000:9a:00.0")

MISTAKES = {
    "acs_redirect_on_the_adapters_switch_port": (
        {"acs_redirect": ("0000:17:01.0",)},
        [("fail", "topo.pcie_acs", "GPU0/mlx5_0")],
        "off",
    ),
    "acs_redirect_on_the_gpus_switch_port": (
        {"acs_redirect": ("0000:99:00.0",)},
        [("fail", "topo.pcie_acs", "GPU1/mlx5_1")],
        "off",
    ),
    "iommu_translating": (
        {"iommu": "DMA-FQ"},
        [("warn", "topo.iommu", f"adapter {a}") for a in NICS]
        + [("warn", "topo.iommu", f"gpu {g}") for g in GPUS],
        "identity",
    ),
    "adapter_mps_above_its_switch": (
        {"nic_mps": 512},
        [("fail", "topo.pcie_mps", f"adapter {a}") for a in NICS],
        256,
    ),
    "adapter_mrrs_tiny": (
        {"nic_mrrs": 256},
        [("warn", "topo.pcie_mrrs", f"adapter {a}") for a in NICS],
        4096,
    ),
}


@pytest.mark.parametrize("name", sorted(MISTAKES))
def test_each_mistake_gives_exactly_its_finding(tmp_path, name):
    change, expected, fits = MISTAKES[name]
    _, out = judge(build(tmp_path, **change))
    assert problems(out) == sorted(expected)
    for f in out:
        if f.severity is not Severity.OK:
            assert f.limit == fits and f.hint, (f.message, f.limit)


def test_acs_message_names_the_port_and_the_kernel_parameter(tmp_path):
    _, out = judge(build(tmp_path, acs_redirect=("0000:17:00.0", "0000:17:01.0")))
    (f,) = [f for f in out if f.severity is Severity.FAIL]
    assert "0000:17:00.0 (ReqRedir,CmpltRedir)" in f.message
    assert "pci=disable_acs_redir=0000:17:00.0;0000:17:01.0" in f.hint


@pytest.mark.parametrize(
    "change",
    [
        {},  # the bundled node's settings
        {
            "acs_redirect": ("0000:15:01.0",)
        },  # a root port above the switch: not between GPU and adapter
        {"iommu": None},  # IOMMU off: no groups
        {"iommu": "identity", "ats": False},
    ],
)
def test_healthy_variants_give_none(tmp_path, change):
    _, out = judge(build(tmp_path, **change))
    assert [p for p in problems(out) if p[1] in PCIE_CHECKS] == []


def test_bundled_node_reports_what_it_read():
    config, out = judge(SYSFS_FIXTURES / "roce-lossless")
    assert problems(out) == []
    doc = config.pcie.to_json()
    assert doc["paths"][0] == {
        "gpu": 0,
        "adapter": "mlx5_0",
        "path": "PIX",
        "between": ["0000:17:00.0", "0000:17:01.0"],
    }
    nic = next(f for f in doc["functions"] if f["address"] == "0000:19:00.0")
    assert nic["config"] == {
        "mps": 256,
        "mps_supported": 512,
        "mrrs": 4096,
        "acs_ctrl": None,
        "ats_enabled": True,
        "extended_visible": True,
    }
    assert (nic["iommu_type"], nic["role"]) == ("identity", "adapter")


@pytest.mark.parametrize("size", [64, 0])
def test_config_not_visible_is_unknown(tmp_path, size):
    # 64 bytes: what `config` gives a reader that is not root; 0: no config file at all
    config, out = judge(
        build(tmp_path, config_bytes=size, acs_redirect=("0000:17:01.0",), nic_mrrs=128)
    )
    assert [p for p in problems(out) if p[1] in PCIE_CHECKS] == []
    assert [f for f in out if f.check == "topo.pcie_acs"] == []
    nic = config.pcie.function("0000:19:00.0")
    if size:
        assert (
            nic.config.extended is False and nic.config.mps is None and nic.config.acs_ctrl is None
        )
    else:
        assert nic.config is None


# --- the blobs against the real lspci, the parser against real config files ---------------------


def _dump(address: str, data: bytes) -> str:
    """``lspci -xxxx``'s text form of a configuration space, which ``lspci -F`` reads back."""
    rows = [
        f"{off:03x}: " + " ".join(f"{b:02x}" for b in data[off : off + 16])
        for off in range(0, len(data), 16)
    ]
    return f"{address} device\n" + "\n".join(rows) + "\n\n"


@pytest.mark.parametrize(
    "kw",
    [
        {"mps": 256, "mrrs": 4096, "ats_enabled": True},
        {"mps": 128, "mrrs": 512, "ats_enabled": False},
        {"port_type": DOWNSTREAM, "acs_ctrl": ACS_LINUX_ENABLES, "mps": 512, "mrrs": 128},
        {"port_type": DOWNSTREAM, "acs_ctrl": 0},
    ],
)
def test_blobs_decode_the_same_in_lspci(tmp_path, kw):
    lspci = need_tool("lspci")
    blob = config_space(0x15B3, 0x1021, 0x020000, **kw)
    dump = tmp_path / "dump"
    dump.write_text(_dump("19:00.0", blob))
    text = subprocess.run(
        [lspci, "-F", str(dump), "-vvv"], capture_output=True, text=True, check=True
    ).stdout
    ours = parse_config(blob)
    m = re.search(r"MaxPayload (\d+) bytes, MaxReadReq (\d+) bytes", text)
    assert m and (int(m.group(1)), int(m.group(2))) == (ours.mps, ours.mrrs)
    acs = re.search(r"ACSCtl:\s+(.*)", text)
    if kw.get("acs_ctrl") is None:
        assert acs is None and ours.acs_ctrl is None
    else:
        on = {w[:-1] for w in acs.group(1).split() if w.endswith("+")}
        assert on == set(ours.acs_names())
        assert ours.acs_redirect == bool(kw["acs_ctrl"] & (ACS_RR | ACS_CR))
    ats = re.search(r"ATSCtl:\s+Enable([+-])", text)
    assert (ats.group(1) == "+" if ats else None) == ours.ats_enabled


def test_parser_agrees_with_lspci_on_this_machines_devices():
    """Every PCI function of the machine running the tests: what lspci says of its PCI Express
    capability (present or not, MaxPayload/MaxReadReq) is what parse_config reads from `config`."""
    lspci = need_tool("lspci")
    base = "/sys/bus/pci/devices"
    if not os.path.isdir(base):
        pytest.skip("no PCI bus here")
    for name in sorted(os.listdir(base))[:32]:
        with open(os.path.join(base, name, "config"), "rb") as fh:
            raw = fh.read()
        ours = parse_config(raw)
        text = subprocess.run(
            [lspci, "-s", name, "-vvv"], capture_output=True, text=True, check=False
        ).stdout
        m = re.search(r"DevCtl:.*?MaxPayload (\d+) bytes, MaxReadReq (\d+) bytes", text, re.S)
        if m and len(raw) >= 256:
            assert (int(m.group(1)), int(m.group(2))) == (ours.mps, ours.mrrs), name
        elif not m:
            assert ours.mrrs is None, name
