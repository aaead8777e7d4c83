"""A live ``ibdiag fabric`` reads what the tools print within the budget a dump's file has (issue 42,
item 2, part 2): the tools' output was read whole, however much they printed. A tool that prints more
than 256 MiB on a stream is stopped, exit 3, naming it. A real process stands in for the tool (an
executable named ``ibnetdiscover`` first on PATH): no InfiniBand tool prints that much on its own."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from ibdiag.errors import CannotRunError
from ibdiag.fabric.collect import run_tool
from tests.support.cli import run_cli

#: What a dump keeps of one file, and a live run of one stream (ibdiag.fabric.collect.MAX_OUTPUT_BYTES).
MAX_OUTPUT_BYTES = 256 * 2**20


def _tool(tmp_path: Path, name: str, body: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    tool = bin_dir / name
    tool.write_text("#!/bin/sh\n" + body + "\n")
    tool.chmod(0o755)
    return bin_dir


@pytest.mark.parametrize("stream", ["stdout", "stderr"])
def test_a_tool_that_prints_past_the_budget_is_stopped_exit_3(tmp_path: Path, stream: str) -> None:
    redirect = " 1>&2" if stream == "stderr" else ""
    bin_dir = _tool(
        tmp_path, "ibnetdiscover", f"head -c {MAX_OUTPUT_BYTES + 2**20} /dev/zero{redirect}"
    )
    t0 = time.monotonic()
    r = run_cli("fabric", env={"PATH": f"{bin_dir}:{os.environ.get('PATH', '')}"})
    assert r.exit_code == 3, (r.exit_code, r.stderr[-600:])
    assert "ibnetdiscover printed more than 256 MiB: stopped" in r.stderr, r.stderr
    assert "hint:" in r.stderr and time.monotonic() - t0 < 60


def test_run_tool_keeps_what_a_tool_printed_before_its_time_limit(tmp_path: Path) -> None:
    bin_dir = _tool(tmp_path, "slow", "echo started; echo warned 1>&2; exec sleep 30")
    t0 = time.monotonic()
    out, err, rc, elapsed = run_tool([str(bin_dir / "slow")], {"PATH": "/usr/bin:/bin"}, 1.0)
    assert (out, err, rc) == ("started\n", "warned\n", None)
    assert 1.0 <= elapsed < 10 and time.monotonic() - t0 < 10


def test_run_tool_returns_a_tools_output_and_status(tmp_path: Path) -> None:
    bin_dir = _tool(tmp_path, "t", "printf 'a%.0s' $(seq 1 100000); echo; echo e 1>&2; exit 7")
    out, err, rc, _ = run_tool([str(bin_dir / "t")], {"PATH": "/usr/bin:/bin"}, 30.0)
    assert (len(out), err, rc) == (100_001, "e\n", 7)


def test_run_tool_raises_for_too_much_output_not_a_truncated_run(tmp_path: Path) -> None:
    bin_dir = _tool(tmp_path, "t", f"head -c {MAX_OUTPUT_BYTES + 1} /dev/zero")
    with pytest.raises(CannotRunError, match="t printed more than 256 MiB"):
        run_tool([str(bin_dir / "t")], {"PATH": "/usr/bin:/bin"}, 60.0)
