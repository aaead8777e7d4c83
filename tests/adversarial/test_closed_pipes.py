"""A reader that went away (stderr or stdout a closed pipe) never changes the exit status: a usage
error stays 2, an input error 2, could-not-run 3, a failing finding 1. Real processes, real pipes."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.support.env import SYSFS_FIXTURES

CASES = [
    (["topo", "--format", "bogus"], 2),  # click usage error
    (["--no-such-option"], 2),
    (["topo", "--root", "/nonexistent/tree"], 2),  # ibdiag input error
    (["counters", "--interval", "0"], 2),
    ([], 2),  # help on stdout, exit 2
    (["counters", "--root", str(SYSFS_FIXTURES / "vm-no-rdma")], 3),  # no RDMA port
    (["topo", "--root", str(SYSFS_FIXTURES / "dgx-h100-faulty")], 1),  # failing findings
    (["--version"], 0),
    (["topo", "--help"], 0),
]


def run_with_closed(ibdiag_exe: str, argv: list[str], *, stdout: bool, stderr: bool) -> int:
    r, w = os.pipe()
    os.close(r)  # nobody will ever read: every write gets EPIPE
    try:
        proc = subprocess.run(
            [ibdiag_exe, *argv],
            stdout=w if stdout else subprocess.DEVNULL,
            stderr=w if stderr else subprocess.DEVNULL,
            timeout=120,
        )
    finally:
        os.close(w)
    return proc.returncode


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("argv, status", CASES)
def test_a_closed_stderr_keeps_the_exit_status(ibdiag_exe, argv, status):
    assert run_with_closed(ibdiag_exe, argv, stdout=False, stderr=True) == status


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("argv, status", CASES)
def test_closed_stdout_and_stderr_keep_the_exit_status(ibdiag_exe, argv, status):
    assert run_with_closed(ibdiag_exe, argv, stdout=True, stderr=True) == status
