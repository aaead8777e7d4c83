"""The command-line contract: help, version, exit statuses, error format, formats, start-up imports."""

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.support.env import REPO, SYSFS_FIXTURES

DGX = SYSFS_FIXTURES / "dgx-h100"
FAULTY = SYSFS_FIXTURES / "dgx-h100-faulty"


def test_help_lists_each_command_on_one_line_and_the_exit_table(cli):
    res = cli("--help")
    assert res.exit_code == 0
    for cmd in ("topo", "counters", "bench", "verdict", "snapshot"):
        lines = [ln for ln in res.stdout.splitlines() if ln.strip().startswith(cmd + " ")]
        assert len(lines) == 1, f"{cmd}: {lines}"
    for code in ("0", "1", "2", "3", "130"):
        assert any(ln.strip().startswith(code + " ") for ln in res.stdout.splitlines()), code


def test_version(cli):
    from ibdiag import __version__

    res = cli("--version")
    assert res.exit_code == 0 and res.stdout.strip() == f"ibdiag {__version__}"


def test_no_arguments_shows_help_and_exits_2(cli):
    res = cli()
    assert res.exit_code == 2 and "Usage:" in res.stdout


def test_unknown_option_is_a_usage_error_in_ibdiag_form(cli):
    res = cli("topo", "--bogus")
    assert res.exit_code == 2
    assert res.stderr.startswith("ibdiag: error: No such option: --bogus")
    assert "hint: see 'ibdiag topo --help'" in res.stderr
    assert "Traceback" not in res.stderr


def test_unknown_format_is_a_usage_error(cli):
    res = cli("topo", "--root", DGX, "-o", "yaml")
    assert res.exit_code == 2 and res.stderr.startswith("ibdiag: error:")


@pytest.mark.parametrize(
    "argv",
    [("topo", "--root", DGX), ("counters", "--root", DGX), ("sweep", "--plan", "--nodes", "8")],
)
def test_html_is_one_format_of_every_command_but_only_report_writes_it(cli, argv):
    """One --format enum for every command: -o html is refused before anything runs, with the way to the page."""
    res = cli(*argv, "-o", "html")
    assert res.exit_code == 2 and res.stdout == ""
    assert "html is a page of many nodes: ibdiag report FILES -o html" in res.stderr


def test_missing_root_and_root_without_sys(cli, tmp_path):
    res = cli("topo", "--root", tmp_path / "nope")
    assert (
        res.exit_code == 2 and "no such file or directory" in res.stderr and "hint:" in res.stderr
    )
    res = cli("topo", "--root", tmp_path)
    assert res.exit_code == 2 and "no sys/ directory" in res.stderr


@pytest.mark.parametrize("fmt", ["table", "json", "csv", "prom", "junit"])
def test_every_format(cli, fmt):
    res = cli("topo", "--root", FAULTY, "-o", fmt)
    assert res.exit_code == 1, res.stderr
    out = res.stdout
    if fmt == "table":
        assert "NIC Legend:" in out and "GPU2" in out and "status: FAIL" in out
        assert "port.state" in out and "mlx5_10:1" in out
    elif fmt == "json":
        assert json.loads(out)["status"] == "fail"
    elif fmt == "csv":
        lines = out.splitlines()
        assert (
            lines[0]
            == "gpu,gpu_pci,gpu_numa_node,adapter,adapter_pci,adapter_numa_node,path,nearest,gdr,nic_index"
        )
        assert len(lines) == 1 + 8 * 12
        assert "2,0000:3a:00.0,0,mlx5_11,0000:e9:00.0,1,SYS,0,0,11" in lines
    elif fmt == "prom":
        assert 'ibdiag_topo_port_active{device="mlx5_10",port="1",link_layer="Ethernet"} 0' in out
        assert 'ibdiag_status{command="topo"} 2' in out
        assert "# TYPE ibdiag_topo_gpus gauge" in out
    else:
        root = ET.fromstring(out.split("\n", 1)[1])
        suite = root.find("testsuite")
        assert suite.get("name") == "ibdiag.topo@dgx-h100-07" and suite.get("failures") == "3"
        failed = {
            c.get("classname") + ":" + c.get("name")
            for c in suite.iter("testcase")
            if c.find("failure") is not None
        }
        assert failed == {"topo.pcie_width:mlx5_6", "port.rate:mlx5_7:1", "port.state:mlx5_10:1"}


def test_strict_makes_warnings_fail(cli):
    root = SYSFS_FIXTURES / "roce-node"
    assert cli("topo", "--root", root).exit_code == 0
    res = cli("topo", "--root", root, "--strict", "-o", "junit")
    assert res.exit_code == 1
    assert 'failures="2"' in res.stdout


