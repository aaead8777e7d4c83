"""Input files that did not go through the checked reader (issue 42, "every input file the project
reads goes through one checked reader"): ``bench import FILE`` opened its log with ``open()`` (a FIFO
hung it, a device was opened), ``--token-file`` read a file whole (``/dev/zero`` until memory ran
out), and a tree's saved ``dcb -j`` output was parsed by ``json.loads`` (``"[" * 100000`` was a
RecursionError). Each now: the type checked before the open, a size budget, jsonread's budget."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ibdiag.bench.p2p.control.protocol import read_token_file
from ibdiag.errors import InputError
from tests.adversarial.test_report_devices import _blocked_writer
from tests.support.cli import run_cli
from tests.support.env import SYSFS_FIXTURES


def test_bench_import_never_opens_a_fifo(tmp_path: Path) -> None:
    fifo = tmp_path / "nccl.log"
    os.mkfifo(fifo)
    opened, t = _blocked_writer(fifo)
    try:
        res = run_cli("bench", "import", str(fifo))
        assert not opened.wait(0.5), "bench import opened the FIFO"
        assert res.exit_code == 2, (res.exit_code, res.stderr)
        assert "a FIFO, not a regular file" in res.stderr and "hint:" in res.stderr
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # release the writer
        t.join(5)
        os.close(fd)


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/null"])
def test_bench_import_refuses_a_device(device: str) -> None:
    res = run_cli("bench", "import", device)
    assert res.exit_code == 2, (res.exit_code, res.stderr)
    assert "a character device, not a regular file" in res.stderr


def test_a_token_file_is_a_small_regular_file(tmp_path: Path) -> None:
    for path, said in (
        (Path("/dev/zero"), "a character device"),
        (tmp_path, "a directory"),
    ):
        with pytest.raises(InputError, match=said):
            read_token_file(path)
    big = tmp_path / "token"
    with open(big, "wb") as out:
        out.truncate(2**30)  # sparse: a GiB of zero bytes
    with pytest.raises(InputError, match="allowed"):
        read_token_file(big)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    opened, t = _blocked_writer(fifo)
    try:
        with pytest.raises(InputError, match="a FIFO"):
            read_token_file(fifo)
        assert not opened.wait(0.5)
    finally:
        fd = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
        t.join(5)
        os.close(fd)


@pytest.mark.parametrize(
    "content",
    [
        "[" * 60_000,
        '{"prio_pfc": ' + "[" * 5_000 + "]" * 5_000 + "}",
        '{"pfc_cap": ' + "9" * 5000 + "}",
    ],
    ids=["deep", "deep inside", "a 5000-digit number"],
)
def test_a_trees_saved_dcb_output_is_parsed_within_the_budget(tmp_path: Path, content: str) -> None:
    """``topo --root TREE`` reads ``TREE/dcb/<netdev>/pfc.json`` (what ``dcb -j`` printed): a bad one
    makes the lossless settings unknown, never an internal error."""
    root = tmp_path / "tree"
    shutil.copytree(SYSFS_FIXTURES / "roce-lossless", root, symlinks=True)
    (root / "dcb" / "enp155s0np0" / "pfc.json").write_text(content)
    res = run_cli("topo", "--root", str(root), "-o", "json")
    assert res.exit_code in (0, 1), (res.exit_code, res.stderr[-500:])
    assert "internal error" not in res.stderr
    assert "unreadable output" in res.stdout
