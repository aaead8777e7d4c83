"""Every table stays readable at 80 columns (issue 38): at 80, rich squeezed topo's GPU and adapter name
columns to nothing. The console script runs in a real terminal — tmux, 80 and 200 columns — and what
the pane shows is read back: no name column squeezed away (``││``), every GPU and adapter name whole,
every table row on one line of the pane, and the columns left out at 80 named under the table. The
tables' column choice itself (:mod:`ibdiag.output.fit`) is also checked alone, with switch names as long
as real ones."""

from __future__ import annotations

import re
import shutil
import subprocess
import time
import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from rich.console import Console

from ibdiag.counters.config import CountersConfig
from ibdiag.fabric.build import build_fabric
from ibdiag.fabric.config import FabricConfig
from ibdiag.fabric.dump import load
from ibdiag.fabric.judge import judge
from ibdiag.fabric.views.table import switch_table
from ibdiag.output.fit import Col, choose_columns
from tests.support.env import FIXTURES, SYSFS_FIXTURES, unavailable

pytestmark = pytest.mark.slow

BOX_START = tuple("┏┃┡│└")
BOX_END = tuple("┓┃┩│┘")
FABRIC = FIXTURES / "fabric" / "rail-fat-tree-faulty"


def in_tmux(argv: list[str], columns: int, tmp_path: Path) -> list[str]:
    """The lines a ``columns``-wide tmux pane shows after ``argv`` ran in it (scrollback included)."""
    tmux = shutil.which("tmux")
    if tmux is None:
        unavailable("tmux is not installed (apt-get install tmux)")
    session = f"ibdiag-{uuid.uuid4().hex[:8]}"
    done = tmp_path / f"done-{columns}"
    script = tmp_path / f"run-{columns}.sh"
    script.write_text(
        "unset COLUMNS LINES NO_COLOR FORCE_COLOR\nexport TERM=xterm-256color\n"
        + " ".join(f"'{a}'" for a in argv)
        + f"\ntouch '{done}'\nsleep 600\n"
    )
    base = [tmux, "-L", session, "-f", "/dev/null"]
    subprocess.run(
        [
            *base,
            "new-session",
            "-d",
            "-s",
            session,
            "-x",
            str(columns),
            "-y",
            "50",
            "bash",
            str(script),
        ],
        check=True,
        timeout=30,
    )
    try:
        subprocess.run([*base, "set-option", "-g", "history-limit", "5000"], timeout=10)
        deadline = time.monotonic() + 120
        while not done.exists():
            assert time.monotonic() < deadline, "the command did not finish in the pane"
            time.sleep(0.2)
        time.sleep(0.3)
        out = subprocess.run(
            [*base, "capture-pane", "-p", "-t", session, "-S", "-5000"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
    finally:
        subprocess.run([*base, "kill-server"], timeout=10, capture_output=True)
    return out.rstrip("\n").splitlines()


def _table_rows(lines: list[str]) -> list[str]:
    return [line.rstrip() for line in lines if line.startswith(BOX_START)]


def _assert_readable(lines: list[str], columns: int, names: list[str]) -> None:
    rows = _table_rows(lines)
    assert rows, "no table drawn"
    assert all(len(line) <= columns for line in lines)
    # a table row on one line of the pane: it starts and ends with the box (not cut, not wrapped)
    assert all(r.endswith(BOX_END) for r in rows), [r for r in rows if not r.endswith(BOX_END)]
    # no column squeezed to nothing, no name cut with an ellipsis
    assert not [r for r in rows if "││" in r or "┃┃" in r or "╇╇" in r]
    cells = {c.strip() for r in rows for c in r.strip("│┃").split("│")}
    missing = [n for n in names if n not in cells]
    assert not missing, missing


ADAPTERS = [f"mlx5_{i}" for i in range(12)]
GPUS = [f"GPU{i}" for i in range(8)]


@pytest.mark.parametrize("columns", [80, 200])
def test_topo_tables_keep_the_gpu_and_adapter_names(ibdiag_exe, tmp_path, columns):
    root = SYSFS_FIXTURES / "dgx-h100-faulty"
    lines = in_tmux([ibdiag_exe, "topo", "--root", str(root)], columns, tmp_path)
    _assert_readable(lines, columns, ADAPTERS + GPUS)
    text = "\n".join(lines)
    if columns == 80:
        assert "at 80 columns, left out: pci" in text  # said, not silently gone
        assert "Gen5 x8 of Gen5 x16" in text and "DOWN/Polling" in text  # the faults stay in view
    else:
        assert "left out" not in text and "0000:aa:00.0" in text and "IB/RoCE v1, RoCE v2" in text


@pytest.mark.parametrize("columns", [80, 200])
def test_topo_on_a_dual_port_node_with_sixteen_adapters(ibdiag_exe, tmp_path, columns):
    root = SYSFS_FIXTURES / "hgx-dualport"
    lines = in_tmux([ibdiag_exe, "topo", "--root", str(root)], columns, tmp_path)
    _assert_readable(lines, columns, [f"mlx5_{i}" for i in range(16)] + GPUS)


@pytest.mark.parametrize("columns", [80, 200])
def test_counters_tables_keep_the_port_names(ibdiag_exe, tmp_path, columns):
    root = SYSFS_FIXTURES / "counters-faulty"
    lines = in_tmux([ibdiag_exe, "counters", "--root", str(root)], columns, tmp_path)
    ports = [f"mlx5_{i}:1" for i in range(6)]
    # narrow terminals get the compact table without vertical rules: each port starts its own row
    assert all(len(line) <= columns for line in lines)
    starts = {re.split(r"[\s│]+", line.strip("│ "))[0] for line in lines}
    assert [p for p in ports if p not in starts] == []
    if columns == 200:
        _assert_readable(lines, columns, ports)


@pytest.mark.parametrize("columns", [80, 200])
def test_fabric_switch_table_keeps_the_switch_names(ibdiag_exe, tmp_path, columns):
    lines = in_tmux([ibdiag_exe, "fabric", "--from", str(FABRIC)], columns, tmp_path)
    switches = ["leaf-r0-1", "leaf-r1-1", "leaf-r2-1", "leaf-r3-1", "spine-1", "spine-2"]
    _assert_readable(lines, columns, switches)


def test_switch_names_as_long_as_real_ones_drop_the_guid_not_the_name():
    """A real director's leaf is described like ``MF0;ib-leaf-rack03-u42:MQM9790/U1`` and shown by the
    name operators use (``ib-leaf-rack03-u42``): at 80 columns the GUID column goes first, the name
    stays whole and the caption says what went."""
    fab = build_fabric(load(FABRIC))
    nodes = tuple(
        replace(n, desc=f"MF0;ib-{n.desc}-rack03-u42:MQM9790/U1") if n.kind == "switch" else n
        for n in fab.nodes
    )
    judged = judge(replace(fab, nodes=nodes), hosts={}, cfg=CountersConfig(), fcfg=FabricConfig())
    con = Console(width=80, no_color=True, record=True, file=open("/dev/null", "w"))
    con.print(switch_table(judged, 80))
    text = con.export_text()
    assert "ib-leaf-r2-1-rack03-u42" in text and "MF0;" not in text
    assert "left out: GUID" in text and "0xb8cef603" not in text
    assert max(len(line) for line in text.splitlines()) <= 80


def test_the_least_useful_columns_go_first_and_the_names_never():
    cols = [
        Col("name"),
        Col("pci", drop=3),
        Col("state"),
        Col("fw", drop=5),
        Col("text", drop=1, fold=True),
    ]
    natural = [10, 12, 13, 10, 40]
    words = [10, 12, 13, 10, 8]
    assert choose_columns(cols, natural, words, 200) == [0, 1, 2, 3, 4]
    # 80: everything folded is 1 + (10+12+13+10+12) + 5 x 3 = 73: all kept, the text folds
    assert choose_columns(cols, natural, words, 80) == [0, 1, 2, 3, 4]
    assert choose_columns(cols, natural, words, 60) == [0, 1, 2, 4]  # fw (5) before pci (3)
    assert choose_columns(cols, natural, words, 50) == [0, 2, 4]
    assert choose_columns(cols, natural, words, 10) == [0, 2]  # names and state are never dropped
