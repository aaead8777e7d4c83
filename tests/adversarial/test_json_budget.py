"""Hostile JSON documents given to every reader of files (issue 28, cases 5 and 8): a 4301-digit integer
(past Python's int-digit limit), ``"schema": {}`` or ``[]``, and a 64 MiB ``[[],[],...]`` that took
1.7 GB. Each is that file refused (exit 2, or skipped by ``report``), never exit 3 "internal error",
and the parse is bounded by :func:`ibdiag.jsonread.loads`'s budget, not by the file's size."""

from __future__ import annotations

import subprocess
import sys

import pytest

from ibdiag import jsonread
from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES

BIG = "1" * 4301


def _files(tmp_path):
    big = tmp_path / "big.json"
    big.write_text('{"schema": "ibdiag.bench/1", "n": ' + BIG + "}")
    toml = tmp_path / "big.toml"
    toml.write_text(f"[topo]\nx = {BIG}\n")
    return big, toml


def _commands(big, toml):
    return {
        "report": ["report", str(big)],
        "counters --since": [
            "counters",
            "--root",
            str(SYSFS_FIXTURES / "dgx-h100"),
            "--since",
            str(big),
        ],
        "verdict --bench": [
            "verdict",
            "--params",
            "8e9",
            "--dtype",
            "bf16",
            "--ranks",
            "64",
            "--compute-s",
            "1",
            "--bench",
            str(big),
        ],
        "bench import": ["bench", "import", str(big)],
        "--config": ["topo", "--root", str(SYSFS_FIXTURES / "dgx-h100"), "--config", str(toml)],
    }


@pytest.mark.parametrize(
    "name", ["report", "counters --since", "verdict --bench", "bench import", "--config"]
)
def test_an_integer_past_pythons_digit_limit_refuses_that_file(tmp_path, name):
    res = run_cli(*_commands(*_files(tmp_path))[name])
    assert res.exception is None, res.exception
    assert "internal error" not in res.stderr, res.stderr
    if name == "report":  # skipped, named, and the run goes on
        assert "big.json" in res.stderr + res.stdout and "digits" in res.stderr + res.stdout
        assert res.exit_code != 3, res.stderr
    else:
        assert res.exit_code == 2, res.stderr
        assert "digits" in res.stderr and "hint:" in res.stderr


@pytest.mark.parametrize("schema", ["{}", "[]"])
def test_a_schema_that_is_not_a_string_is_skipped_by_report(tmp_path, schema):
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": ' + schema + ', "host": "a"}')
    res = run_cli("report", str(bad))
    assert res.exception is None and "internal error" not in res.stderr, res.stderr
    assert res.exit_code != 3 and "bad.json" in res.stderr + res.stdout


def test_the_element_budget_is_counted_before_anything_is_built():
    with pytest.raises(jsonread.JsonFieldError, match="more than the"):
        jsonread.loads("[" + "[]," * (jsonread.MAX_OBJECT_BYTES // 72) + "[]]")
    assert jsonread.loads("[" + "[]," * 1000 + "[]]")[0] == []


@pytest.mark.slow
def test_a_64_mib_list_of_empty_lists_costs_report_no_more_than_a_few_hundred_mb(tmp_path):
    """Measured in a child process: the peak of its own address space (``VmHWM``; ``ru_maxrss`` would
    carry the forking pytest process's size across ``exec``)."""
    f = tmp_path / "lists.json"
    n = (64 << 20) // 3
    f.write_text('{"schema": "ibdiag.topo/1", "x": [' + "[]," * n + "[]]}")
    child = (
        "import sys\n"
        "from tests.support.cli import run_cli\n"
        "from tests.support.peak import vm_hwm_kib\n"
        "res = run_cli('report', sys.argv[1])\n"
        "print(res.exit_code, vm_hwm_kib())\n"
        "print(res.stderr[-300:])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", child, str(f)], capture_output=True, text=True, timeout=300
    )
    code, rss_kib = out.stdout.split()[:2]
    assert int(code) != 3 and "internal error" not in out.stdout, out.stdout + out.stderr
    assert int(rss_kib) < 600 * 1024, f"peak {int(rss_kib) // 1024} MiB"


DEEP = {
    "arrays": "[" * 100_000 + "]" * 100_000,
    "objects": '{"a":' * 50_000 + "1" + "}" * 50_000,
    "unclosed": "[" * 100_000,
    "deep inside a document": '{"schema": "ibdiag.counters/1", "ports": '
    + "[" * 3000
    + "]" * 3000
    + "}",
    "a 99-digit number": '{"schema": "ibdiag.counters/1", "taken_at_epoch_s": '
    + "9" * 99
    + ', "ports": []}',
}


@pytest.mark.parametrize("what", list(DEEP))
@pytest.mark.parametrize(
    "name",
    [
        "report",
        "counters --since",
        "verdict --bench",
        "bench import",
        "job --ras",
        "job --inspector",
    ],
)
def test_a_deeply_nested_document_refuses_that_file(tmp_path, name, what):
    """Issue 42, item 9: nesting past Python's recursion limit was a RecursionError wherever a reader
    parsed with ``json.loads``; every JSON input option refuses the file (report: names and skips it)."""
    doc = tmp_path / "deep.json"
    doc.write_text(DEEP[what])
    argv = {
        **_commands(doc, tmp_path / "unused.toml"),
        "job --ras": ["job", "--ras", str(doc)],
        "job --inspector": ["job", "--inspector", str(doc)],
    }[name]
    res = run_cli(*argv)
    assert res.exception is None, res.exception
    assert "internal error" not in res.stderr and "Recursion" not in res.stderr, res.stderr[-400:]
    assert res.exit_code != 3, res.stderr[-400:]
    if name != "report":
        assert res.exit_code in (1, 2), (res.exit_code, res.stderr[-400:])
        assert "hint:" in res.stderr or res.exit_code == 1, res.stderr[-400:]
