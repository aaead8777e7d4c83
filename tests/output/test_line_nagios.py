"""-o line, --exit-codes nagios and an ASCII-only stdout (#11: Slurm, NHC, NPD, cron)."""

from __future__ import annotations

import os
import subprocess

import pytest

from ibdiag.findings.model import Finding, Report, Severity
from ibdiag.output.line import MAX_LINE, render_line, unknown_line
from tests.support.env import SYSFS_FIXTURES

F = SYSFS_FIXTURES


def _report(n_fail: int, n_warn: int = 0) -> Report:
    findings = [
        Finding(f"topo.check_{i}", Severity.FAIL, f"mlx5_{i}:1", "bad") for i in range(n_fail)
    ]
    findings += [Finding("topo.adapters", Severity.WARN, "node", "meh") for _ in range(n_warn)]
    findings.append(Finding("topo.ok", Severity.OK, "x", "fine"))
    return Report("topo", {}, tuple(findings))


def test_line_lists_failing_checks_within_80_characters_with_a_tail():
    line = render_line(_report(12))
    assert line.startswith("FAIL topo.check_0 mlx5_0:1, topo.check_1 mlx5_1:1")
    assert len(line) <= MAX_LINE and line.endswith(" more") and line.isascii()
    shown = line.count("topo.check_")
    assert line.endswith(f"+{12 - shown} more")


def test_line_word_follows_the_exit_status():
    assert render_line(_report(0, 1)) == "WARN topo.adapters node"
    assert render_line(_report(0, 1), strict=True) == "FAIL topo.adapters node"
    assert render_line(_report(0)) == "OK ibdiag topo: 1 check(s) passed"
    odd = Report("topo", {}, (Finding("topo.x", Severity.FAIL, "caf\u00e9 dev\nname", "m"),))
    assert render_line(odd) == "FAIL topo.x caf?dev?name"
    assert render_line(odd).isascii() and "\n" not in render_line(odd)
    long = unknown_line("x" * 200 + " \u2014 y")
    assert len(long) <= MAX_LINE and long.startswith("UNKNOWN ibdiag: xxx") and long.isascii()


@pytest.mark.parametrize(
    "argv,status,start",
    [
        (
            ["topo", "--root", F / "dgx-h100-faulty"],
            1,
            "FAIL topo.pcie_width mlx5_6, port.rate mlx5_7:1, port.state mlx5_10:1",
        ),
        (["topo", "--root", F / "dgx-h100"], 0, "OK ibdiag topo: "),
        (["counters", "--root", F / "counters-faulty"], 1, "FAIL "),
        (
            ["counters", "--root", F / "vm-no-rdma"],
            3,
            "UNKNOWN ibdiag: no RDMA port to read counters from",
        ),
        (["topo", "--root", F / "missing"], 2, "UNKNOWN ibdiag: --root "),
        (
            ["topo", "--bogus", "--root", F / "dgx-h100"],
            2,
            "UNKNOWN ibdiag: No such option: --bogus",
        ),
        (
            [
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
            ],
            0,
            "WARN verdict.",
        ),
        (["bench", "import", "/nonexistent.log"], 2, "UNKNOWN ibdiag: "),
    ],
)
def test_line_on_every_command_keeps_the_exit_status(cli, argv, status, start):
    res = cli(*argv, "-o", "line")
    assert res.exit_code == status, res.stderr
    assert res.stdout.startswith(start) and res.stdout.count("\n") == 1, res.stdout
    assert len(res.stdout.rstrip("\n")) <= MAX_LINE and res.stdout.isascii()
    if status >= 2:
        assert "ibdiag: error:" in res.stderr  # people still get the message and the hint


@pytest.mark.parametrize(
    "argv,ibdiag_status,nagios",
    [
        (["topo", "--root", F / "dgx-h100"], 0, 0),  # OK
        (["topo", "--root", F / "gpu-no-mlx5"], 0, 1),  # warnings only: WARNING
        (
            ["topo", "--root", F / "gpu-no-mlx5", "--strict"],
            1,
            2,
        ),  # --strict: the warning fails, CRITICAL
        (["topo", "--root", F / "dgx-h100-faulty"], 1, 2),  # CRITICAL
        (["counters", "--root", F / "vm-no-rdma"], 3, 3),  # could not run: UNKNOWN
        (["topo", "--root", F / "missing"], 2, 3),  # usage error: UNKNOWN
    ],
)
def test_exit_codes_nagios(cli, argv, ibdiag_status, nagios):
    assert cli(*argv, "-o", "json").exit_code == ibdiag_status
    res = cli(*argv, "-o", "line", "--exit-codes", "nagios")
    assert res.exit_code == nagios, res.stdout + res.stderr


ASCII_ENV = {"PYTHONIOENCODING": "ascii", "LC_ALL": "C", "LANG": "C", "COLUMNS": "120"}


@pytest.mark.parametrize(
    "argv",
    [
        ["--help"],
        ["counters", "--help"],
        ["topo", "--root", F / "dgx-h100-faulty"],
        ["topo", "--root", F / "epyc-nps2"],
        ["counters", "--root", F / "counters-faulty"],
        [
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
            F / "dgx-h100",
        ],
        ["topo", "--root", F / "dgx-h100-faulty", "-o", "junit"],
    ],
)
def test_ascii_only_stdout_never_crashes(ibdiag_exe, argv):
    """A cron or Slurm pipe with an ASCII locale: a real process, its real stdout encoding."""
    res = subprocess.run(
        [ibdiag_exe, *map(str, argv)],
        env={**os.environ, **ASCII_ENV},
        capture_output=True,
        timeout=120,
    )
    assert res.returncode in (0, 1), res.stderr.decode(errors="replace")
    assert res.stdout.isascii() and res.stderr.isascii()
    assert b"UnicodeEncodeError" not in res.stderr and len(res.stdout) > 100
