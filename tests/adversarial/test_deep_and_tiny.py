"""Issue 28, case 10: a directory tree ~990 levels deep given to ``report DIR`` (a RecursionError in
rglob before), and subnormal numbers given to ``verdict`` (``--busbw 1e-310``, ``--compute-s 1e-320``:
an OverflowError in the overlap model before) — each a clear answer, never an internal error."""

from __future__ import annotations

import os

import pytest

from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES


def _remove_deep(top):
    """Remove the chain ``top/d/d/...`` without recursion (pytest's clean-up of tmp_path recurses and
    would fail on it, for every later session sharing the base directory)."""
    fds = [os.open(top, os.O_RDONLY)]
    while True:
        try:
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fds[-1]))
        except FileNotFoundError:
            break
    for name in os.listdir(fds[-1]):
        os.unlink(name, dir_fd=fds[-1])
    for i in range(len(fds) - 1, 0, -1):
        os.close(fds[i])
        os.rmdir("d", dir_fd=fds[i - 1])
    os.close(fds[0])


def _deep_tree(top, levels, content):
    fd = os.open(top, os.O_RDONLY)
    try:  # built with *at calls: the whole path is longer than a path may be
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            new = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = new
        with open(os.open("deep.json", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd), "w") as f:
            f.write(content)
    finally:
        os.close(fd)


def test_a_990_level_tree_is_walked_without_recursion_and_its_depth_bounded(tmp_path):
    good = run_cli("topo", "--root", str(SYSFS_FIXTURES / "dgx-h100"), "-o", "json")
    top = tmp_path / "fleet"
    top.mkdir()
    (top / "node.json").write_text(good.stdout)
    try:
        _deep_tree(top, 990, good.stdout)
        res = run_cli("report", str(top), "-o", "json")
    finally:
        _remove_deep(top)
    assert res.exception is None and "internal error" not in res.stderr, res.stderr
    assert res.exit_code in (0, 1), res.stderr
    assert "deeper than 32 levels" in res.stdout


@pytest.mark.parametrize("flag", [["--busbw", "1e-310"], ["--compute-s", "1e-320"]])
def test_subnormal_verdict_inputs_are_refused_with_exit_2(flag):
    base = {"--busbw": "360", "--compute-s": "2"}
    base[flag[0]] = flag[1]
    args = ["verdict", "--params", "8e9", "--dtype", "bf16", "--ranks", "512"]
    for k, v in base.items():
        args += [k, v]
    res = run_cli(*args)
    assert res.exception is None, res.exception
    assert res.exit_code == 2, res.stderr
    assert "absurdly small" in res.stderr and "hint:" in res.stderr
