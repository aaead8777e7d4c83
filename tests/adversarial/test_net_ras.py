"""A RAS service is a peer: slow, silent, endless, huge, rude or lying replies end in a clear error
(exit 3) within the deadline, never a hang, a traceback or unbounded memory.

The fake service (tests/support/ras_server.py) is a real TCP server in a thread; the deadline bound
(T + 2 s) is a correctness bound, not a benchmark.
"""

from __future__ import annotations

import time

import pytest

from ibdiag.errors import CannotRunError, PeerTimeoutError
from ibdiag.job.command import JobRequest, RasLive, run
from ibdiag.job.config import JobConfig
from ibdiag.job.rasclient import RasAddress
from tests.support.env import FIXTURES
from tests.support.ras_server import fake_ras

T = 2.0
TEXT = (FIXTURES / "nccl" / "ras-2.26.2-allgather-ahead.txt").read_bytes()
JSON = (FIXTURES / "nccl" / "ras-2.29.7-mismatch.json").read_bytes()


def ask(server, max_bytes: int = 1 << 20):
    cfg = JobConfig(ras_timeout_s=T, max_ras_bytes=max_bytes)
    t0 = time.monotonic()
    try:
        run(JobRequest(ras=RasLive(RasAddress("127.0.0.1", server.port)), config=cfg))
    except CannotRunError as e:
        return e, time.monotonic() - t0
    raise AssertionError("the hostile service was believed")


@pytest.mark.parametrize(
    "behaviour, kind, words",
    [
        ("silent", PeerTimeoutError, "did not greet in time"),
        ("slow", PeerTimeoutError, "did not finish its report in time"),
        ("endless", PeerTimeoutError, "did not finish its report in time"),
        ("hang", PeerTimeoutError, "did not finish its report in time"),
        ("close", CannotRunError, "closed the connection"),
        ("greeting", CannotRunError, "it is not NCCL's RAS"),
        ("longline", CannotRunError, "longer than 1024 bytes"),
        ("garbage", CannotRunError, "sent no status"),
    ],
)
def test_hostile_services_end_in_a_clear_error_within_the_deadline(behaviour, kind, words):
    with fake_ras(text=TEXT, json=JSON, behaviour=behaviour) as s:
        e, took = ask(s)
    assert isinstance(e, kind), e
    assert words in e.message, e.message
    assert e.exit_status == 3 and e.hint
    assert took <= T + 2.0, f"{behaviour}: {took:.2f} s"
    assert "\x00" not in e.message and "\x1b" not in e.message


def test_a_huge_reply_is_cut_at_the_budget():
    with fake_ras(text=TEXT, json=JSON, behaviour="huge", huge_bytes=16 << 20) as s:
        e, _ = ask(s, max_bytes=1 << 20)
    assert "larger than 1048576 bytes" in e.message and "max_ras_bytes" in (e.hint or "")


def test_a_reset_half_way_is_a_lost_connection_or_a_bad_report():
    with fake_ras(text=TEXT, json=JSON, behaviour="reset") as s:
        e, _ = ask(s)
    assert "closed the connection" in e.message or "sent no status" in e.message
