"""PCIe AER counters (aer_dev_*) over the history: absolute since boot, increases between records,
correctable bursts on a GPU-NIC path, a reboot between records; read through --history end to end."""

from __future__ import annotations

import json
import time

from ibdiag.findings.model import Severity
from ibdiag.history.aer import aer_stories
from ibdiag.history.checks import check_aer
from ibdiag.history.config import HistoryConfig
from ibdiag.history.devices import device_map
from ibdiag.history.model import Record
from ibdiag.history.run import path_aer
from ibdiag.node.aer import parse_aer, read_aer
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from tests.sysfsgen.builder import Link, Tree, aer_files, zero_counters

NOW = time.time()
HOST = "aer-node-01"
NVIDIA, MELLANOX, BRCM = 0x10DE, 0x15B3, 0x1000
GEN5 = Link("32.0 GT/s PCIe", 16, "32.0 GT/s PCIe", 16)
ZERO = {"correctable": {}, "nonfatal": {}, "fatal": {}}


def _node(root) -> Tree:
    """GPU0 and mlx5_0 behind one PCIe switch (PXB), every function with AER counters at zero."""
    t = Tree(root)
    t.numa(0, "0-31")
    hb = t.host_bridge("0000:20")
    hb.numa, hb.cpulist = 0, "0-31"
    rp = hb.bridge("0000:20:01.0", link=GEN5, aer=ZERO)
    usp = rp.bridge("0000:21:00.0", vendor=BRCM, device=0xC030, link=GEN5, aer=ZERO)
    usp.bridge("0000:22:00.0", vendor=BRCM, device=0xC030, link=GEN5, aer=ZERO).add(
        "0000:23:00.0", vendor=NVIDIA, device=0x2330, cls=0x030200, link=GEN5, aer=ZERO
    )
    nic = usp.bridge("0000:22:01.0", vendor=BRCM, device=0xC030, link=GEN5, aer=ZERO).add(
        "0000:24:00.0", vendor=MELLANOX, device=0x1021, cls=0x020700, link=GEN5, aer=ZERO
    )
    ib = nic.rdma(
        "mlx5_0",
        fw_ver="28.39.1002",
        board_id="MT_0000000838",
        hca_type="MT4129",
        node_guid="0000:0000:0000:0001",
    )
    nic.netdev("ibp36s0")
    ib.port(1, counters=zero_counters())
    t.manifest(HOST, "aer test node")
    return t


def _set(t: Tree, address: str, **kinds) -> None:
    """Rewrite one function's aer_dev_* files, as the kernel's counters would read now."""
    for name, text in aer_files(**kinds).items():
        t.file(f"bus/pci/devices/{address}/{name}", text)


def _record(root, at_s: float) -> Record:
    sysfs = SysfsRoot(root).check()
    return Record(at_s, HOST, "topo", (), path_aer(sysfs, discover(sysfs)))


def test_generator_writes_the_kernel_format(tmp_path):
    t = _node(tmp_path)
    _set(t, "0000:24:00.0", correctable={"RxErr": 3, "BadTLP": 1})
    text = (tmp_path / "sys/bus/pci/devices/0000:24:00.0/aer_dev_correctable").read_text()
    assert text.startswith("RxErr 3\nBadTLP 1\nBadDLLP 0\n") and text.endswith("TOTAL_ERR_COR 4\n")
    assert parse_aer(text)["TOTAL_ERR_COR"] == 4
    a = read_aer(SysfsRoot(tmp_path).check(), "0000:24:00.0")
    assert a.total("correctable") == 4 and a.total("fatal") == 0
    assert parse_aer("RxErr x\n") is None


def test_correctable_burst_on_the_gpu_nic_path_warns(tmp_path):
    t = _node(tmp_path)
    recs = [_record(tmp_path, NOW - 3 * 3600)]
    _set(t, "0000:21:00.0", correctable={"RxErr": 40, "BadDLLP": 2})  # the switch above both
    _set(t, "0000:24:00.0", correctable={"RxErr": 5})  # the NIC
    recs.append(_record(tmp_path, NOW - 2 * 3600))
    # Rebooted: the counters start again from zero, then count 1 more on the NIC.
    _set(t, "0000:21:00.0")
    _set(t, "0000:24:00.0", correctable={"RxErr": 1})
    recs.append(_record(tmp_path, NOW))
    sysfs = SysfsRoot(tmp_path).check()
    devices = device_map(discover(sysfs))
    stories = {s.device: s for s in aer_stories(recs, since_s=NOW - 86400)}
    assert stories["0000:21:00.0"].increase == {"correctable": 42}
    assert stories["0000:24:00.0"].increase == {"correctable": 6}  # 5, then 1 after the reboot
    assert stories["0000:24:00.0"].resets == 1
    found = {
        (f.check, f.subject): f
        for f in check_aer(tuple(stories.values()), devices, HistoryConfig())
    }
    bridge = found[("history.aer", "bridge 0000:21:00.0")]
    assert (
        bridge.severity is Severity.WARN and "GPU0" in bridge.message and "mlx5_0" in bridge.message
    )
    assert "RxErr +40" in bridge.message
    nic = found[("history.aer", "mlx5_0")]
    assert nic.severity is Severity.WARN
    assert found[("history.aer_total", "mlx5_0")].severity is Severity.OK  # 1 since boot
    assert ("history.aer_total", "bridge 0000:21:00.0") not in found  # none since the reboot
    assert ("history.aer", "GPU0") not in found


def test_uncorrectable_fails_and_cli_records_aer(cli, tmp_path):
    root = tmp_path / "n"
    t = _node(root)
    store = tmp_path / "store"
    res = cli("topo", "--root", root, "--history", store, "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    rec = json.loads(next(store.iterdir()).read_text())
    assert {a["device"] for a in rec["aer"]} == {
        "0000:20:01.0",
        "0000:21:00.0",
        "0000:22:00.0",
        "0000:22:01.0",
        "0000:23:00.0",
        "0000:24:00.0",
    }
    _set(t, "0000:23:00.0", nonfatal={"CmpltTO": 1})
    time.sleep(0.01)
    res = cli("counters", "--root", root, "--history", store, "-o", "json")
    doc = json.loads(res.stdout)
    found = {(f["check"], f["subject"]): f for f in doc["findings"]}
    assert found[("history.aer", "GPU0")]["severity"] == "fail"
    assert found[("history.aer_total", "GPU0")]["severity"] == "warn"
    assert res.exit_code == 1
    gpu = next(a for a in doc["history"]["aer"] if a["pci"] == "0000:23:00.0")
    assert gpu["increase"] == {"nonfatal": 1} and gpu["bits"] == {"CmpltTO": 1}


def test_prom_metrics(cli, tmp_path):
    root = tmp_path / "n"
    t = _node(root)
    store = tmp_path / "store"
    cli("topo", "--root", root, "--history", store, "-o", "json")
    _set(t, "0000:21:00.0", correctable={"BadTLP": 7})
    res = cli("topo", "--root", root, "--history", store, "-o", "prom")
    assert 'ibdiag_history_aer_errors{pci="0000:21:00.0",kind="correctable"} 7\n' in res.stdout
    assert (
        'ibdiag_pcie_aer_errors_since_boot{pci="0000:21:00.0",kind="correctable"} 7\n' in res.stdout
    )