def test_config_file(cli, tmp_path):
    cfg = tmp_path / "ibdiag.toml"
    cfg.write_text("[topo]\nexpected_rate_gbps = 800\n")
    assert cli("topo", "--root", DGX, "--config", cfg).exit_code == 1
    assert cli("topo", "--root", DGX, env={"IBDIAG_CONFIG": str(cfg)}).exit_code == 1
    cfg.write_text("[topo]\nexpected_rate = 800\n")
    res = cli("topo", "--root", DGX, "--config", cfg)
    assert (
        res.exit_code == 2
        and "unknown key expected_rate" in res.stderr
        and "expected_rate_gbps" in res.stderr
    )
    cfg.write_text("[topo]\ngdr_level = 'FAR'\n")
    res = cli("topo", "--root", DGX, "--config", cfg)
    assert res.exit_code == 2 and "gdr_level" in res.stderr
    cfg.write_text("[topo\n")
    res = cli("topo", "--root", DGX, "--config", cfg)
    assert res.exit_code == 2 and "not valid TOML" in res.stderr


def test_debug_shows_the_traceback_only_when_asked(cli, tmp_path):
    res = cli("topo", "--root", tmp_path)
    assert "Traceback" not in res.stderr
    res = cli("--debug", "topo", "--root", tmp_path)
    assert res.exit_code == 2 and "Traceback" in res.stderr and "ibdiag: error:" in res.stderr


def test_this_machine(cli):
    """`ibdiag topo` on the real /sys of whatever machine runs the tests: it must work and exit 0 here
    (no RDMA, virtio devices, NUMA -1, no link-speed files) — or 1 on a node with real findings."""
    res = cli("topo", "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    assert doc["schema"] == "ibdiag.topo/1"
    if not os.path.exists("/sys/class/infiniband"):
        assert res.exit_code == 0
        assert doc["adapters"] == []
        table = cli("topo")
        assert table.exit_code == 0 and "No RDMA adapter on this node" in table.stdout


def run_module(*args, **kw):
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=REPO, **kw
    )


HEAVY = ("pandas", "numpy", "torch", "pyverbs", "matplotlib", "networkx")


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["topo", "--root", str(DGX)],
        ["topo", "--root", str(DGX), "-o", "json"],
        ["report", "--help"],  # pandas is a dependency, imported by report's work only
        ["counters", "--root", str(DGX), "-o", "json"],
        [
            "verdict",
            "--params",
            "8e9",
            "--dtype",
            "bf16",
            "--ranks",
            "16",
            "--busbw",
            "50",
            "--compute-s",
            "1",
        ],
    ],
)
def test_startup_does_not_import_heavy_modules(argv):
    code = (
        "import sys\n"
        "from ibdiag.cli import app\n"
        "try:\n"
        f"    app({argv!r}, prog_name='ibdiag')\n"
        "except SystemExit:\n"
        "    pass\n"
        f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
        "sys.stderr.write('HEAVY=' + ','.join(heavy) + '\\n')\n"
    )
    res = run_module("-c", code)
    assert "HEAVY=\n" in res.stderr, res.stderr[-500:]


def test_python_dash_m_and_console_script(ibdiag_exe):
    res = run_module("-m", "ibdiag", "topo", "--root", str(DGX), "-o", "json")
    assert res.returncode == 0 and json.loads(res.stdout)["host"] == "dgx-h100-01"
    res = subprocess.run(
        [ibdiag_exe, "topo", "--root", str(FAULTY)], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 1 and "status: FAIL" in res.stdout
    res = subprocess.run(
        [ibdiag_exe, "topo", "--format", "nope"], capture_output=True, text=True, timeout=120
    )
    assert res.returncode == 2 and res.stderr.startswith("ibdiag: error:")


def test_a_fabric_result_is_kept_until_exit_in_ibdiags_own_process_only(tmp_path):
    # Issue 39: in the console script's process a fabric's result is left to the process's end (the
    # OS takes it back at once; freeing half a million objects one by one was 2-3 % of the run);
    # where main() is called as a library (here, in-process) it is freed as usual.
    from ibdiag.cli import main as boundary
    from tests.support.cli import run_cli
    from tests.support.fabric_shapes import bringup_tree

    tree = bringup_tree()
    dump = tmp_path / "f.net"
    dump.write_text((tree[0] if isinstance(tree, tuple) else tree).text())
    before = list(boundary._kept)
    assert run_cli("fabric", "--from", str(dump), "-o", "json").exit_code in (0, 1)
    assert boundary._kept == before  # in-process: nothing kept
    code = (
        "import atexit, sys\n"
        "from ibdiag.cli import main as m\n"
        "atexit.register(lambda: sys.stderr.write('KEPT=' + ','.join("
        "type(x).__name__ for x in m._kept if x is not m._kept) + '\\n'))\n"
        f"sys.argv = ['ibdiag', 'fabric', '--from', {str(dump)!r}, '-o', 'json']\n"
        "m.run()\n"
    )
    res = run_module("-c", code)
    assert res.returncode in (0, 1) and json.loads(res.stdout)["schema"] == "ibdiag.fabric/1"
    assert "KEPT=FabricResult\n" in res.stderr, res.stderr[-500:]
