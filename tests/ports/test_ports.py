"""Port health: one judgement (``port.state``, ``port.rate``) and one ``[ports]`` table for topo, counters
and verdict; the old ``[topo]``/``[counters]`` keys still read, with a deprecation warning."""

from __future__ import annotations

import json
import shutil

import pytest

from ibdiag.config import load_config
from ibdiag.errors import InputError
from ibdiag.findings.model import Severity
from ibdiag.node.ports import node_ports
from ibdiag.node.sysfs import SysfsRoot
from ibdiag.ports.checks import check_ports
from ibdiag.ports.config import PortsConfig
from tests.support.env import SYSFS_FIXTURES

DGX = SYSFS_FIXTURES / "dgx-h100"
FAULTY = SYSFS_FIXTURES / "dgx-h100-faulty"
VERDICT = [
    "verdict",
    "--params",
    "8e9",
    "--dtype",
    "bf16",
    "--ranks",
    "512",
    "--compute-s",
    "2",
    "--busbw",
    "330",
]
ALL_PORTS = sorted(f"mlx5_{i}:1" for i in range(12))


def _slow(doc):
    return sorted(
        f["subject"]
        for f in doc["findings"]
        if f["check"] == "port.rate" and f["severity"] == "fail"
    )


@pytest.mark.parametrize(
    "toml, deprecated",
    [
        ("[topo]\nexpected_rate_gbps = 800\n", "[topo] expected_rate_gbps"),
        ("[counters]\nexpected_rate_gbps = 800\n", "[counters] expected_rate_gbps"),
        ("[ports]\nexpected_rate_gbps = 800\n", None),
    ],
)
def test_topo_counters_and_verdict_give_one_answer_for_a_port(cli, tmp_path, toml, deprecated):
    """Issue 13's first wrong answer: with [topo] expected_rate_gbps = 800, `ibdiag topo` failed the
    ports while `ibdiag counters` passed them on the same node, and verdict carried both."""
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text(toml)
    topo = cli("topo", "--root", DGX, "--config", cfg, "-o", "json")
    counters = cli("counters", "--root", DGX, "--config", cfg, "-o", "json")
    verdict = cli(*VERDICT, "--root", DGX, "--config", cfg, "-o", "json")
    assert topo.exit_code == counters.exit_code == verdict.exit_code == 1
    assert _slow(json.loads(topo.stdout)) == _slow(json.loads(counters.stdout)) == ALL_PORTS
    health = json.loads(verdict.stdout)["fabric_health"]
    in_verdict = [
        (f["check"], f["subject"]) for f in health["failing"] if f["check"].startswith("port.")
    ]
    assert in_verdict == [
        ("port.rate", p) for p in sorted(ALL_PORTS, key=lambda s: int(s[5:-2]))
    ]  # each port once
    f = next(f for f in json.loads(topo.stdout)["findings"] if f["check"] == "port.rate")
    assert (
        f["value"] == 400.0 and f["limit"] == 800.0 and "[ports] expected_rate_gbps" in f["message"]
    )
    for res in (topo, counters, verdict):
        if deprecated:
            assert (
                f"ibdiag: warning: config file {cfg}: {deprecated} is deprecated: it is read as [ports] expected_rate_gbps"
                in res.stderr
            )
        else:
            assert "warning" not in res.stderr


def test_expected_rate_per_pattern_and_peers(tmp_path):
    ports = node_ports(SysfsRoot(FAULTY))
    # Default: mlx5_7 (200 Gb/s) is slower than the fastest InfiniBand port; mlx5_10 is down.
    out = check_ports(ports, PortsConfig())
    assert sorted((f.check, f.subject) for f in out if f.severity is Severity.FAIL) == [
        ("port.rate", "mlx5_7:1"),
        ("port.state", "mlx5_10:1"),
    ]
    slow = next(f for f in out if f.subject == "mlx5_7:1" and f.check == "port.rate")
    assert "the fastest active InfiniBand port on this node" in slow.message and slow.limit == 400.0
    # A pattern expects mlx5_7 at 200: it passes, and the others are still judged against each other.
    cfg = PortsConfig(rates_gbps={"mlx5_7:1": 200, "mlx5_1*": 800})
    out = check_ports(ports, cfg)
    fails = sorted((f.check, f.subject, f.limit) for f in out if f.severity is Severity.FAIL)
    assert fails == [
        ("port.rate", "mlx5_11:1", 800.0),
        ("port.rate", "mlx5_1:1", 800.0),
        ("port.state", "mlx5_10:1", "ACTIVE/LinkUp"),
    ]
    assert (
        '[ports] rates_gbps "mlx5_1*"'
        in next(f for f in out if f.subject == "mlx5_1:1" and f.check == "port.rate").message
    )
    # A selection is judged against the node's ports (peers), not against itself.
    only7 = [p for p in ports if p.adapter == "mlx5_7"]
    assert [f.severity for f in check_ports(only7, PortsConfig()) if f.check == "port.rate"] == [
        Severity.OK
    ]
    assert [
        f.severity for f in check_ports(only7, PortsConfig(), peers=ports) if f.check == "port.rate"
    ] == [Severity.FAIL]
    # No active peer with a rate: nothing to compare with, the rate is reported, not judged.
    (unjudged,) = [f for f in check_ports(only7, PortsConfig(), peers=()) if f.check == "port.rate"]
    assert unjudged.severity is Severity.OK and unjudged.value == 200.0 and unjudged.limit is None


