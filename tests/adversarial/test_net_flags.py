"""Flags of ``bench p2p`` and ``bench serve`` out of range: exit 2 with a message naming the bad value,
before any connection — never a connection to another port, "cannot resolve", or an internal error."""

from __future__ import annotations

import pytest

P2P = [
    (["--port", "70000"], "--port 70000"),
    (["--port", "-1"], "--port -1"),
    (["--port", str(2**64)], f"--port {2**64}"),
    (["--port", "0"], "--port 0"),
    (["--socket-buffer", "4G"], "--socket-buffer 4294967296"),
    (["--socket-buffer", "100"], "--socket-buffer 100"),
    (["--timeout", "nan"], "--timeout must be a finite number, not nan"),
    (["--timeout", "inf"], "--timeout must be a finite number, not inf"),
    (["--timeout", "0"], "--timeout 0"),
    (["--ib-port", "256"], "--ib-port 256"),
    (["--ib-port", "0"], "--ib-port 0"),
    (["--transport", "rdma", "--gid-index", "-1"], "--gid-index -1"),
    (["--line-rate-gbps", "inf"], "--line-rate-gbps inf"),
    (["--sizes", "2T"], "--sizes item 2199023255552"),
    (["--iters", "0"], "--iters 0"),
    (["--streams", "33"], "--streams 33"),
    (["--tx-depth", "0"], "--tx-depth 0"),
    (["--duration", "1e9"], "--duration 1000000000"),
]


@pytest.mark.parametrize(("args", "named"), P2P, ids=[" ".join(a) for a, _ in P2P])
def test_p2p_flag_out_of_range_is_exit_2_naming_it(cli, args, named):
    r = cli("bench", "p2p", "127.0.0.1", *args)
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert r.stderr.startswith("ibdiag: error: ") and named in r.stderr, r.stderr
    assert "hint: " in r.stderr
    assert (
        "internal error" not in r.stderr
        and "cannot resolve" not in r.stderr
        and r.exception is None
    )


@pytest.mark.parametrize(
    "host", ["a" * 300, "node-" + "x" * 64 + ".example", "bad host", "node\n-a", "[::1"]
)
def test_p2p_unusable_host_is_exit_2_naming_it(cli, host):
    r = cli("bench", "p2p", host, "--timeout", "1")
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert r.stderr.startswith("ibdiag: error: HOST ") and "is not a host name" in r.stderr, (
        r.stderr
    )
    assert (
        len(r.stderr.splitlines()[0]) < 200 and "\n-a" not in r.stderr
    )  # named, escaped and short
    assert r.exception is None


@pytest.mark.parametrize(
    "host", ["127.0.0.1", "::1", "[::1]", "localhost", "node-a.cluster.example"]
)
def test_p2p_usable_hosts_get_past_the_check(cli, host):
    """A valid name is not refused by the check (nothing listens on port 1, so exit 3)."""
    r = cli("bench", "p2p", host, "--port", "1", "--timeout", "1")
    assert r.exit_code == 3, r.stderr
    assert "is not a host name" not in r.stderr


SERVE = [
    (["--port", "70000"], "--port 70000"),
    (["--port", "-1"], "--port -1"),
    (["--socket-buffer", "4G"], "--socket-buffer 4294967296"),
    (["--timeout", "nan"], "--timeout must be a finite number"),
    (["--ib-port", "300"], "--ib-port 300"),
    (["--bind", "b" * 300], "--bind "),
]


@pytest.mark.parametrize(("args", "named"), SERVE, ids=[" ".join(a)[:30] for a, _ in SERVE])
def test_serve_flag_out_of_range_is_exit_2_naming_it(cli, args, named):
    r = cli("bench", "serve", *args)
    assert r.exit_code == 2, (r.exit_code, r.stderr)
    assert r.stderr.startswith("ibdiag: error: ") and named in r.stderr, r.stderr
    assert "internal error" not in r.stderr and r.exception is None
