"""No data string is ever read as rich markup or an emoji code (issue 11).

rich turns ``:ab:`` into 🆎 (a PCI address on bus 0xab printed as ``0000🆎00.0``) and ``[bold]`` into a
style. The tree is the hgx-4switch machine (GPU4 on bus 0xab) with markup-looking data: a firmware
version ``[/bold]28.39.1002 [bold]:ab:`` (a closing tag alone makes rich raise), IPoIB netdevs
``ib[bold]N``, adapters renamed ``[bold]mlx5_4``, ``mlx5_5[i]:ab:`` and ``mlx5_9[red]``; the log file
for ``bench import`` is named ``[bold]ar:ab:.log``; ``report`` reads a node named ``[bold]gpu:ab:01``.
Every command that reads such data is run and its table output scanned (``bench p2p``/``collective``
print through the same console, tested directly below).
"""

import shutil

import pytest

from tests.support.env import FIXTURES
from tests.sysfsgen.builder import Tree
from tests.sysfsgen.profiles import hgx_4switch

WIDE = {"COLUMNS": "400"}


@pytest.fixture(scope="module")
def odd_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("odd")
    hgx_4switch.build(Tree(root), odd_strings=True)
    return root


def scanned(res, *literal):
    """The output exists, holds no emoji, and shows every ``literal`` exactly as the data has it."""
    assert res.exception is None, res.exception
    out = res.stdout
    assert out.strip(), res.stderr
    assert "🆎" not in out and not any(0x1F000 <= ord(ch) <= 0x1FAFF for ch in out)
    for text in literal:
        assert text in out, f"{text!r} not shown literally"
    return out


def test_topo_table(cli, odd_root):
    res = cli("topo", "--root", odd_root, env=WIDE)
    out = scanned(
        res,
        "0000:ab:00.0",
        hgx_4switch.ODD_FW,
        "ib[bold]0",
        "[bold]mlx5_4",
        "mlx5_5[i]:ab:",
        "NIC9 mlx5_9[red]:1",
        "mlx5_9[red]:1",
    )
    assert res.exit_code == 0, out
    gpu4 = next(line for line in out.splitlines() if "│ GPU4 " in line)
    assert "│ 0000:ab:00.0 │" in gpu4


def test_counters_table(cli, odd_root):
    scanned(
        cli("counters", "--root", odd_root, env=WIDE),
        "[bold]mlx5_4:1",
        "mlx5_5[i]:ab::1",
        "mlx5_9[red]:1",
    )


def test_counters_findings_table(cli, odd_root):
    # a failing finding per port puts the names in the findings table's subject and message too
    out = scanned(
        cli("counters", "--root", odd_root, "--expect-rate", "800", env=WIDE),
        "[bold]mlx5_4:1",
        "mlx5_5[i]:ab::1",
    )
    assert "FAIL" in out


def test_topo_findings_table(cli, odd_root):
    out = scanned(
        cli("topo", "--root", odd_root, "--expect-rate", "800", env=WIDE),
        "[bold]mlx5_4:1",
        "mlx5_5[i]:ab::1",
        "mlx5_9[red]:1",
    )
    assert "port.rate" in out


def test_verdict_table(cli, odd_root):
    res = cli(
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
        "360",
        "--root",
        odd_root,
        env=WIDE,
    )
    scanned(res, "mlx5_9[red]:1")


def test_bench_import_table(cli, tmp_path):
    log = tmp_path / "[bold]ar:ab:.log"
    shutil.copy(FIXTURES / "logs" / "nccl-tests-2023_all_gather_perf.log", log)
    scanned(cli("bench", "import", log, env=WIDE), "[bold]ar:ab:.log")


def test_snapshot_summary(cli, odd_root, tmp_path):
    out = tmp_path / "[bold]n:ab:.tar.gz"
    scanned(cli("snapshot", str(out), "--root", odd_root), "[bold]n:ab:.tar.gz")


def test_console_itself_prints_data_verbatim():
    import io

    from rich.table import Table

    from ibdiag.cli.console import console

    buf = io.StringIO()
    con = console(buf)
    table = Table(title="[bold]t:ab:")
    table.add_column("[red]c")
    table.add_row("0000:ab:00.0 [/] :smile:")
    con.print("[bold]x:ab:")
    con.print(table)
    out = buf.getvalue()
    assert (
        "[bold]x:ab:" in out
        and "[bold]t:ab:" in out
        and "[red]c" in out
        and "0000:ab:00.0 [/] :smile:" in out
    )


def test_report_table(cli, tmp_path):
    # three nodes' topo JSON; one has a markup-looking host name and firmware string, the fleet's outlier
    import json

    from tests.support.env import SYSFS_FIXTURES

    doc = json.loads(cli("topo", "--root", SYSFS_FIXTURES / "hgx-4switch", "-o", "json").stdout)
    for host in ("gpu02", "gpu03", "[bold]gpu:ab:01"):
        doc["host"] = host
        if host.startswith("["):
            doc["adapters"][0]["fw_ver"] = "[/bold]28.39:ab:"
        (tmp_path / f"{len(host)}.json").write_text(json.dumps(doc))
    scanned(cli("report", tmp_path, env=WIDE), "[bold]gpu:ab:01", "[/bold]28.39:ab:")


def test_a_png_flag_without_matplotlib_names_itself(monkeypatch):
    """One check for every PNG option: exit 3 before any work, naming the flag the user gave."""
    import importlib.util

    from ibdiag.errors import CannotRunError
    from ibdiag.output import chart

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda name, *a: None if name == "matplotlib" else real(name, *a),
    )
    with pytest.raises(CannotRunError) as e:
        chart.need_matplotlib("--png", "leave --png out")
    assert e.value.message == "--png needs matplotlib, which is not installed"
    assert e.value.hint == "pip install 'ibdiag[chart]' (or matplotlib), or leave --png out"
