"""The kernel's words: recorded kernel-log text (fixtures/kernlog) matched and joined to the sysfs
fixtures' GPU/NIC maps; the sources (a file, /dev/kmsg) read as the CLI reads them."""

from __future__ import annotations

import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from ibdiag.errors import InputError
from ibdiag.history.config import HistoryConfig
from ibdiag.history.kernlog import LINK_DOWN, events, parse_line
from ibdiag.history.kernsource import read_file, read_kernel_log, read_kmsg
from ibdiag.history.run import judge_kernel_log
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from tests.support.env import SYSFS_FIXTURES

KERNLOG = Path(__file__).resolve().parents[2] / "fixtures" / "kernlog"
#: Just after the journal fixture's last line.
NOW = datetime(2026, 12, 2, 11, 30, tzinfo=timezone.utc).timestamp()


def _judge(log: str, fixture: str, now_s: float = NOW, cfg: HistoryConfig | None = None):
    topo = discover(SysfsRoot(SYSFS_FIXTURES / fixture).check())
    findings, data = judge_kernel_log(str(KERNLOG / log), topo, cfg or HistoryConfig(), now_s=now_s)
    return {(f.check, f.subject): f for f in findings}, data


def test_line_shapes():
    assert parse_line("6,1502,86403456789,-;hello").uptime_s == pytest.approx(86403.456789)
    assert parse_line(" SUBSYSTEM=pci") is None
    iso = parse_line("2026-12-02T09:58:11+0000 h kernel: x")
    assert (
        iso.message == "x"
        and iso.epoch_s == datetime(2026, 12, 2, 9, 58, 11, tzinfo=timezone.utc).timestamp()
    )
    assert parse_line("[  812.204311] infiniband rxe0: set down").uptime_s == pytest.approx(
        812.204311
    )
    # A message with terminal escapes is matched on its text and never echoed raw.
    evs = list(
        events(
            [
                "mlx5_core 0000:47:00.0: mlx5_cmd_out_err:1:(pid 1): ACCESS_REG(0x805) op_mod(0x1) failed, status \x1b[2Jx(0x3)"
            ]
        )
    )
    assert evs and "\x1b" not in evs[0].detail


def test_flapping_cable_on_a_roce_node():
    found, data = _judge("roce-node-flapping-cable.journal.txt", "roce-node")
    link = found[("kernel.link", "mlx5_0:1")]
    assert link.severity.value == "fail" and link.value == 2
    assert "GPU0, GPU1" in link.message and "0000:47:00.0" in link.message
    assert "2026-12-02T10:40:02Z" in link.message
    assert (
        found[("kernel.module", "mlx5_0")].severity.value == "warn"
    )  # unplugged (and plugged back)
    hot = found[("kernel.module", "mlx5_2")]
    assert hot.severity.value == "fail" and "High Temperature" in hot.message
    assert found[("kernel.access_reg", "mlx5_2")].value == 12
    bw = found[("kernel.pcie_bandwidth", "mlx5_1")]
    assert "126.024 Gb/s available" in bw.message and "x8" in bw.message
    aer = found[("kernel.aer", "bridge 0000:41:00.0")]
    assert aer.severity.value == "warn" and "mlx5_0" in aer.message and "GPU0" in aer.message
    assert not [k for k in found if "0000:01:00.0" in k[1]]  # the NVMe's AER is not ours
    assert found[("kernel.log", "kernel log")].severity.value == "ok"
    kinds = [e["kind"] for e in data["events"]]
    assert kinds.count(LINK_DOWN) == 2 and kinds.count("access_reg") == 12


def test_a_saved_log_is_judged_over_its_own_last_day_and_recovers():
    # A day later the saved journal is still read over its own last 24 h (up to its last line), not
    # as "nothing in the last 24 h": its flaps stand, and the span says how old it is.
    found, data = _judge("roce-node-flapping-cable.journal.txt", "roce-node", now_s=NOW + 86400)
    assert found[("kernel.link", "mlx5_0:1")].severity.value == "fail"
    log = found[("kernel.log", "kernel log")]
    assert "before this run" in log.message and "up to its last line" in log.message
    assert data["span"]["last"] == "2026-12-02T11:21:00Z"
    # Quiet and up since 10:40:09 for more than the recovery window (to the log's end): recovered.
    found, _ = _judge(
        "roce-node-flapping-cable.journal.txt", "roce-node", cfg=HistoryConfig(recovery_hours=0.5)
    )
    link = found[("kernel.link", "mlx5_0:1")]
    assert (
        link.severity.value == "ok"
        and link.message.startswith("mlx5_0:1 (")
        and "recovered" in link.message
    )


