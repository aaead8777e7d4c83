"""Kernel log text is untrusted (issue 42, items 1 and 7): every pattern applied to it runs in time
linear in the line's length on crafted long lines, a line is cut before any pattern sees it, and a
name from the log (an interface, a host) reaches no terminal, JUnit file or Prometheus label raw.
The NCCL-line patterns ``bench import`` added for logs without a table are timed the same way."""

from __future__ import annotations

import json
import re
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from ibdiag.bench.importers import context, transport
from ibdiag.history import kernlines, kernlog
from ibdiag.history.kernlines import MAX_LINE, parse_line
from ibdiag.history.kernlog import match
from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES

PATTERNS = [*kernlines.PATTERNS, *kernlog.PATTERNS]
#: What gets a pattern past its first parts, so a filler lands where it could backtrack.
PREFIXES = [
    "",
    "mlx5_core 0000:47:00.0 ",
    "mlx5_core 0000:47:00.0: ",
    "mlx5_core 0000:47:00.0: port_module:1107:(pid 0): Port module event: module 0, ",
    "mlx5_core 0000:47:00.0: mlx5_cmd_out_err:838:(pid 1): ACCESS_REG(0x805) op_mod(0x1) failed, ",
    "pcieport 0000:00:1c.0: PCIe Bus Error: severity=",
    "mlx5_core 0000:47:00.1: 126.024 Gb/s available PCIe bandwidth, limited by ",
    "Dec  1 03:12:40 ",
    "2026-12-01T03:12:40 ",
    "-- Logs begin at Mon 2026-11-30 00:00:02 UTC, end at ",
    "[",
    "12,",
]
FILLERS = ["a", " ", "0", "0:", "[ ", ", ", "1.", "x, ", ": ", "(pid 1): ", "-", "\t", "A_"]


def _cpu(fn) -> float:
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        fn()
        best = min(best, time.process_time() - t0)
    return best


@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.pattern[:40])
def test_every_pattern_is_linear_on_crafted_long_lines(pattern: re.Pattern[str]) -> None:
    """8x the text costs about 8x the time (a quadratic pattern: 64x); CPU time, best of three, so a
    busy machine does not decide it. Under 20 ms for the long text passes whatever the ratio."""
    for prefix in PREFIXES:
        for filler in FILLERS:
            short = prefix + filler * (8192 // len(filler))
            long = prefix + filler * (65536 // len(filler))
            t_short = _cpu(lambda s=short: (pattern.match(s), pattern.fullmatch(s)))
            t_long = _cpu(lambda s=long: (pattern.match(s), pattern.fullmatch(s)))
            assert t_long < 0.02 or t_long < 24 * max(t_short, 1e-4), (
                f"{pattern.pattern[:60]!r} on {prefix[:30]!r} + {filler!r}*n: {t_short:.4f}s -> {t_long:.4f}s"
            )


NCCL_PATTERNS = [*transport.UNTRUSTED_PATTERNS, *context.UNTRUSTED_PATTERNS]
NCCL_PREFIXES = [
    "",
    "node01:61000:61020 [0] ",
    "NET/IB : Got completion from peer ",
    "NET/IB: Got completion from peer 10.0.0.2<5> with status=12 opcode=0 len=0 vendor err 129 (Recv) localGid",
    "NET/IB: NCCL Dev 0 IbDev 0 Port 1 qpn 576 mtu 3 GID 3 (",
    "mlx5: node01: ",
    "00000000 ",
]


@pytest.mark.parametrize("pattern", NCCL_PATTERNS, ids=lambda p: p.pattern[:40])
def test_the_nccl_log_patterns_are_linear_when_searched(pattern: re.Pattern[str]) -> None:
    """The importers' NCCL-line patterns added for row-less logs, searched as the importer does."""
    for prefix in NCCL_PREFIXES:
        for filler in [*FILLERS, "node01:1:1 [0] ", "0/", "a."]:
            short = prefix + filler * (8192 // len(filler))
            long = prefix + filler * (65536 // len(filler))
            t_short = _cpu(lambda s=short: (pattern.search(s), pattern.match(s)))
            t_long = _cpu(lambda s=long: (pattern.search(s), pattern.match(s)))
            assert t_long < 0.02 or t_long < 24 * max(t_short, 1e-4), (
                f"{pattern.pattern[:60]!r} on {prefix[:30]!r} + {filler!r}*n: {t_short:.4f}s -> {t_long:.4f}s"
            )


@pytest.mark.parametrize("filler", FILLERS)
def test_a_line_of_a_megabyte_costs_no_more_than_its_first_kilobytes(filler: str) -> None:
    for prefix in PREFIXES:
        huge = prefix + filler * (2**20 // len(filler))
        t = _cpu(lambda h=huge: match(parse_line(h) or parse_line("x")))  # type: ignore[arg-type]
        assert t < 0.05, f"{prefix[:30]!r} + {filler!r}: {t:.3f}s"
        line = parse_line(huge)
        assert line is None or len(line.message) <= MAX_LINE


EVIL = [
    "\x1b]0;owned\x07",  # set the window title
    "\x1b[2J\x1b[H",  # clear the screen
    "\x1b]52;c;ZWNobyBwd25lZA==\x07",  # write the clipboard
    "\x08\x7f\u202e",  # backspace, DEL, right-to-left override
]


def _hostile_log(tmp_path: Path) -> Path:
    lines = []
    for i, evil in enumerate(EVIL):
        lines += [
            f"Dec  1 03:1{i}:40 node{evil} kernel: mlx5_core 0000:47:00.{i} eth{i}{evil}: Link down",
            f"Dec  1 03:1{i}:44 node{evil} kernel: mlx5_core 0000:47:00.{i} eth{i}{evil}: Link up",
            f"Dec  1 03:1{i}:45 node{evil} kernel: mlx5_core 0000:47:00.{i}: Port module event[error]: module {i}, Cable error, {evil}",
            f"[ 9{i}.5] infiniband rxe{evil}: set down",
        ]
    log = tmp_path / "hostile.log"
    log.write_text("\n".join(lines) + "\n")
    return log


@pytest.mark.parametrize("fmt", ["table", "junit", "prom", "json", "line"])
def test_names_from_a_kernel_log_reach_no_output_raw(tmp_path: Path, fmt: str) -> None:
    log = _hostile_log(tmp_path)
    res = run_cli(
        "counters",
        "--root",
        str(SYSFS_FIXTURES / "rxe-node"),
        "--kernel-log",
        str(log),
        "-o",
        fmt,
        columns=200,
    )
    assert res.exception is None, res.exception
    assert res.exit_code == 1, res.stderr
    for stream in (res.stdout, res.stderr):
        assert not any(ch in stream for ch in "\x1b\x07\x08\x7f\u202e"), repr(stream[:400])
    if fmt == "junit":
        ET.fromstring(res.stdout)  # valid XML
    if fmt == "json":
        doc = json.loads(res.stdout)
        subjects = [f["subject"] for f in doc["findings"] if f["check"] == "kernel.link"]
        assert len(subjects) == 2 * len(EVIL) - 1 or len(subjects) >= len(EVIL)
        assert all("\\x1b" in s or "\\x08" in s for s in subjects), subjects
