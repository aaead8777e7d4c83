"""``--root DIR`` trees built to hurt the node: links out of the root, FIFOs, sockets, device nodes and
garbage values. Nothing outside the root is read, nothing blocks, nothing is echoed raw — for every
command that takes ``--root``. The trees are built here, in tmp_path.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import stat
from pathlib import Path

import pytest

from ibdiag.node.sysfs import SysfsRoot
from tests.support.env import SYSFS_FIXTURES
from tests.sysfsgen.builder import Tree, zero_counters, zero_hw_counters

NVIDIA, MELLANOX = 0x10DE, 0x15B3
SECRET = "TOPSECRET-4242"
HOST = "adversarial-node-01"
PORT = "sys/class/infiniband/mlx5_0/ports/1"


def small_node(root: Path) -> Tree:
    """One GPU and one adapter under one PCIe switch, counters and a few hw_counters, NUMA, modules."""
    t = Tree(root)
    t.numa(0, "0-7")
    t.module("nvidia", "550.1")
    t.module("nvidia_peermem")
    hb = t.host_bridge("0000:10")
    hb.numa, hb.cpulist = 0, "0-7"
    sw = hb.bridge("0000:10:01.0").bridge("0000:11:00.0")
    sw.bridge("0000:12:00.0").add("0000:13:00.0", vendor=NVIDIA, device=0x2330, cls=0x030200)
    dev = sw.bridge("0000:12:01.0").add(
        "0000:14:00.0", vendor=MELLANOX, device=0x1021, cls=0x020700
    )
    ib = dev.rdma(
        "mlx5_0",
        fw_ver="28.39.1002",
        board_id="MT_0000000838",
        hca_type="MT4129",
        node_guid="0000:0000:0000:0001",
    )
    dev.netdev("ib0")
    hw = {
        k: v
        for k, v in zero_hw_counters().items()
        if k in ("lifespan", "out_of_sequence", "rnr_nak_retry_err")
    }
    ib.port(1, counters=zero_counters(), hw_counters=hw)
    t.manifest(HOST, "adversarial test node")
    return t


@pytest.fixture
def node(tmp_path):
    root = tmp_path / "node"
    small_node(root)
    return root


@pytest.fixture
def secret(tmp_path):
    p = tmp_path / "secret"
    p.write_text(f"{SECRET}\n")
    return p


def relink(path: Path, target: str | Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()
    os.symlink(target, path)


def findings(res) -> list[dict]:
    return json.loads(res.stdout)["findings"]


# --- links out of the root ----------------------------------------------------------------------------


@pytest.mark.parametrize("how", ["absolute", "relative"])
def test_an_attribute_linked_out_is_refused_not_read(cli, node, secret, how):
    fw = node / "sys/class/infiniband/mlx5_0/fw_ver"
    relink(fw, secret if how == "absolute" else os.path.relpath(secret, fw.resolve().parent))
    res = cli("topo", "--root", node, "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    assert SECRET not in res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["adapters"][0]["fw_ver"] is None
    (f,) = [f for f in doc["findings"] if f["check"] == "topo.sysfs_value"]
    assert (
        f["subject"].endswith("/infiniband/mlx5_0/fw_ver")
        and "refused" in f["message"]
        and "outside" in f["message"]
    )
    table = cli("topo", "--root", node)
    assert SECRET not in table.stdout + table.stderr


@pytest.mark.parametrize(
    "cmd",
    [
        ["counters"],
        ["counters", "--interval", "0.1"],
        [
            "verdict",
            "--params",
            "8e9",
            "--dtype",
            "bf16",
            "--ranks",
            "16",
            "--compute-s",
            "2",
            "--busbw",
            "40",
        ],
    ],
)
def test_a_counter_linked_out_is_refused_not_read(cli, node, tmp_path, cmd):
    leak = tmp_path / "leak"
    leak.write_text(f"123456 {SECRET}\n")
    relink(node / PORT / "counters/symbol_error", leak)
    for fmt in ("json", "table"):
        res = cli(*cmd, "--root", node, "-o", fmt)
        assert res.exit_code in (0, 1), res.stderr
        assert SECRET not in res.stdout + res.stderr and "123456" not in res.stdout
    if cmd[0] == "counters":
        res = cli(*cmd, "--root", node, "-o", "json")
        (f,) = [f for f in findings(res) if f["check"] == "counters.unavailable"]
        assert "symbol_error" in f["message"] and "refused" in f["message"]


def test_an_adapter_linked_to_another_tree_is_not_read(cli, node, tmp_path):
    other = tmp_path / "other"
    small_node(other)
    (other / PORT / "counters/symbol_error").write_text("777\n")
    (other / "sys/class/infiniband/mlx5_0/fw_ver").write_text("99.99.9999\n")
    real_other = (other / "sys/class/infiniband/mlx5_0").resolve()
    relink(node / "sys/class/infiniband/mlx5_0", real_other)
    topo = cli("topo", "--root", node, "-o", "json")
    assert topo.exit_code in (0, 1), topo.stderr
    doc = json.loads(topo.stdout)
    assert doc["adapters"] == [] and "99.99" not in topo.stdout
    assert any(
        f["check"] == "topo.sysfs_value"
        and f["subject"] == "/sys/class/infiniband/mlx5_0"
        and "refused" in f["message"]
        for f in doc["findings"]
    )
    counters = cli("counters", "--root", node, "-o", "json")
    assert "777" not in counters.stdout
    assert counters.exit_code == 3 and "no RDMA port" in counters.stderr
    assert "class/infiniband/mlx5_0" in counters.stderr and "outside" in counters.stderr


def test_a_pci_device_linked_out_is_refused(cli, node, tmp_path):
    other = tmp_path / "other"
    small_node(other)
    relink(
        node / "sys/bus/pci/devices/0000:13:00.0",
        (other / "sys/devices/pci0000:10").resolve()
        / "0000:10:01.0/0000:11:00.0/0000:12:00.0/0000:13:00.0",
    )
    res = cli("topo", "--root", node, "-o", "json")
    doc = json.loads(res.stdout)
    assert doc["gpus"] == []
    assert any(
        f["subject"] == "/sys/bus/pci/devices/0000:13:00.0" and "refused" in f["message"]
        for f in doc["findings"]
    )


def test_a_sys_directory_that_is_a_link_out_is_an_input_error(cli, tmp_path):
    other = tmp_path / "other"
    small_node(other)
    root = tmp_path / "root"
    root.mkdir()
    os.symlink(other / "sys", root / "sys")
    for cmd in (["topo"], ["counters"], ["snapshot", tmp_path / "s.tar.gz"]):
        res = cli(*cmd, "--root", root)
        assert res.exit_code == 2, (cmd, res.stdout, res.stderr)
        assert "outside" in res.stderr and "hint:" in res.stderr


def test_a_manifest_linked_out_is_not_believed(cli, node, tmp_path):
    fake = tmp_path / "fake.json"
    fake.write_text(json.dumps({"host": "evil-host"}))
    relink(node / "ibdiag-snapshot.json", fake)
    res = cli("topo", "--root", node, "-o", "json")
    assert json.loads(res.stdout)["host"] != "evil-host"


def test_the_kernels_relative_links_keep_working(cli, node):
    res = cli("topo", "--root", node, "-o", "json")
    assert res.exit_code == 0, res.stdout
    doc = json.loads(res.stdout)
    assert (
        doc["host"] == HOST
        and len(doc["gpus"]) == 1
        and doc["adapters"][0]["fw_ver"] == "28.39.1002"
    )
    assert not [f for f in doc["findings"] if f["severity"] != "ok"]


# --- FIFOs, sockets and device nodes -----------------------------------------------------------------


def test_sockets_and_device_nodes_are_refused_without_opening(node):
    fw = node / "sys/class/infiniband/mlx5_0/fw_ver"
    fw.unlink()
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(fw))
        counter = node / PORT / "counters/symbol_error"
        counter.unlink()
        os.mknod(counter, 0o644 | stat.S_IFCHR, os.makedev(1, 5))  # what /dev/zero is
        sysfs = SysfsRoot(node)
        assert sysfs.read("class/infiniband/mlx5_0/fw_ver") is None
        assert sysfs.read("class/infiniband/mlx5_0/ports/1/counters/symbol_error") is None
        assert [(p.kind, p.detail) for p in sysfs.problems] == [
            ("refused", "a socket, not a regular file; not read"),
            ("refused", "a character device, not a regular file; not read"),
        ]
    finally:
        sock.close()


def _commands(root: Path, tmp_path: Path, baseline: Path) -> dict[str, list[str]]:
    model = [
        "--params",
        "8e9",
        "--dtype",
        "bf16",
        "--ranks",
        "16",
        "--compute-s",
        "2",
        "--busbw",
        "40",
    ]
    return {
        "topo": ["topo", "--root", str(root), "-o", "json"],
        "counters": ["counters", "--root", str(root), "-o", "json"],
        "counters-interval": [
            "counters",
            "--root",
            str(root),
            "-o",
            "json",
            "--interval",
            "0.1",
            "--count",
            "2",
        ],
        "counters-since": ["counters", "--root", str(root), "-o", "json", "--since", str(baseline)],
        "verdict": ["verdict", *model, "--root", str(root), "-o", "json"],
        "snapshot": ["snapshot", str(tmp_path / "out.tar.gz"), "--root", str(root), "--force"],
    }


def _files_read(cli, argv: list[str], root: Path, monkeypatch) -> list[str]:
    """Every file the command reads through SysfsRoot (a spy on the real reader), plus the manifest."""
    seen: list[str] = []
    real_read = SysfsRoot.read

    def spy(self, rel):
        seen.append(str(self.path(rel).relative_to(root)))
        return real_read(self, rel)

    with monkeypatch.context() as m:
        m.setattr(SysfsRoot, "read", spy)
        res = cli(*argv)
    assert res.exit_code in (0, 1), (argv, res.stderr)
    files = sorted({f for f in seen if (root / f).is_file()})
    return ["ibdiag-snapshot.json", *files]


@pytest.mark.slow
@pytest.mark.timeout(240)
@pytest.mark.parametrize(
    "command", ["topo", "counters", "counters-interval", "counters-since", "verdict", "snapshot"]
)
def test_a_fifo_at_any_file_a_command_reads_never_blocks(cli, node, tmp_path, monkeypatch, command):
    baseline = tmp_path / "before.json"
    res = cli("counters", "--root", node, "-o", "json")
    baseline.write_text(res.stdout)
    argv = _commands(node, tmp_path, baseline)[command]
    files = _files_read(cli, argv, node, monkeypatch)
    assert len(files) > 10
    for rel in files:
        path = node / rel
        if path.is_symlink():
            path = path.resolve()
        keep = path.read_bytes()
        path.unlink()
        os.mkfifo(path)
        try:
            res = cli(*argv)  # a regression blocks here: the timeout fails the test
        finally:
            path.unlink()
            path.write_bytes(keep)
        assert res.exception is None and "internal error" not in res.stderr, (rel, res.stderr)
        assert res.exit_code in (0, 1, 2), (rel, res.exit_code, res.stderr)
        if res.exit_code == 2:
            assert "ibdiag: error:" in res.stderr and "hint:" in res.stderr, (rel, res.stderr)
        if command == "topo" and rel.startswith("sys/"):
            said = [
                f for f in findings(res) if "refused" in f["message"] and "FIFO" in f["message"]
            ]
            ports = [
                f
                for f in findings(res)
                if f["check"] in ("port.state", "port.rate") and f["severity"] != "ok"
            ]
            assert said or ports, rel


def test_fixture_findings_are_unchanged_by_the_checks(cli):
    # The bundled trees hold only the kernel's own relative links and regular files: nothing refused.
    for name in ("dgx-h100", "dgx-h100-faulty", "roce-node", "counters-faulty", "vm-no-rdma"):
        res = cli("topo", "--root", SYSFS_FIXTURES / name, "-o", "json")
        assert not [f for f in findings(res) if "refused" in f["message"]], name


# --- values that are not what the kernel prints ---------------------------------------------------------


def test_control_characters_in_a_value_are_refused_and_never_echoed(cli, node):
    (node / "sys/class/infiniband/mlx5_0/fw_ver").write_text("28.39\x1b]0;pwned\x07\x1b[2J\n")
    (node / PORT / "counters/symbol_error").write_text("1\x1b[31m\n")
    for cmd in (["topo"], ["counters"]):
        for fmt in ("json", "table"):
            res = cli(*cmd, "--root", node, "-o", fmt)
            assert "\x1b" not in res.stdout + res.stderr and "\x07" not in res.stdout, (cmd, fmt)
    doc = json.loads(cli("topo", "--root", node, "-o", "json").stdout)
    assert doc["adapters"][0]["fw_ver"] is None
    (f,) = [f for f in doc["findings"] if f["check"] == "topo.sysfs_value"]
    assert "control characters" in f["message"] and "\\x1b" in f["message"]


def test_a_huge_value_is_refused_and_only_an_excerpt_is_shown(cli, node):
    (node / "sys/class/infiniband/mlx5_0/fw_ver").write_text("9" * 70_000)
    (node / PORT / "counters/symbol_error").write_text("9" * 5000 + "\n")
    topo = json.loads(cli("topo", "--root", node, "-o", "json").stdout)
    (f,) = [f for f in topo["findings"] if f["check"] == "topo.sysfs_value"]
    assert "more than 65536 bytes" in f["message"]
    res = cli("counters", "--root", node, "-o", "json")
    (u,) = [f for f in findings(res) if f["check"] == "counters.unavailable"]
    assert (
        "symbol_error" in u["message"] and "9" * 100 not in u["message"] and len(u["message"]) < 300
    )


def test_not_utf8_is_malformed(node):
    (node / "sys/class/infiniband/mlx5_0/board_id").write_bytes(b"MT_\xff\xfe\n")
    sysfs = SysfsRoot(node)
    assert sysfs.read("class/infiniband/mlx5_0/board_id") is None
    (p,) = sysfs.problems
    assert p.kind == "malformed" and "not UTF-8" in p.detail and "\\xff" in p.detail
