"""The control channel: framing, deadlines, tokens and the handshake, over real sockets."""

from __future__ import annotations

import socket
import struct
import threading
import time

import pytest

from ibdiag.bench.p2p.control import protocol
from ibdiag.bench.p2p.control.protocol import (
    MAX_MESSAGE_BYTES,
    Channel,
    PeerClosedError,
    ProtocolError,
    Refused,
    RemoteError,
    client_handshake,
    client_mac,
    decode,
    encode,
    is_loopback,
    read_token_file,
    server_handshake,
    server_mac,
    token_from_env,
)
from ibdiag.bench.p2p.params import RunRequest, auto_warmup, latency_iterations
from ibdiag.errors import CannotRunError, ExitStatus, InputError, PeerTimeoutError


@pytest.fixture
def pair():
    """Two connected TCP sockets on loopback (real kernel sockets)."""
    ls = socket.socket()
    ls.bind(("127.0.0.1", 0))
    ls.listen()
    a = socket.create_connection(ls.getsockname())
    b, _ = ls.accept()
    ls.close()
    yield a, b
    a.close()
    b.close()


def test_encode_decode_round_trip():
    msg = {"type": "phase", "kind": "bw", "bytes": 65536}
    framed = encode(msg)
    (length,) = struct.unpack("!I", framed[:4])
    assert length == len(framed) - 4
    assert decode(framed[4:]) == msg


@pytest.mark.parametrize(
    "payload", [b"not json", b"[1,2]", b'{"no":"type"}', b'{"type":3}', b"\xff\xfe"]
)
def test_decode_refuses_non_messages(payload):
    with pytest.raises(ValueError):
        decode(payload)


def test_encode_refuses_oversized_messages():
    with pytest.raises(ValueError):
        encode({"type": "x", "pad": "a" * MAX_MESSAGE_BYTES})


def test_channel_round_trip(pair):
    a, b = pair
    Channel(a, "b", 2).send({"type": "hello", "n": 1})
    assert Channel(b, "a", 2).recv("a hello") == {"type": "hello", "n": 1}


def test_channel_deadline_names_what_it_waited_for(pair):
    a, b = pair
    ch = Channel(b, "peer-a", 0.3)
    t0 = time.monotonic()
    with pytest.raises(PeerTimeoutError) as e:
        ch.recv("the answer to everything")
    assert time.monotonic() - t0 < 2.0
    assert "the answer to everything" in e.value.message and "0.3 s" in e.value.message


def test_channel_deadline_covers_a_half_sent_message(pair):
    a, b = pair
    a.sendall(struct.pack("!I", 100) + b'{"type":')  # then stall
    with pytest.raises(PeerTimeoutError):
        Channel(b, "a", 0.3).recv("a message")


def test_channel_refuses_an_oversized_header(pair):
    a, b = pair
    a.sendall(b"GET / HTTP/1.1\r\n\r\n")
    with pytest.raises(ProtocolError) as e:
        Channel(b, "a", 2).recv("a hello")
    assert "1195725856-byte" in e.value.message


def test_channel_refuses_malformed_json(pair):
    a, b = pair
    a.sendall(struct.pack("!I", 5) + b"hello")
    with pytest.raises(ProtocolError):
        Channel(b, "a", 2).recv("a hello")


def test_channel_peer_closed(pair):
    a, b = pair
    a.close()
    with pytest.raises(PeerClosedError) as e:
        Channel(b, "peer-a", 2).recv("the result")
    assert "peer-a closed the connection" in e.value.message
    assert "the result" in e.value.message


def test_expect_turns_error_messages_into_remote_errors(pair):
    a, b = pair
    Channel(a, "b", 2).send_error("refused", "too big", "ask for less")
    with pytest.raises(RemoteError) as e:
        Channel(b, "srv", 2).expect("ready", "the server")
    assert e.value.code == "refused"
    assert e.value.exit_status == ExitStatus.USAGE
    assert e.value.hint == "ask for less"
    Channel(a, "b", 2).send_error("busy", "busy")
    with pytest.raises(RemoteError) as e2:
        Channel(b, "srv", 2).expect("ready", "the server")
    assert e2.value.exit_status == ExitStatus.CANNOT_RUN