def test_ignore_patterns_name_adapters_or_ports(cli, tmp_path):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text('[ports]\nignore = ["mlx5_10:1", "mlx5_7"]\n')
    topo = json.loads(cli("topo", "--root", FAULTY, "--config", cfg, "-o", "json").stdout)
    assert {f["subject"] for f in topo["findings"] if f["severity"] == "fail"} == {"mlx5_6"}
    assert not [f for f in topo["findings"] if f["subject"] in ("mlx5_7", "mlx5_7:1", "mlx5_10:1")]
    # mlx5_10:1 names a port, not the adapter: mlx5_10's PCIe link is still judged.
    assert [f["check"] for f in topo["findings"] if f["subject"] == "mlx5_10"] == [
        "topo.pcie_width",
        "topo.pcie_speed",
    ]
    counters = json.loads(cli("counters", "--root", FAULTY, "--config", cfg, "-o", "json").stdout)
    assert not [f for f in counters["findings"] if f["subject"] in ("mlx5_7:1", "mlx5_10:1")]


def test_old_keys_of_both_tables_merge_and_conflicts_are_refused(tmp_path):
    p = tmp_path / "c.toml"
    p.write_text(
        "[topo]\nignore_adapters = ['mlx5_1*']\nexpected_rate_gbps = 400\n[counters]\nignore_adapters = ['mlx5_3:1', 'mlx5_1*']\nexpected_rate_gbps = 400\n"
    )
    cfg = load_config(p)
    assert cfg.section("ports", PortsConfig) == PortsConfig(
        expected_rate_gbps=400, ignore=("mlx5_1*", "mlx5_3:1")
    )
    assert len(cfg.notes) == 4 and all("deprecated" in n for n in cfg.notes)
    p.write_text("[topo]\nexpected_rate_gbps = 800\n[counters]\nexpected_rate_gbps = 400\n")
    with pytest.raises(InputError) as e:
        load_config(p)
    assert (
        "[topo] expected_rate_gbps and [counters] expected_rate_gbps differ" in e.value.message
        and "[ports] expected_rate_gbps" in e.value.hint
    )
    p.write_text("[ports]\nignore = ['a']\n[topo]\nignore_adapters = ['b']\n")
    with pytest.raises(InputError) as e:
        load_config(p)
    assert "[topo] ignore_adapters and [ports] ignore are both set" in e.value.message


@pytest.mark.parametrize(
    "toml, words",
    [
        ("[ports]\nexpected_rate_gbps = 0\n", "expected_rate_gbps = 0 must be above 0"),
        ("[ports]\nignore = ['mlx5_1 x']\n", "not DEV or DEV:PORT"),
        ("[ports]\nignore = ['mlx5_1:one']\n", "not DEV or DEV:PORT"),
        ('[ports.rates_gbps]\n"mlx5_4*" = -100\n', "must be above 0"),
        ("[ports]\nexpected_rate = 400\n", "unknown key expected_rate"),
    ],
)
def test_bad_ports_settings_are_exit_2(cli, tmp_path, toml, words):
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    res = cli("topo", "--root", DGX, "--config", cfg)
    assert res.exit_code == 2 and words in res.stderr and "hint:" in res.stderr, res.stderr


def test_an_unreadable_rate_warns(tmp_path):
    root = tmp_path / "node"
    shutil.copytree(DGX, root, symlinks=True)
    for i in range(12):
        rate = (
            (root / "sys" / "class" / "infiniband" / f"mlx5_{i}").resolve() / "ports" / "1" / "rate"
        )
        rate.write_text("fast\n")
    out = check_ports(node_ports(SysfsRoot(root)), PortsConfig())
    assert {(f.check, f.severity) for f in out} == {
        ("port.state", Severity.OK),
        ("port.rate", Severity.WARN),
    }
    assert all("could not be read" in f.message for f in out if f.check == "port.rate")
