"""Every event kind and every line shape of fixtures/kernlog, judged as ``--kernel-log FILE`` judges
it: the expected findings per fixture (joined to the sysfs fixture named in its header where there is
one), and the control files that must raise nothing but ``kernel.log``."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from ibdiag.history.config import HistoryConfig
from ibdiag.history.run import judge_kernel_log
from ibdiag.node.discover import discover
from ibdiag.node.sysfs import SysfsRoot
from tests.support.env import FIXTURES, SYSFS_FIXTURES

KERNLOG = FIXTURES / "kernlog"

#: fixture -> (sysfs fixture or None, {(check, subject): severity}) — every finding but kernel.log.
EXPECTED: dict[str, tuple[str | None, dict[tuple[str, str], str]]] = {
    "dgx-h100-port-flapping.dmesg-T.txt": ("dgx-h100", {("kernel.link", "mlx5_4:1"): "fail"}),
    "roce-node-two-ports-down.messages.txt": (
        "roce-node",
        {("kernel.link", "mlx5_2:1"): "warn", ("kernel.link", "mlx5_3:1"): "warn"},
    ),
    "fleet-journal-one-outage-per-host.journal.txt": (
        None,
        {
            ("kernel.link", "gpu-a01/enp71s0f0np0"): "warn",
            ("kernel.link", "gpu-a02/enp71s0f0np0"): "warn",
            ("kernel.link", "gpu-a03/enp71s0f0np0"): "warn",
            ("kernel.link", "gpu-b04/ens2f0"): "warn",
            ("kernel.link", "gpu-c02/ens2f0np0"): "warn",
        },
    ),
    "dgx-h100-port-reinit.journal-short-precise.txt": (
        "dgx-h100",
        {("kernel.link", "mlx5_10:1"): "fail"},
    ),
    "roce-node-annotated-paste.txt": ("roce-node", {("kernel.link", "mlx5_0:1"): "fail"}),
    "cx3-node-link-down-and-command-timeout.dmesg.txt": (
        None,
        {("kernel.link", "eth2"): "warn", ("kernel.firmware", "0000:04:00.0"): "fail"},
    ),
    "dgx-h100-firmware-health.journal-json.txt": (
        "dgx-h100",
        {
            ("kernel.firmware", "mlx5_10"): "fail",
            ("kernel.firmware", "mlx5_11"): "warn",
            ("kernel.link", "mlx5_11:1"): "warn",
        },
    ),
    "roce-node-cable-errors-and-slot-power.syslog-rfc3339.txt": (
        "roce-node",
        {
            ("kernel.pcie_power", "mlx5_3"): "warn",
            ("kernel.module", "mlx5_3"): "fail",
            ("kernel.module", "mlx5_2"): "fail",
            ("kernel.link", "mlx5_2:1"): "warn",
        },
    ),
    "rxe-node-set-active-twice-per-bring-up.kmsg.txt": (
        "rxe-node",
        {("kernel.link", "rxe0:1"): "fail"},
    ),
    "control-app-qp-errors-and-cqe-flood.dmesg.txt": ("roce-node", {}),
    "control-boot-link-up-and-cable-plugged.journal.txt": ("roce-node", {}),
    "control-laptop-aer-and-office-nic.dmesg-T.txt": (None, {}),
}


def judge(name: str, profile: str | None, **kw: object):
    topo = None if profile is None else discover(SysfsRoot(SYSFS_FIXTURES / profile).check())
    findings, data = judge_kernel_log(
        str(KERNLOG / name),
        topo,
        HistoryConfig(),
        now_s=kw.pop("now_s", time.time()),
        **kw,  # type: ignore[arg-type]
    )
    return {(f.check, f.subject): f for f in findings}, data


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_fixture_findings(name: str) -> None:
    profile, expected = EXPECTED[name]
    found, data = judge(name, profile)
    log = found.pop(("kernel.log", "kernel log"))
    assert log.severity.value == "ok", log.message
    assert {k: f.severity.value for k, f in found.items()} == expected, [
        f.message for f in found.values()
    ]
    for f in found.values():
        assert "on " in f.message or not data["span"]["hosts"], f.message  # the host is named
    assert data["span"]["kernel_lines"] > 0 and data["span"]["judged_lines"] > 0


def test_every_fixture_is_listed_here_and_in_the_readme() -> None:
    readme = (KERNLOG / "README.md").read_text()
    names = {p.name for p in KERNLOG.glob("*.txt")}
    assert names - {
        "roce-node-flapping-cable.journal.txt",
        "rxe-node-netdev-bounce.dmesg.txt",
        "bnxt-roce-link-and-aer.kmsg.txt",
    } <= set(EXPECTED)
    assert all(f"`{n}`" in readme for n in names), sorted(
        n for n in names if f"`{n}`" not in readme
    )


def test_messages_name_what_the_kernel_said() -> None:
    found, _ = judge("dgx-h100-firmware-health.journal-json.txt", "dgx-h100")
    fw = found[("kernel.firmware", "mlx5_10")]
    assert "on dgx-b07" in fw.message and "Will cause a leak" in fw.message and fw.value == 5
    found, _ = judge("dgx-h100-port-reinit.journal-short-precise.txt", "dgx-h100")
    reinit = found[("kernel.link", "mlx5_10:1")]
    assert "3 re-initialisation(s)" in reinit.message and "link down(s)" not in reinit.message
    found, _ = judge("roce-node-cable-errors-and-slot-power.syslog-rfc3339.txt", "roce-node")
    assert "27 W" in found[("kernel.pcie_power", "mlx5_3")].message
    assert "powered down" in found[("kernel.module", "mlx5_3")].message
    assert "Bad or shorted cable" in found[("kernel.module", "mlx5_2")].message
    found, _ = judge("roce-node-annotated-paste.txt", "roce-node")
    assert "step 4100" not in found[("kernel.link", "mlx5_0:1")].message.split(";")[0]


def test_a_bring_up_announced_twice_is_one_bring_up() -> None:
    # The Soft-RoCE guests' kernel prints "set active" for NETDEV_UP and again for the carrier's
    # NETDEV_CHANGE milliseconds later: two downs and two ups, not two re-initialisations besides.
    found, data = judge("rxe-node-set-active-twice-per-bring-up.kmsg.txt", "rxe-node")
    link = found[("kernel.link", "rxe0:1")]
    assert link.value == 2 and "2 link down(s)" in link.message, link.message
    assert "re-initialisation" not in link.message and "infiniband rxe0: set down" in link.message
    kinds = [e["kind"] for e in data["events"] if e["name"] == "rxe0"]
    assert kinds.count("link_reinit") == 0 and kinds.count("link_up") == 5, kinds


def test_several_hosts_are_never_merged() -> None:
    found, data = judge("fleet-journal-one-outage-per-host.journal.txt", None)
    links = [f for (check, _), f in found.items() if check == "kernel.link"]
    assert len(links) == 5 and all(f.value == 1 for f in links)
    assert data["span"]["hosts"] == ["gpu-a01", "gpu-a02", "gpu-a03", "gpu-b04", "gpu-c02"]
    assert {e["host"] for e in data["events"]} == set(data["span"]["hosts"])
    # A host's own topology is not joined to other hosts' lines (the GPU/NIC map is one node's).
    found, _ = judge("fleet-journal-one-outage-per-host.journal.txt", "roce-node")
    assert ("kernel.link", "gpu-a01/enp71s0f0np0") in found and (
        "kernel.link",
        "mlx5_0:1",
    ) not in found


def test_through_the_command_line(cli) -> None:
    res = cli(
        "counters",
        "--root",
        SYSFS_FIXTURES / "dgx-h100",
        "--kernel-log",
        KERNLOG / "dgx-h100-port-flapping.dmesg-T.txt",
        "-o",
        "json",
    )
    assert res.exit_code == 1, res.stderr
    doc = json.loads(res.stdout)
    link = [f for f in doc["findings"] if f["check"] == "kernel.link"]
    assert [f["subject"] for f in link] == ["mlx5_4:1"] and link[0]["severity"] == "fail"
    assert doc["kernel_log"]["span"]["first"] == "2026-12-01T02:58:17Z"
    res = cli(
        "topo",
        "--root",
        SYSFS_FIXTURES / "roce-node",
        "--kernel-log",
        KERNLOG / "control-boot-link-up-and-cable-plugged.journal.txt",
        "-o",
        "json",
    )
    doc = json.loads(res.stdout)
    assert not [
        f
        for f in doc["findings"]
        if f["check"].startswith("kernel.") and f["check"] != "kernel.log"
    ]


def test_a_file_that_is_no_kernel_log_says_so(tmp_path: Path) -> None:
    other = tmp_path / "nccl.log"
    other.write_text(
        "node1:880:880 [0] NCCL INFO Bootstrap : Using eth0:172.17.0.2<0>\nNCCL version 2.20.5+cuda12.4\n"
    )
    findings, data = judge_kernel_log(str(other), None, HistoryConfig(), now_s=time.time())
    assert [(f.check, f.severity.value) for f in findings] == [("kernel.log", "warn")]
    assert "no line has a time" in findings[0].message and data["span"]["clock"] == "none"


def test_the_window_options_narrow_the_log_on_the_command_line(cli) -> None:
    """--kernel-log-since after the log's last line: nothing judged is a warning, never "0 events, ok";
    --kernel-log-window 1m keeps the last minute of the saved log (the second outage alone)."""
    log = KERNLOG / "dgx-h100-port-flapping.dmesg-T.txt"
    root = SYSFS_FIXTURES / "dgx-h100"
    res = cli(
        "topo",
        "--root",
        root,
        "--kernel-log",
        log,
        "--kernel-log-since",
        "2026-12-02T00:00Z",
        "-o",
        "json",
    )
    assert res.exit_code == 0, res.stderr
    doc = json.loads(res.stdout)
    log_finding = [f for f in doc["findings"] if f["check"] == "kernel.log"]
    assert log_finding and log_finding[0]["severity"] == "warn"
    assert not [f for f in doc["findings"] if f["check"] == "kernel.link"]
    res = cli(
        "topo", "--root", root, "--kernel-log", log, "--kernel-log-window", "1m", "-o", "json"
    )
    doc = json.loads(res.stdout)
    span = doc["kernel_log"]["span"]
    assert span["window_start"] == "2026-12-01T03:15:09Z" and span["skipped_before_window"] == 5
    assert [e["kind"] for e in doc["kernel_log"]["events"]] == ["link_down", "link_up"]
    res = cli("topo", "--root", root, "--kernel-log-window", "6h")
    assert res.exit_code == 2 and "--kernel-log" in res.stderr
    res = cli("topo", "--root", root, "--kernel-log", log, "--kernel-log-window", "6 weeks")
    assert res.exit_code == 2 and "hint:" in res.stderr
    res = cli("topo", "--root", root, "--kernel-log", log, "--kernel-log-since", "yesterday")
    assert res.exit_code == 2 and "ISO 8601" in res.stderr