def test_expect_refuses_unexpected_types(pair):
    a, b = pair
    Channel(a, "b", 2).send({"type": "go"})
    with pytest.raises(ProtocolError):
        Channel(b, "a", 2).expect("ready", "the server")


@pytest.mark.parametrize(
    "host,expected",
    [
        ("127.0.0.1", True),
        ("127.3.4.5", True),
        ("::1", True),
        ("::ffff:127.0.0.1", True),
        ("10.0.0.1", False),
        ("::ffff:10.0.0.1", False),
        ("fe80::1%eth0", False),
        ("nonsense", False),
    ],
)
def test_is_loopback(host, expected):
    assert is_loopback(host) is expected


def test_macs_depend_on_token_role_and_both_nonces():
    t, s, c = b"token", b"s" * 32, b"c" * 32
    base = client_mac(t, s, c)
    assert base == client_mac(t, s, c)
    assert base != server_mac(t, s, c)
    assert base != client_mac(b"other", s, c)
    assert base != client_mac(t, b"x" * 32, c)
    assert base != client_mac(t, s, b"x" * 32)
    assert "token" not in base


def test_read_token_file(tmp_path):
    p = tmp_path / "tok"
    p.write_text("  abc123\n")
    assert read_token_file(p) == b"abc123"
    (tmp_path / "empty").write_text("\n \n")
    with pytest.raises(InputError, match="empty"):
        read_token_file(tmp_path / "empty")
    with pytest.raises(InputError, match="no such file"):
        read_token_file(tmp_path / "missing")
    assert token_from_env(None) is None
    assert token_from_env("  ") is None
    assert token_from_env(" xyz ") == b"xyz"


# --- the handshake, both halves over one real connection ------------------------------------------


def _handshake(pair, *, server_token, client_token, client_ip="127.0.0.1"):
    a, b = pair
    out: dict[str, object] = {}

    def serve() -> None:
        try:
            out["server"] = server_handshake(
                Channel(b, "client", 2),
                token=server_token,
                client_ip=client_ip,
                host="srv",
                version="9.9",
                transports=("tcp",),
            )
        except Exception as e:
            out["server"] = e

    t = threading.Thread(target=serve)
    t.start()
    try:
        out["client"] = client_handshake(
            Channel(a, "server", 2), token=client_token, host="cli", version="9.9"
        )
    except Exception as e:
        out["client"] = e
        a.shutdown(socket.SHUT_RDWR)  # a client that gives up hangs up, as the real one does
    t.join(5)
    return out["server"], out["client"]


def test_handshake_with_matching_tokens(pair):
    srv, cli = _handshake(pair, server_token=b"t0k", client_token=b"t0k", client_ip="10.1.2.3")
    assert srv.host == "cli" and cli.host == "srv" and cli.transports == ("tcp",)


def test_handshake_wrong_token(pair):
    srv, cli = _handshake(pair, server_token=b"right", client_token=b"wrong")
    assert isinstance(srv, Refused) and srv.reason == "wrong token"
    assert isinstance(cli, RemoteError) and cli.code == "auth"
    assert "tokens differ" in cli.message


def test_handshake_client_without_token(pair):
    srv, cli = _handshake(pair, server_token=b"right", client_token=None)
    assert isinstance(cli, CannotRunError) and "requires a token" in cli.message


def test_handshake_without_token_refuses_remote_clients(pair):
    srv, cli = _handshake(pair, server_token=None, client_token=None, client_ip="10.0.0.7")
    assert isinstance(srv, Refused) and "loopback" in srv.reason
    assert isinstance(cli, RemoteError) and "loopback" in cli.message


def test_handshake_without_token_accepts_loopback(pair):
    srv, cli = _handshake(pair, server_token=None, client_token=None, client_ip="::ffff:127.0.0.1")
    assert srv.host == "cli"


def test_handshake_client_refuses_a_tokenless_server(pair):
    srv, cli = _handshake(pair, server_token=None, client_token=b"mine")
    assert isinstance(cli, CannotRunError) and "without a token" in cli.message


