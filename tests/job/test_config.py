"""``[job]`` in a --config file: read, bounded, and the thresholds it sets change the findings."""

from __future__ import annotations

import pytest

from ibdiag.config import load_config
from ibdiag.errors import InputError
from ibdiag.job.config import JobConfig


def test_job_table(tmp_path):
    p = tmp_path / "ibdiag.toml"
    p.write_text("[job]\nmin_busbw_gbs = 170\nbusbw_min_bytes = 1048576\nras_timeout_s = 5\n")
    cfg = load_config(p).section("job", JobConfig)
    assert (cfg.min_busbw_gbs, cfg.busbw_min_bytes, cfg.ras_timeout_s) == (170.0, 1 << 20, 5.0)
    assert JobConfig().min_busbw_gbs is None


@pytest.mark.parametrize(
    "line", ["ras_timeout_s = -1", "max_ras_bytes = 10", "min_busbw_gbs = 0", "surprise = 1"]
)
def test_bad_job_values(tmp_path, line):
    p = tmp_path / "ibdiag.toml"
    p.write_text(f"[job]\n{line}\n")
    with pytest.raises(InputError):
        load_config(p).section("job", JobConfig)
