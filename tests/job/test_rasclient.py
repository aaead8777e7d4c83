"""The live RAS client against a fake RAS service on 127.0.0.1 (a real socket server in a thread:
tests/support/ras_server.py); the hostile variants are in tests/adversarial/test_net_ras.py."""

from __future__ import annotations

import pytest

from ibdiag.errors import CannotRunError, UsageError
from ibdiag.job.command import JobRequest, RasLive, run
from ibdiag.job.config import JobConfig
from ibdiag.job.rasclient import RasAddress, parse_address, query
from tests.support.env import FIXTURES
from tests.support.ras_server import fake_ras, free_port

NCCL = FIXTURES / "nccl"
TEXT = (NCCL / "ras-2.26.2-allgather-ahead.txt").read_bytes()
JSON = (NCCL / "ras-2.29.7-mismatch.json").read_bytes()


def live(server, **kw):
    return RasLive(RasAddress("127.0.0.1", server.port), **kw)


def test_json_when_the_server_speaks_it():
    with fake_ras(text=TEXT, json=JSON) as s:
        reply = query(RasAddress("127.0.0.1", s.port), timeout_s=5, max_bytes=1 << 20)
        assert reply.format == "json" and reply.data == JSON
        assert s.commands == ["CLIENT PROTOCOL 2", "SET FORMAT json", "STATUS"]


def test_an_older_nccl_answers_with_text_and_a_note():
    with fake_ras(text=TEXT, json=JSON, behaviour="old") as s:
        res = run(JobRequest(ras=live(s)))
        assert res.ras is not None and res.ras.format == "text" and res.ras.nccl_version == "2.26.2"
        assert any("older than 2.28.7" in n for n in res.ras.notes)
        assert res.ras.source == f"127.0.0.1:{s.port}"


def test_verbose_timeout_and_text_on_request():
    with fake_ras(text=TEXT, json=JSON) as s:
        query(
            RasAddress("127.0.0.1", s.port),
            timeout_s=5,
            max_bytes=1 << 20,
            json=False,
            verbose=True,
            collective_timeout_s=9,
        )
        assert s.commands == ["CLIENT PROTOCOL 2", "TIMEOUT 9", "VERBOSE STATUS"]


def test_the_job_is_gone():
    port = free_port()
    with pytest.raises(CannotRunError) as e:
        run(
            JobRequest(
                ras=RasLive(RasAddress("127.0.0.1", port)), config=JobConfig(ras_timeout_s=3)
            )
        )
    assert "no RAS service at 127.0.0.1" in e.value.message and "NCCL_RAS_ENABLE" in (
        e.value.hint or ""
    )
    assert e.value.exit_status == 3


@pytest.mark.parametrize(
    "text, host, port",
    [
        ("localhost:28028", "localhost", 28028),
        ("10.0.0.5", "10.0.0.5", 28028),
        ("[::1]:28029", "::1", 28029),
        (":28030", "localhost", 28030),
        ("", "localhost", 28028),
    ],
)
def test_addresses(text, host, port):
    a = parse_address(text)
    assert (a.host, a.port) == (host, port)


@pytest.mark.parametrize("text", ["host:0", "host:70000", "a b", "host:port", "[::1", "x" * 300])
def test_bad_addresses(text):
    with pytest.raises(UsageError):
        parse_address(text)


def test_localhost_resolves_to_ipv6_too():
    """NCCL binds localhost, which may be ::1 (NVIDIA/nccl#1669's log shows ``::1<28028>``): the
    client tries every address localhost resolves to."""
    with fake_ras(text=TEXT, json=JSON) as s:
        reply = query(RasAddress("localhost", s.port), timeout_s=5, max_bytes=1 << 20)
        assert reply.format == "json"
