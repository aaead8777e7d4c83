"""Two RAS readings: a communicator whose counts do not move is stuck (NVIDIA/nccl#1730's hang is
seen only this way); one whose counts move is fine."""

from __future__ import annotations

import json

from ibdiag.findings.model import Severity
from ibdiag.job.command import JobRequest, RasFile, RasLive, run
from ibdiag.job.rasclient import RasAddress
from tests.support.env import FIXTURES
from tests.support.ras_server import fake_ras

NCCL = FIXTURES / "nccl"


def progress(result):
    return [f for f in result.findings if f.check == "job.ras_progress"]


def test_the_same_mismatch_twice_is_stuck():
    f = RasFile(NCCL / "ras-2.29.7-mismatch.json")
    (stuck, *_) = progress(run(JobRequest(ras=f, ras_earlier=f)))
    assert stuck.severity is Severity.FAIL and stuck.subject == "d3a85c21e07f4b96"
    assert (
        "stuck — the same counts between the two readings, 2 rank(s) behind on AllReduce (rank(s) 20-21)"
        in stuck.message
    )


def test_counts_that_moved_are_fine_and_the_interval_comes_from_the_timestamps(tmp_path):
    doc = json.loads((NCCL / "ras-2.30.7-healthy.json").read_text())
    doc["timestamp"] = "2026-07-01 08:00:12"
    for r in doc["communicators"][0]["ranks"]:
        r["collective_counts"]["AllReduce"] += 40
    later = tmp_path / "later.json"
    later.write_text(json.dumps(doc))
    (p,) = progress(
        run(JobRequest(ras=RasFile(later), ras_earlier=RasFile(NCCL / "ras-2.30.7-healthy.json")))
    )
    assert p.severity is Severity.OK and p.message.endswith("AllReduce counts went up in 12 s")


def test_all_ranks_agreeing_and_still_warns():
    f = RasFile(NCCL / "ras-2.30.7-healthy.json")
    (p,) = progress(run(JobRequest(ras=f, ras_earlier=f)))
    assert p.severity is Severity.WARN and "no operation launched" in p.message


def test_text_reports_compare_their_mismatches():
    f = RasFile(NCCL / "ras-2.26.2-allgather-ahead.txt")
    (p,) = progress(run(JobRequest(ras=f, ras_earlier=f)))
    assert p.severity is Severity.FAIL and "30 rank(s) behind on AllGather" in p.message
    healthy = RasFile(NCCL / "ras-2.26.2-healthy-256.txt")
    (p,) = progress(run(JobRequest(ras=healthy, ras_earlier=healthy)))
    assert (
        p.severity is Severity.OK and "cannot" not in p.message and "no communicator" in p.message
    )


def test_live_twice():
    json_reply = (NCCL / "ras-2.29.7-mismatch.json").read_bytes()
    with fake_ras(json=json_reply) as s:
        r = run(JobRequest(ras=RasLive(RasAddress("127.0.0.1", s.port), again_s=0.2)))
        assert s.commands.count("STATUS") == 2
    (stuck, *_) = progress(r)
    assert stuck.severity is Severity.FAIL and "in 0.2 s" in stuck.message
