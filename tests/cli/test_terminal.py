"""Output off a terminal (issue #27): under mpirun a rank's stdout is a pty of no size that ends in a
file; there, as on a pipe, no colour, the full width and no cell cut. NO_COLOR, FORCE_COLOR and COLUMNS
are honoured. The console script in a real pty (``pty.openpty``) or on a pipe."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import termios

import pytest

from tests.support.env import SYSFS_FIXTURES

FAULTY = ["topo", "--root", str(SYSFS_FIXTURES / "dgx-h100-faulty")]
ANSI = "\x1b["


def _env(**extra: str) -> dict[str, str]:
    base = {
        k: v
        for k, v in os.environ.items()
        if k not in ("COLUMNS", "LINES", "NO_COLOR", "FORCE_COLOR")
    }
    return {**base, "TERM": "xterm-256color", **extra}


def _in_pty(ibdiag_exe, columns: int, **extra: str) -> str:
    """stdout and stderr on a pty of ``columns`` columns (0: mpirun's, no size set)."""
    leader, follower = pty.openpty()
    if columns:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 50, columns, 0, 0))
    proc = subprocess.Popen(
        [ibdiag_exe, *FAULTY],
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env=_env(**extra),
    )
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the pty
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(60)
    os.close(leader)
    return b"".join(chunks).decode("utf-8", "replace").replace("\r\n", "\n")


def _widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_a_pty_of_no_size_is_laid_out_as_a_pipe(ibdiag_exe):
    out = _in_pty(ibdiag_exe, 0)  # what mpirun gives a rank
    assert "mlx5_6" in out and ANSI not in out and "…" not in out
    assert _widest(out) > 120  # not 80 columns
    sized = _in_pty(ibdiag_exe, 80)  # a person's terminal: colour, its width
    assert ANSI in sized and "at 80 columns, left out:" in sized


@pytest.mark.parametrize(
    "extra,colour",
    [({}, False), ({"FORCE_COLOR": "1"}, True), ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, False)],
)
def test_a_pipe_has_colour_only_when_forced(ibdiag_exe, extra, colour):
    res = subprocess.run([ibdiag_exe, *FAULTY], capture_output=True, text=True, env=_env(**extra))
    assert res.returncode == 1 and (ANSI in res.stdout) is colour


COLOUR = re.compile(r"\x1b\[[0-9;]*?(?:^|;)(?:3[0-9]|9[0-7]|38;5)")  # an SGR foreground colour


def test_no_color_on_a_terminal(ibdiag_exe):
    assert COLOUR.search(_in_pty(ibdiag_exe, 120))  # the test can fail
    assert not COLOUR.search(_in_pty(ibdiag_exe, 120, NO_COLOR="1"))


def test_a_pipe_cuts_nothing_and_columns_is_honoured(cli, monkeypatch):
    """The layout width off a terminal made narrower than topo's tables need (as a 250-character host
    name would make a sweep table): they are printed whole, not ``gpu-no…``; $COLUMNS is obeyed."""
    monkeypatch.setattr("ibdiag.cli.env.OFF_TERMINAL_COLUMNS", 60)
    piped = cli(*FAULTY, env={"COLUMNS": None})
    assert "mlx5_10:1" in piped.stdout and "…" not in piped.stdout and _widest(piped.stdout) > 60
    narrow = cli(*FAULTY, env={"COLUMNS": "60"})
    table_rows = [line for line in narrow.stdout.splitlines() if line[:1] in "┏┃┡│└"]
    assert "at 60 columns, left out:" in narrow.stdout  # asked for: 60 columns
    assert max(map(len, table_rows)) <= 60
