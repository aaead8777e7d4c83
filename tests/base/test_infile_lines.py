"""infile.iter_lines: a large log streamed within a budget, long lines skipped and marked."""

from __future__ import annotations

import os

import pytest

from ibdiag.infile import RefusedFile, iter_lines


def test_lines_long_lines_and_the_last_line(tmp_path):
    p = tmp_path / "log"
    long = b"y" * (3 << 20)  # longer than a read chunk: spans several
    p.write_bytes(b"a\n" + long + b"\nb\n\nc")
    assert list(iter_lines(p, 1 << 30, 1000)) == [b"a", None, b"b", b"", b"c"]
    p.write_bytes(b"a\n" + long)
    assert list(iter_lines(p, 1 << 30, 1000)) == [b"a", None]


def test_budget_and_special_files(tmp_path):
    p = tmp_path / "log"
    p.write_bytes(b"x\n" * 1000)
    with pytest.raises(RefusedFile, match="more than the 100 bytes"):
        list(iter_lines(p, 100, 10))
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(RefusedFile, match="FIFO"):
        list(iter_lines(fifo, 100, 10))
