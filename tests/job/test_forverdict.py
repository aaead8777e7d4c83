"""``ibdiag verdict --inspector``: NCCL Inspector's production busbw as the verdict's measured source,
read by ``ibdiag.job`` (the project's Inspector fixtures, fixtures/nccl/inspector-*)."""

from __future__ import annotations

import json

from ibdiag.bench.results.collective_config import CollectiveConfig
from ibdiag.job.config import JobConfig
from ibdiag.job.forverdict import inspector_source
from tests.support.env import REPO

INSPECTOR = REPO / "fixtures" / "nccl" / "inspector-2.30.7"
VERDICT = ("verdict", "--params", "8e9", "--dtype", "bf16", "--ranks", "16", "--compute-s", "1")


def test_the_size_closest_to_the_bucket_of_the_largest_all_reduce():
    source = inspector_source([INSPECTOR], JobConfig(), CollectiveConfig())
    small = source(25 * 2**20, 16)  # DDP's bucket: the AllReduce at 256 MiB is the closer one
    big = source(2**30, 16)
    assert small.source == "inspector" and small.size_bytes == 256 * 2**20 and small.busbw_gbs > 0
    assert big.size_bytes == 2**30 and "AllGather" not in big.how
    assert not big.notes  # the communicator has the job's 16 ranks
    assert source(2**30, 64).notes  # a job of another size is said to differ


def test_through_verdict_on_the_command_line(cli):
    res = cli(*VERDICT, "--bucket", "256MiB", "--inspector", str(INSPECTOR), "-o", "json")
    assert res.exit_code in (0, 1), res.stderr
    doc = json.loads(res.stdout)
    assert doc["busbw_source"]["source"] == "inspector"
    assert doc["busbw_source"]["size_bytes"] == 256 * 2**20
    res = cli(*VERDICT, "--inspector", str(INSPECTOR), "--busbw", "3")
    assert res.exit_code == 2 and "--busbw and --inspector" in res.stderr
    res = cli(*VERDICT, "--inspector", str(REPO / "fixtures" / "nccl" / "hosts"))
    assert res.exit_code == 2 and "hint:" in res.stderr