def test_rxe_netdev_bounce():
    found, _ = _judge("rxe-node-netdev-bounce.dmesg.txt", "rxe-node")
    link = found[("kernel.link", "rxe0:1")]
    assert link.severity.value == "fail" and link.value == 3
    assert "812.2 s after boot" not in link.message and "962" not in link.message
    assert "960.5 s after boot" in link.message
    assert ("kernel.link", "rxe1:1") not in found


def test_bnxt_kmsg_records():
    found, data = _judge("bnxt-roce-link-and-aer.kmsg.txt", "bnxt-roce")
    assert found[("kernel.link", "bnxt_re0:1")].severity.value == "warn"
    assert found[("kernel.aer", "bnxt_re1")].severity.value == "fail"
    assert len(data["events"]) == 3


def test_sources(tmp_path):
    with pytest.raises(InputError, match="no such file|No such file"):
        read_kernel_log(str(tmp_path / "missing"))
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(InputError, match="not a regular file"):
        read_file(tmp_path / "fifo")  # opened non-blocking and refused: never hangs on a FIFO
    big = tmp_path / "big"
    with open(big, "w") as fh:
        fh.write("x" * 100 + "\n")
        fh.truncate(40 * 2**20)
        fh.seek(40 * 2**20)
        fh.write("\n[ 1.0] infiniband rxe0: set down\n")
    assert list(events(read_file(big).lines))  # the tail is what is read


def test_live_kmsg_returns_without_waiting():
    """/dev/kmsg on this machine, as root: read what is buffered and stop (no new message is waited
    for). Real kernel, real device; skipped where it cannot be opened."""
    if not os.access("/dev/kmsg", os.R_OK):
        pytest.skip("/dev/kmsg not readable here")
    try:
        text = read_kmsg()
    except PermissionError:
        pytest.skip("/dev/kmsg not readable here")
    assert text.source == "/dev/kmsg" and text.boot_epoch_s is not None
    assert all(
        parse_line(x) is None or parse_line(x).uptime_s is not None
        for x in text.lines[:50]
        if not x.startswith(" ")
    )


def test_cli_kernel_log_file(cli):
    res = cli(
        "topo",
        "--root",
        SYSFS_FIXTURES / "rxe-node",
        "--kernel-log",
        KERNLOG / "rxe-node-netdev-bounce.dmesg.txt",
        "-o",
        "json",
    )
    doc = json.loads(res.stdout)
    assert res.exit_code == 1, res.stderr
    assert any(f["check"] == "kernel.link" and f["subject"] == "rxe0:1" for f in doc["findings"])
    assert doc["kernel_log"]["source"].endswith("rxe-node-netdev-bounce.dmesg.txt")
    res = cli("counters", "--root", SYSFS_FIXTURES / "rxe-node", "--kernel-log", "/nonexistent/log")
    assert res.exit_code == 2 and "--kernel-log" in res.stderr


def test_live_log_with_a_root_is_refused(cli):
    res = cli("topo", "--root", SYSFS_FIXTURES / "rxe-node", "--kernel-log", "auto")
    assert res.exit_code == 2 and "--kernel-log FILE" in res.stderr


def test_ice_link_lines_for_irdma():
    # ice_print_link_msg (drivers/net/ethernet/intel/ice/ice_main.c): irdma's netdev says it, not irdma.
    down, up = events(
        [
            "[ 50.1] ice 0000:51:00.0 ens2f0: NIC Link is Down",
            "[ 52.9] ice 0000:51:00.0 ens2f0: NIC Link is up 100 Gbps Full Duplex, Requested FEC: RS-FEC, "
            "Negotiated FEC: RS-FEC, Autoneg Advertised: On, Autoneg Negotiated: True, Flow Control: None",
        ]
    )
    assert (down.kind, down.pci, down.name) == (LINK_DOWN, "0000:51:00.0", "ens2f0")
    assert up.kind == "link_up"