def test_handshake_wrong_version(pair, monkeypatch):
    a, b = pair
    ch = Channel(a, "server", 2)
    out = {}

    def serve() -> None:
        try:
            server_handshake(
                Channel(b, "client", 2),
                token=None,
                client_ip="127.0.0.1",
                host="srv",
                version="9",
                transports=("tcp",),
            )
        except Refused as e:
            out["r"] = e

    t = threading.Thread(target=serve)
    t.start()
    hello = ch.recv("hello")
    assert hello["version"] == protocol.VERSION and hello["auth"] == "none"
    ch.send(
        {"type": "hello", "proto": protocol.PROTO, "version": 99, "nonce": "00" * 32, "mac": None}
    )
    with pytest.raises(RemoteError) as e:
        ch.expect("welcome", "welcome")
    t.join(5)
    assert e.value.code == "version" and "99" in e.value.message
    assert out["r"].code == "version"


def test_client_detects_a_server_that_does_not_know_the_token(pair):
    """A man in the middle (or a stranger on the port) cannot fake the server's proof."""
    a, b = pair
    fake = Channel(b, "client", 2)

    def impostor() -> None:
        fake.send(
            {
                "type": "hello",
                "proto": protocol.PROTO,
                "version": protocol.VERSION,
                "auth": "hmac-sha256",
                "nonce": "11" * 32,
                "host": "x",
                "ibdiag": "1",
            }
        )
        fake.recv("hello")
        fake.send({"type": "welcome", "mac": "00" * 32})

    t = threading.Thread(target=impostor)
    t.start()
    with pytest.raises(CannotRunError, match="did not prove"):
        client_handshake(Channel(a, "server", 2), token=b"secret", host="c", version="1")
    t.join(5)


def test_connect_errors_are_exit_3():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    with pytest.raises(CannotRunError, match="nothing is listening"):
        protocol.connect("127.0.0.1", port, 2)
    with pytest.raises(CannotRunError, match="cannot resolve"):
        protocol.connect("no-such-host.invalid", 1, 2)


# --- the request ------------------------------------------------------------------------------------


def test_run_request_round_trip_and_limits():
    req = RunRequest(
        transport="tcp", mode="both", sizes=(4096, 2**20), duration_s=0.5, streams=2, bidir=True
    )
    again = RunRequest.from_json(req.to_json())
    assert again == req
    assert again.kinds == ("bw", "lat")
    assert again.buffer_problem(2**20) is None
    assert "more than this server's --max-size of 512 KiB" in again.buffer_problem(2**19)
    assert (
        "tcp bw+lat, 2 sizes 4 KiB..1 MiB, 2 streams, bidirectional, 0.5 s per size"
        == again.describe()
    )


@pytest.mark.parametrize(
    "change",
    [
        {"transport": "udp"},
        {"mode": "all"},
        {"sizes": []},
        {"sizes": [0]},
        {"sizes": ["4K"]},
        {"sizes": [1] * 65},
        {"iters": 10, "duration_s": 1.0},
        {"iters": 0},
        {"duration_s": -1},
        {"duration_s": float("inf")},
        {"streams": 0},
        {"streams": 33},
        {"bidir": "yes"},
        {"warmup": -1},
        {"tx_depth": 0},
    ],
)
def test_run_request_refuses_bad_fields(change):
    doc = RunRequest(transport="tcp", mode="bw", sizes=(4096,)).to_json()
    doc.update(change)
    with pytest.raises(ValueError):
        RunRequest.from_json(doc)


def test_auto_warmup_and_latency_iterations():
    assert auto_warmup(4096, "bw") == 1000  # 32 MiB / 4 KiB = 8192, capped
    assert auto_warmup(2**20, "bw") == 32
    assert auto_warmup(2**30, "bw") == 2
    assert auto_warmup(8, "lat") == 200
    assert auto_warmup(2**20, "lat") == 8
    # 2 s of 20 µs round trips = 100000 iterations, from the warm-up median
    assert latency_iterations(2.0, [20_000, 19_000, 1_000_000]) == 100_000
    assert latency_iterations(0.001, [1_000_000_000]) == 10
    assert latency_iterations(3600, [1]) == 5_000_000
    assert RunRequest(transport="tcp", mode="bw", sizes=(8,)).measure_duration_s == 1.0
    assert RunRequest(transport="tcp", mode="bw", sizes=(8,), iters=5).measure_duration_s is None
