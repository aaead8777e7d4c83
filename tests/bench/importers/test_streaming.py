"""A long log is read as a stream: memory is bounded by the rows kept (one cycle), not by the file (issue 16).

The 1 GB / 10^6-row version is ``benchmarks/import_streaming.py`` (too slow for the suite); here a
~50 MB log with 10,000 rows and padded NCCL INFO lines, its peak Python allocation measured with
tracemalloc while it is read through the real file path.
"""

from __future__ import annotations

import gzip
import shutil
import tracemalloc

import pytest

from ibdiag.bench import importers
from ibdiag.bench.importers import source
from ibdiag.errors import InputError
from tests.support.biglog import SIZES, write


def test_a_50mb_log_is_read_in_bounded_memory(tmp_path):
    path = tmp_path / "big.log"
    size = write(path, rows=10_000, pad=5000)
    assert size > 48 * 2**20
    tracemalloc.start()
    try:
        run = importers.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    log = run.meta.nccl_tests
    assert (
        len(run.results) == 2 * len(SIZES)
        and log.cycles == 1000
        and all(c.cycles == 1000 for c in log.cycle_stats)
    )
    assert run.provenance.nccl_path.info_lines == 10_000
    assert peak < 8 * 2**20, f"peak {peak / 2**20:.1f} MiB for a {size / 2**20:.0f} MiB log"


def test_gzip_is_streamed_and_counted_after_decompression(tmp_path, monkeypatch):
    path = tmp_path / "big.log"
    write(path, rows=2000, pad=1000)
    gz = tmp_path / "big.log.gz"
    with open(path, "rb") as src, gzip.open(gz, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert gz.stat().st_size < 200_000 < path.stat().st_size
    assert importers.load(gz).meta.nccl_tests.cycles == 200
    monkeypatch.setattr(source, "MAX_BYTES", 1_000_000)  # the limit applies to what is decompressed
    with pytest.raises(InputError, match="after decompression"):
        importers.load(gz)
    with pytest.raises(InputError, match="more than 0 MiB"):
        importers.load(path)  # and to a plain file alike


def test_dev_zero_is_refused_before_it_is_opened_not_an_endless_read():
    with pytest.raises(InputError, match="a character device, not a regular file"):
        importers.load("/dev/zero")
